"""The rules that tell a listed Message Batch to be a submission's whose id was never saved
(`postledger.upstreams.anthropic_batch_match`), as plain functions over listings: the window,
the size, the results' ids with the key's token."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from postledger.upstreams.anthropic_batch_match import (
    CLOCK_SLACK,
    Listed,
    Window,
    batch_of_line,
    line_id,
    listed_as,
    results_are_its,
)
from postledger.upstreams.calls import JobWanted

pytestmark = pytest.mark.unit
WRITTEN = datetime(2026, 10, 31, 22, 0, tzinfo=UTC)
WANTED = JobWanted("2026-10-s1", "k" * 32, ("2026-10-b0001", "2026-10-b0002"), WRITTEN)
WINDOW = Window.of(WANTED, WRITTEN + timedelta(hours=1))


def listed(created: datetime | str | None, **counts: int) -> dict[str, Any]:
    stamp = created.isoformat().replace("+00:00", "Z") if isinstance(created, datetime) else created
    return {
        "id": "msgbatch_x",
        "created_at": stamp,
        "request_counts": counts or {"processing": 0, "succeeded": 2, "errored": 0},
    }


def test_a_request_line_names_its_batch_and_a_token_of_the_key() -> None:
    custom_id = line_id("2026-10-b0001", "key-1")
    assert custom_id.startswith("2026-10-b0001_") and len(custom_id) <= 64
    assert batch_of_line(custom_id) == "2026-10-b0001"
    assert batch_of_line("2026-10-b0001") == "2026-10-b0001"  # a line made before the token
    assert line_id("2026-10-b0001", "key-1") == custom_id  # the same submission: the same id
    assert line_id("2026-10-b0001", "key-2") != custom_id


@pytest.mark.parametrize(
    ("created", "counts", "standing"),
    [
        (WRITTEN + timedelta(seconds=2), {}, Listed.CANDIDATE),
        (WRITTEN - CLOCK_SLACK + timedelta(seconds=1), {}, Listed.CANDIDATE),  # a skewed clock
        (WRITTEN - CLOCK_SLACK - timedelta(seconds=1), {}, Listed.OLDER),
        (WRITTEN + timedelta(hours=1) + CLOCK_SLACK + timedelta(seconds=1), {}, Listed.OUTSIDE),
        (WRITTEN + timedelta(seconds=2), {"processing": 3}, Listed.OUTSIDE),  # another size
        (WRITTEN + timedelta(seconds=2), {"processing": 1, "errored": 1}, Listed.CANDIDATE),
        ("yesterday", {}, Listed.UNREADABLE),  # not a listing Anthropic gives: no verdict
        (None, {}, Listed.UNREADABLE),
    ],
)
def test_a_listed_batch_is_a_candidate_only_in_the_window_and_of_the_size(
    created: datetime | str | None, counts: dict[str, int], standing: Listed
) -> None:
    assert listed_as(listed(created, **counts), WANTED, WINDOW) is standing


def test_a_batch_without_counts_is_neither_adopted_nor_ruled_out() -> None:
    batch = listed(WRITTEN + timedelta(seconds=2))
    del batch["request_counts"]
    assert listed_as(batch, WANTED, WINDOW) is Listed.UNREADABLE


def test_the_results_must_be_exactly_the_submissions_lines() -> None:
    ours = [line_id(b, WANTED.idempotency_key) for b in WANTED.batch_ids]
    assert results_are_its(ours, WANTED)
    assert results_are_its(reversed(ours), WANTED)
    assert not results_are_its(list(WANTED.batch_ids), WANTED)  # no token: not this submission
    assert not results_are_its([line_id(b, "another key") for b in WANTED.batch_ids], WANTED)
    assert not results_are_its(ours[:1], WANTED)
    assert not results_are_its([*ours, ours[0]], WANTED)  # a line twice
    assert not results_are_its([ours[0], line_id("2026-10-b0003", WANTED.idempotency_key)], WANTED)
