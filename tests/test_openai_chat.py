"""OpenAI-compatible chat completions over real HTTP against the simulator: the classified
failures (R10-R14) and recovery (R24) with a synchronous upstream that keeps no task id and
honours no idempotency key. Evidence: the ledger and /_sim/charges."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from postledger.ledger import Ledger
from postledger.record.crash import CRASH_EXIT_CODE
from postledger.record.models import Answer, BatchStatus, Charge, FailureKind, PostStatus
from tests.conftest import Sim, fast_timings, start_openai_sim
from tests.test_faults import MONTH, assert_attempts_are_charges, run, statuses
from tests.test_recovery import postledger, run_month

KIND = "openai_chat"


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    fast_timings(monkeypatch, chat_timeout="1")


@pytest.fixture
def chat(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[Sim]:
    yield from start_openai_sim(monkeypatch, KIND, latency=0.1, faults=request.param)


@pytest.mark.parametrize("chat", ["create:http_503#1"], indirect=True)
def test_an_overloaded_server_is_retried_and_charged_once_with_no_task_id(
    prefect_harness: None, chat: Sim, ledger: Ledger, tmp_path: Path
) -> None:
    run(tmp_path, 25)
    assert statuses(ledger) == {"completed": 25}
    assert chat.stats()["requests"]["create"] == 2
    assert len(chat.charges()) == 1
    (batch,) = ledger.batches(MONTH)
    assert (batch.upstream_task_id, batch.request_retries, batch.sends) == (None, 1, 1)
    assert batch.usage and batch.usage["input_tokens"] > 0 and batch.usage["output_tokens"] > 0
    assert_attempts_are_charges(ledger, chat)


@pytest.mark.parametrize(
    ("chat", "at_least"),
    [
        ("create:rate_limit#1;retry_after=2", 2.0),
        ("create:rate_limit#1;retry_after=reset:2", 2.0),  # only x-ratelimit-reset-requests
    ],
    indirect=["chat"],
)
def test_rate_limit_exceeded_waits_as_asked_then_completes(
    prefect_harness: None, chat: Sim, ledger: Ledger, tmp_path: Path, at_least: float
) -> None:
    run(tmp_path, 25)
    assert statuses(ledger) == {"completed": 25}
    assert len(chat.charges()) == 1  # the refused request cost nothing
    events = ledger.events(MONTH)
    waited = next(e for e in events if e.entity_id == "p000" and e.to_status == "waiting")
    released = next(e for e in events if e.entity_id == "p000" and e.why == "wait over")
    # The wait is counted from the moment the refusal was judged, a ledger write before the
    # `waiting` event is stamped: on a loaded machine that write can take a tenth of a second.
    assert released.at - waited.at >= timedelta(seconds=at_least - 0.25)
    assert all(p.attempts == 1 and p.requeues == 1 for p in ledger.posts(MONTH))


@pytest.mark.parametrize(
    ("chat", "kind"),
    [
        ("create:quota#1", FailureKind.QUOTA),  # 429 with code insufficient_quota
        ("create:auth#1", FailureKind.AUTH),  # 401 invalid_api_key
        ("create:permission#1", FailureKind.PERMISSION),  # 403
    ],
    indirect=["chat"],
)
def test_quota_key_and_permission_stop_the_run_without_paying(
    prefect_harness: None,
    chat: Sim,
    ledger: Ledger,
    tmp_path: Path,
    kind: FailureKind,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from flows.monthly import RunStopped

    monkeypatch.setenv("POSTLEDGER_MAX_IN_FLIGHT", "1")
    with pytest.raises(RunStopped, match=kind.value):
        run(tmp_path, 30)
    assert chat.stats()["requests"]["create"] == 1 and chat.charges() == []
    failed = ledger.posts(MONTH, PostStatus.FAILED)
    assert len(failed) == 25 and {p.failure_kind for p in failed} == {kind}
    assert all(p.attempts == 0 for p in failed)
    assert ledger.batches(MONTH)[0].charge is Charge.NONE


@pytest.mark.parametrize("chat", ["output:not_json#1"], indirect=True)
def test_an_unusable_answer_is_split_into_halves(
    prefect_harness: None, chat: Sim, ledger: Ledger, tmp_path: Path
) -> None:
    run(tmp_path, 25)
    assert sorted(len(c["post_ids"]) for c in chat.charges()) == [12, 13, 25]
    assert statuses(ledger) == {"completed": 25}
    assert ledger.batches(MONTH)[0].failure_kind is FailureKind.BATCH_INVALID
    assert_attempts_are_charges(ledger, chat)


@pytest.mark.parametrize("chat", ["output:bad_field#1"], indirect=True)
def test_one_invalid_post_is_retried_alone(
    prefect_harness: None, chat: Sim, ledger: Ledger, tmp_path: Path
) -> None:
    run(tmp_path, 25)
    assert [len(c["post_ids"]) for c in chat.charges()] == [25, 1]
    assert statuses(ledger) == {"completed": 25}
    assert_attempts_are_charges(ledger, chat)


@pytest.mark.parametrize(
    "chat",
    # No answer; and a 500 that came after the model ran and was billed (as behind a gateway).
    ["create:timeout_after_create#1;hold=3", "create:http_500_after_create#1"],
    indirect=True,
)
def test_a_request_left_unanswered_is_uncertain_and_never_resent_automatically(
    prefect_harness: None,
    chat: Sim,
    ledger: Ledger,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from postledger.recovery.interrupted import RecoveryAction, recovery_plan
    from postledger.settings import Settings

    monkeypatch.setenv("POSTLEDGER_MAX_IN_FLIGHT", "1")
    run(tmp_path, 30)
    first, second = ledger.batches(MONTH)
    # Uncertain, not failed: the model may have run and billed it.
    assert (first.status, first.failure_kind, first.charge) == (
        BatchStatus.RUNNING,
        None,
        Charge.POSSIBLE,
    )
    assert second.status is BatchStatus.COMPLETED
    assert chat.stats()["requests"]["create"] == 2  # the unanswered one, then the next batch
    assert_attempts_are_charges(ledger, chat)  # it was made upstream: 1 charge, 1 attempt
    (step,) = recovery_plan(ledger, MONTH, Settings()).steps
    assert step.action is RecoveryAction.RESUBMIT and "charged twice" in step.why


# --- recovery: a run killed mid-request ------------------------------------------------------


@pytest.fixture
def chat_sim(monkeypatch: pytest.MonkeyPatch) -> Iterator[Sim]:
    monkeypatch.setenv("POSTLEDGER_MAX_BATCH_POSTS", "3")
    yield from start_openai_sim(monkeypatch, KIND, latency=0.2)


@pytest.mark.processes  # runs postledger in other processes
def test_an_interrupted_request_is_resubmitted_only_after_a_yes(
    chat_sim: Sim, ledger_url: str, tmp_path: Path
) -> None:
    crashed = run_month(tmp_path, POSTLEDGER_CRASH_AT="after_create")
    assert crashed.returncode == CRASH_EXIT_CODE, crashed.stdout + crashed.stderr
    ledger = Ledger(ledger_url)
    running = ledger.batches(MONTH, BatchStatus.RUNNING)
    assert running and all(b.upstream_task_id is None for b in running)
    ledger.close()
    plan = json.loads(postledger(tmp_path, "plan", "--month", MONTH, "--json").stdout)
    resubmit = plan["groups"]["resubmit"]["batches"]
    assert resubmit and plan["idempotent_upstream"] is False
    assert plan["possible_double_charge_input_tokens"] > 0
    at_crash = Counter(pid for c in chat_sim.charges() for pid in c["post_ids"])

    unanswered = run_month(tmp_path, POSTLEDGER_APPROVAL_TIMEOUT="1")
    assert unanswered.returncode == 1, unanswered.stdout + unanswered.stderr
    ledger = Ledger(ledger_url)
    for batch_id in resubmit:  # asked, nobody answered: nothing sent again, nothing paid
        batch = ledger.batch(batch_id)
        assert batch.status is BatchStatus.RUNNING
        assert all(
            Counter(pid for c in chat_sim.charges() for pid in c["post_ids"])[pid] == at_crash[pid]
            for pid in batch.post_ids
        )
    (asked,) = ledger.approvals.approvals(MONTH)
    assert asked.answer is Answer.TIMED_OUT
    ledger.close()

    confirmed = run_month(tmp_path, "--poll", "--resubmit")
    assert confirmed.returncode == 0, confirmed.stdout + confirmed.stderr
    ledger = Ledger(ledger_url)
    assert {p.status for p in ledger.posts(MONTH)} == {PostStatus.COMPLETED}
    assert all(b.upstream_task_id is None for b in ledger.batches(MONTH))
    charged = Counter(pid for c in chat_sim.charges() for pid in c["post_ids"])
    resent = {pid for b in resubmit for pid in ledger.batch(b).post_ids}
    # Paid twice exactly where the person confirmed sending again what was already made.
    assert {pid for pid, n in charged.items() if n == 2} == {
        pid for pid in resent if at_crash[pid] == 1
    }
    assert max(charged.values()) <= 2
    ledger.close()


# --- rate-limit headers (the API key: tests/test_faults.py, for every kind) ------------------


def test_rate_limit_headers_as_openai_writes_them() -> None:
    from httpx import Headers

    from postledger.upstreams.http import parse_reset, retry_after_of

    assert parse_reset("1s") == 1 and parse_reset("6m0s") == 360 and parse_reset("20ms") == 0.02
    assert parse_reset("1h2m3.5s") == 3723.5 and parse_reset("soon") is None
    assert retry_after_of(Headers({"retry-after": "3", "x-ratelimit-reset-requests": "9s"})) == 3
    assert retry_after_of(Headers({"retry-after-ms": "1500"})) == 1.5
    assert (
        retry_after_of(
            Headers({"x-ratelimit-reset-requests": "2s", "x-ratelimit-reset-tokens": "1m0s"})
        )
        == 60
    )
    assert retry_after_of(Headers({})) is None
