"""The circuit breaker's pure rules (`postledger/guards/breaker.py`: `level_after`, `window`,
`advice`) and the one signal each business decision gives it (`postledger/failures/policy.py`).

Rules proved: R8/R18 (normal lets two batches be in flight, probe one, open none), R18 (a batch's
final transport failure moves normal to probe, a second in a row to open; a success in probe
closes it; request retries inside a batch never count: one decision, at most one signal),
R19 (open stays open whatever arrives: only a person reopens it).
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from postledger.batches.output import OutputCheck
from postledger.failures.policy import Failure, Reach, after_failure, after_output
from postledger.guards.breaker import Signal, advice, level_after, window
from postledger.record.models import (
    BatchRecord,
    BatchStatus,
    BreakerLevel,
    FailureKind,
    PostRecord,
    PostStatus,
)
from postledger.settings import Limits, Settings

# Examples are cheap; no deadline and no example database: the machine is shared, and
# nothing is written outside the test run.
QUICK = settings(
    max_examples=100, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)

NORMAL, PROBE, OPEN = BreakerLevel.NORMAL, BreakerLevel.PROBE, BreakerLevel.OPEN
FAILURE, SUCCESS = Signal.TRANSPORT_FAILURE, Signal.SUCCESS
NOW = datetime(2026, 10, 1, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("level", "signal", "after"),
    [
        (NORMAL, FAILURE, PROBE),
        (PROBE, FAILURE, OPEN),
        (OPEN, FAILURE, OPEN),
        (PROBE, SUCCESS, NORMAL),
        (NORMAL, SUCCESS, NORMAL),
        (OPEN, SUCCESS, OPEN),  # R19: a late success does not reopen it
    ],
)
def test_the_breaker_moves_one_level_per_final_transport_failure_and_closes_on_a_probe_success(
    level: BreakerLevel, signal: Signal, after: BreakerLevel
) -> None:
    assert level_after(level, signal) is after


@pytest.mark.parametrize(("level", "in_flight"), [(NORMAL, 2), (PROBE, 1), (OPEN, 0)])
def test_normal_lets_two_batches_fly_probe_one_and_open_none(
    level: BreakerLevel, in_flight: int
) -> None:
    assert window(level, Settings().max_in_flight) == in_flight


@QUICK
@given(st.integers(min_value=1, max_value=10))
def test_probe_and_open_ignore_the_configured_window(max_in_flight: int) -> None:
    assert window(NORMAL, max_in_flight) == max_in_flight
    assert window(PROBE, max_in_flight) == 1
    assert window(OPEN, max_in_flight) == 0


def test_the_advice_of_an_open_breaker_says_a_person_must_continue_it() -> None:
    assert "postledger approve" in advice(OPEN)
    # With the month, a command to copy as it is; never a placeholder format.
    assert "`postledger approve --month 2026-10 [--note TEXT]`" in advice(OPEN, "2026-10")
    assert "YYYY-MM" not in advice(OPEN)
    assert "one batch at a time" in advice(PROBE)
    assert advice(NORMAL) == "nothing to do"


@QUICK
@given(st.lists(st.sampled_from(list(Signal)), max_size=40))
def test_the_level_follows_the_final_failures_in_a_row_and_open_is_for_good(
    signals: list[Signal],
) -> None:
    level, in_a_row, opened = NORMAL, 0, False
    for signal in signals:
        level = level_after(level, signal)
        in_a_row = in_a_row + 1 if signal is FAILURE else 0
        opened = opened or in_a_row >= 2
        expected = OPEN if opened else (PROBE if in_a_row == 1 else NORMAL)
        assert level is expected


# --- the signal a decision gives (request retries never count) ---------------------------------


def running_batch(request_retries: int, *, task_id: str | None = None) -> BatchRecord:
    return BatchRecord(
        batch_id="2026-09-b0001",
        month="2026-09",
        seq=1,
        post_ids=["p1", "p2"],
        request=[["p1", "a"], ["p2", "b"]],
        status=BatchStatus.RUNNING,
        idempotency_key="k",
        upstream_task_id=task_id,
        sends=1,
        request_retries=request_retries,
    )


def running_posts() -> list[PostRecord]:
    return [
        PostRecord(
            month="2026-09",
            post_id=pid,
            position=i,
            text=pid,
            fingerprint="0" * 64,
            status=PostStatus.RUNNING,
            attempts=1,
            batch_id="2026-09-b0001",
        )
        for i, pid in enumerate(["p1", "p2"])
    ]


CALL_KINDS = [
    FailureKind.TRANSPORT,
    FailureKind.TASK_UNKNOWN,
    FailureKind.REJECTED,
    FailureKind.RATE_LIMITED,
    FailureKind.AUTH,
    FailureKind.QUOTA,
    FailureKind.PERMISSION,
    FailureKind.UPSTREAM_FAILED,
]


@QUICK
@given(
    kind=st.sampled_from(CALL_KINDS),
    reach=st.sampled_from(list(Reach)),
    request_retries=st.integers(min_value=0, max_value=100),
    task_id=st.sampled_from([None, "t-1"]),
    idempotent=st.booleans(),
)
def test_only_a_final_transport_failure_counts_against_the_breaker_however_often_it_was_retried(
    kind: FailureKind,
    reach: Reach,
    request_retries: int,
    task_id: str | None,
    idempotent: bool,
) -> None:
    decision = after_failure(
        running_batch(request_retries, task_id=task_id),
        running_posts(),
        Failure(kind, "failed", reach),
        idempotent=idempotent,
        limits=Limits(),
        now=NOW,
    )
    # One batch, one decision, at most one signal: never one per request retry.
    assert decision.signal is (FAILURE if kind is FailureKind.TRANSPORT else None)


@pytest.mark.parametrize(
    "check",
    [
        OutputCheck(unusable="garbage"),
        OutputCheck(invalid={"p1": "invalid item: x", "p2": "invalid item: y"}),
    ],
)
def test_any_delivered_output_is_a_success_for_the_breaker_even_an_unusable_one(
    check: OutputCheck,
) -> None:
    decision = after_output(running_batch(3), running_posts(), check, Limits())
    assert decision.signal is SUCCESS
