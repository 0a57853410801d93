"""Bad input through the flow: it stops with the loader's message, and the ledger is left
exactly as it was. (The messages themselves: tests/unit/test_input_messages.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from postledger.batches.posts import InputError, Post
from postledger.ledger import Ledger
from tests.support.bad_inputs import BAD_FILES, GOOD
from tests.support.ledgers import asked
from tests.support.ledgers import ledger_snapshot as snapshot
from tests.support.months import write_jsonl


@pytest.fixture
def known_month(ledger: Ledger) -> Ledger:
    """A ledger that already holds work for the month: nothing of it may change."""
    ledger.sync_posts(
        "2026-10", [Post("a", "hello", 1), Post("b", "world", 2)], model="m", analysis=asked()
    )
    ledger.plan("2026-10", max_posts=25, max_chars=1000)
    return ledger


FLOW_CASES = [*BAD_FILES, "empty_file", "bad_month"]


@pytest.mark.on_postgres  # each bad input is refused before any write
@pytest.mark.parametrize("case", FLOW_CASES)
def test_flow_rejects_bad_input_and_leaves_ledger_unchanged(
    prefect_harness: None, known_month: Ledger, tmp_path: Path, case: str
) -> None:
    from flows.monthly import monthly_posts

    month = "2026-10"
    path = tmp_path / "posts.jsonl"
    if case == "empty_file":
        path.write_text("", encoding="utf-8")
    elif case == "bad_month":
        write_jsonl(path, [GOOD])
        month = "2026-13"
    else:
        write_jsonl(path, BAD_FILES[case][0])
    before = snapshot(known_month)

    with pytest.raises(InputError) as caught:
        monthly_posts(month=month, posts_path=str(path))

    assert (
        ("YYYY-MM" in str(caught.value))
        if case == "bad_month"
        else (str(path) in str(caught.value))
    )
    assert snapshot(known_month) == before
