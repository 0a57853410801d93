"""One error root: every exception postledger defines (core, shell, CLI) derives from
`PostledgerError`, never straight from a builtin one, so that a caller can catch postledger's
errors apart from its own bugs. Read from the source, not imported: no Prefect needed."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

from postledger.errors import PostledgerError

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("postledger", "flows", "tasks", "blocks", "cli")
# Errors, not exits: a `SystemExit` that carries its message (flows/local_server.py) ends a
# command on purpose, with no traceback.
BUILTIN_ERRORS = {
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, Exception)
}


def _classes_on_builtin_errors() -> list[str]:
    found = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not isinstance(node, ast.ClassDef) or node.name.startswith("_"):
                    continue
                bases = {base.id for base in node.bases if isinstance(base, ast.Name)}
                if bases & BUILTIN_ERRORS:
                    found.append(f"{path.relative_to(REPO)} {node.name}")
    return found


def test_only_the_root_derives_from_a_builtin_exception() -> None:
    assert _classes_on_builtin_errors() == ["postledger/errors.py PostledgerError"]


def test_the_errors_a_run_shows_are_in_the_family() -> None:
    from postledger.batches.posts import InputError
    from postledger.preflight import NotReady
    from postledger.record.db import LedgerUnavailable
    from postledger.record.month_lease import MonthBusy
    from postledger.upstreams.errors import RejectedError, TransportError

    for error in (InputError, NotReady, LedgerUnavailable, MonthBusy, TransportError):
        assert issubclass(error, PostledgerError)
    assert issubclass(RejectedError, PostledgerError)
