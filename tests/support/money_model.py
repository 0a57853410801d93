"""The pieces of the money model (`tests/ledger/test_money_model.py`) that are not the machine
itself: a fresh ledger per Hypothesis example, and the moments a trip can be made to fail at (a
ledger write the database refuses, a crash, the month lost to another run). The model upstream
at the wire is `tests/support/model_upstream.py`.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy.exc import OperationalError

from postledger.analysis import load_analysis
from postledger.ledger import Ledger
from tests.support.databases import fresh_ledger_database
from tests.support.ledger_backend import LEDGER_ON_POSTGRES, PG_ADMIN_URL
from tests.support.ledger_faults import InjectedDiskError
from tests.support.model_upstream import Crash

PROMPT = "Classify each post: category, sentiment, one sentence."
# What the months are asked: the built-in analysis with PROMPT as its instructions (the
# settings' `prompt`).
ANALYSIS = load_analysis(None, instructions=PROMPT)


@dataclass
class Mishaps:
    """Where a trip goes wrong, counted in moments: each request that reached the upstream
    (after it was served) and each write statement the ledger is asked to run. `crash_at`:
    the process dies there (after a request is served: its answer never arrives; before a
    write: it is never made); `ledger_fails_at`: that write fails as a database that lost its
    disk would; `lease_lost_at`: after that request, another run takes the month over."""

    crash_at: int | None = None
    ledger_fails_at: int | None = None
    lease_lost_at: int | None = None
    moment: int = 0
    take_over: Callable[[], None] | None = None

    def after_request(self) -> None:
        self.moment += 1
        if self.moment == self.lease_lost_at and self.take_over is not None:
            self.take_over()
        if self.moment == self.crash_at:
            raise Crash(f"crash after request {self.moment}")

    def before_write(self, statement: str, parameters: Any) -> None:
        self.moment += 1
        if self.moment == self.crash_at:
            raise Crash(f"crash before write {self.moment}")
        if self.moment == self.ledger_fails_at:
            raise OperationalError(statement, parameters, InjectedDiskError())


WRITES = ("INSERT", "UPDATE", "DELETE")


@contextmanager
def mishaps_in(engine: Engine, mishaps: Mishaps) -> Iterator[Mishaps]:
    """The ledger's write statements meet `mishaps` while the block runs."""

    def before(
        _conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: bool
    ) -> None:
        if statement.lstrip().upper().startswith(WRITES):
            mishaps.before_write(statement, parameters)

    event.listen(engine, "before_cursor_execute", before)
    try:
        yield mishaps
    finally:
        event.remove(engine, "before_cursor_execute", before)


# --- a fresh ledger per example ------------------------------------------------------------

_template: Path | None = None


def _sqlite_template() -> Path:
    """One migrated, empty SQLite ledger per process, copied for each example: migrating a
    new file takes ~0.4 s, copying it ~1 ms."""
    global _template
    if _template is None:
        folder = Path(tempfile.mkdtemp(prefix="postledger-money-template-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        path = folder / "template.db"
        Ledger(f"sqlite:///{path}").close()
        _template = path
    return _template


@contextmanager
def fresh_ledger_url() -> Iterator[str]:
    """A new, empty ledger: a SQLite file in a folder of its own, or (in the suite's
    PostgreSQL pass) a new database copied from a migrated template, dropped at exit."""
    if LEDGER_ON_POSTGRES:
        with fresh_ledger_database(PG_ADMIN_URL) as url:
            yield url
        return
    folder = Path(tempfile.mkdtemp(prefix="postledger-money-"))
    try:
        path = folder / "ledger.db"
        shutil.copyfile(_sqlite_template(), path)
        yield f"sqlite:///{path}"
    finally:
        shutil.rmtree(folder, ignore_errors=True)
