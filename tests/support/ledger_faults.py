"""A ledger that fails a chosen write, as a database that just lost its disk or its connection
would: the driver's own error (`OperationalError`) for the statements that match, raised at
the driver's door (SQLAlchemy's `before_cursor_execute`). Nothing of postledger is replaced:
its write path meets a real database error and does what it does with one.

    with failing_writes(ledger_url, "UPDATE batches SET upstream_task_id") as failed:
        ...                          # the next such write fails; `failed` lists what failed
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event
from sqlalchemy.exc import OperationalError

from postledger.ledger import open_ledger


class InjectedDiskError(Exception):
    """What the database said: shown in the ledger's error message."""

    def __str__(self) -> str:
        return "disk I/O error (injected by the test)"


@contextmanager
def failing_writes(ledger_url: str, matches: str, times: int = 1) -> Iterator[list[str]]:
    """The next `times` statements (of this process's shared ledger, `open_ledger`) whose SQL
    starts with `matches` fail; yields the statements that failed."""
    engine = open_ledger(ledger_url).engine
    failed: list[str] = []

    def fail(
        _conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: bool
    ) -> None:
        if statement.lstrip().startswith(matches) and len(failed) < times:
            failed.append(statement)
            raise OperationalError(statement, parameters, InjectedDiskError())

    event.listen(engine, "before_cursor_execute", fail)
    try:
        yield failed
    finally:
        event.remove(engine, "before_cursor_execute", fail)
