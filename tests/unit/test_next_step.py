"""How to continue after a failure, as one short line of plain text (a cell of a table
artifact in the Prefect UI shows no markdown and cuts long text)."""

from __future__ import annotations

import pytest

from postledger.failures.hints import CONTINUE_HINTS, FINAL, next_step
from postledger.record.models import FailureKind


@pytest.mark.parametrize("kind", [*FailureKind, None])
def test_how_to_continue_fits_a_cell_of_plain_text(kind: FailureKind | None) -> None:
    short = next_step(kind)
    assert short and "`" not in short and "\n" not in short and len(short) <= 45
    hint = CONTINUE_HINTS.get(kind) if kind is not None else None
    if hint is None:
        assert short == FINAL
    elif "`" in hint:  # the command the hint names, exactly
        assert f"`{short}`" in hint and short.startswith("postledger ")
