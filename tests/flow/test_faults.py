"""One test per fault class, over real HTTP against the fault-injecting simulator, for every
upstream kind the rule applies to: the task API (`task_api`), OpenAI chat completions
(`openai_chat`: synchronous, no task id, no idempotency key), the OpenAI Batch API
(`openai_batch`) and Anthropic's Messages API (`anthropic_messages`: synchronous, like chat).
The evidence: the final ledger (statuses, kinds, attempts, request retries)
and /_sim/charges. What only one kind has: tests/flow/test_openai_chat.py, test_openai_batch.py.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from postledger.ledger import Ledger
from postledger.record.models import BatchStatus, BreakerLevel, Charge, FailureKind, PostStatus
from postledger.upstreams.anthropic_batch_match import batch_of_line
from tests.support.ledgers import ledger_text
from tests.support.months import MONTH, assert_attempts_are_charges, statuses
from tests.support.months import run_flow as run
from tests.support.prefect_api import logs_shipped, logs_since
from tests.support.processes import free_port
from tests.support.simulators import UPSTREAM_KINDS, Sim, start_sim
from tests.support.simulators import fault_cases as cases

pytestmark = [
    pytest.mark.usefixtures("fast_retries"),
]

# One set for every kind: each setting is read by the kinds it concerns only.
FAST_TIMINGS = {
    "read_timeout": "1",
    "poll_wait": "0.5",  # task_api: long polls
    "poll_interval": "0.05",  # openai_batch: no long polls
    "create_settle": "0.5",  # openai_batch: a lost create's batch is looked for after this
    "chat_timeout": "1",  # openai_chat: its read timeout
}
TASK_API, CHAT, BATCH, MESSAGES, MESSAGE_BATCHES = UPSTREAM_KINDS
SYNCHRONOUS = (CHAT, MESSAGES)  # answered at once: no task id, no idempotency key
# The kinds whose upstream keeps a task (a batch) to poll.
WITH_TASKS = (TASK_API, BATCH, MESSAGE_BATCHES)
# Those that bill a task that failed upstream (Anthropic bills no errored request).
BILL_FAILED_TASKS = (TASK_API,)


# --- R13: some posts invalid -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "faulty"),
    cases(UPSTREAM_KINDS, "output:bad_field#1")
    + cases((TASK_API,), "output:missing_id#1", "output:stray_id#1", "output:duplicate_id#1"),
    indirect=["faulty"],
)
def test_one_invalid_post_is_retried_alone(
    prefect_harness: None, faulty: Sim, ledger: Ledger, tmp_path: Path, kind: str
) -> None:
    run(tmp_path, 25)
    charges = faulty.charges()
    assert [len(c["post_ids"]) for c in charges] == [25, 1]
    (retried,) = charges[1]["post_ids"]
    assert statuses(ledger) == {"completed": 25}
    first_batch = ledger.batches(MONTH)[0]
    assert first_batch.status is BatchStatus.COMPLETED
    assert (
        first_batch.failure_reason is None
        and "24 completed, 1 invalid"
        in [e.why for e in ledger.events(MONTH) if e.entity_id == first_batch.batch_id][-1]
    )
    assert {p.post_id: p.attempts for p in ledger.posts(MONTH)} == {
        p.post_id: 2 if p.post_id == retried else 1 for p in ledger.posts(MONTH)
    }
    assert_attempts_are_charges(ledger, faulty)


# --- R12: whole output unusable ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "faulty"),
    cases((TASK_API, *SYNCHRONOUS, BATCH, MESSAGE_BATCHES), "output:not_json#1")
    + cases((TASK_API,), "output:wrong_shape#1", "output:unknown_ids#1"),
    indirect=["faulty"],
)
def test_unusable_output_is_split_into_halves_once(
    prefect_harness: None, faulty: Sim, ledger: Ledger, tmp_path: Path, kind: str
) -> None:
    run(tmp_path, 25)
    # The Batch API sends both halves in the next job, one line each.
    half_sizes = [25] if kind == BATCH else [12, 13]
    assert sorted(len(c["post_ids"]) for c in faulty.charges()) == sorted([*half_sizes, 25])
    assert statuses(ledger) == {"completed": 25}
    first, *halves = ledger.batches(MONTH)
    assert first.failure_kind is FailureKind.BATCH_INVALID
    assert [h.split_from for h in halves] == [first.batch_id] * 2
    assert_attempts_are_charges(ledger, faulty)


@pytest.mark.parametrize("faulty", ["output:truncated#1"], indirect=True)
def test_an_output_cut_short_keeps_its_complete_items_and_resends_only_the_rest(
    prefect_harness: None, faulty: Sim, ledger: Ledger, tmp_path: Path
) -> None:
    run(tmp_path, 25)
    first, *rest = [len(c["post_ids"]) for c in faulty.charges()]
    assert first == 25 and len(rest) == 1 and 0 < rest[0] < 25  # the posts after the cut
    assert statuses(ledger) == {"completed": 25}
    assert not any(b.split_from for b in ledger.batches(MONTH))  # nothing to split
    assert_attempts_are_charges(ledger, faulty)


@pytest.mark.parametrize("faulty", ["output:not_json#1+2"], indirect=True)
def test_a_half_that_fails_the_same_way_ends_failed(
    prefect_harness: None, faulty: Sim, ledger: Ledger, tmp_path: Path
) -> None:
    run(tmp_path, 25)
    assert len(faulty.charges()) == 3  # no third round
    failed = ledger.posts(MONTH, PostStatus.FAILED)
    assert len(failed) in (12, 13)
    assert {p.failure_kind for p in failed} == {FailureKind.BATCH_INVALID}
    assert statuses(ledger)["completed"] == 25 - len(failed)
    assert_attempts_are_charges(ledger, faulty)


@pytest.mark.parametrize("faulty", ["output:not_json@1.0"], indirect=True)
def test_a_single_post_batch_is_not_split(
    prefect_harness: None, faulty: Sim, ledger: Ledger, tmp_path: Path
) -> None:
    run(tmp_path, 1)
    assert len(faulty.charges()) == 1
    (post,) = ledger.posts(MONTH)
    assert (post.status, post.failure_kind) == (PostStatus.FAILED, FailureKind.BATCH_INVALID)


# --- R11: rate limited -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "faulty", "at_least"),
    cases(UPSTREAM_KINDS, ("create:rate_limit#1;retry_after=2", 2.0))
    + cases(
        (TASK_API,),
        ("create:rate_limit#1;retry_after=date:3", 2.0),  # HTTP-date, 1 s resolution
        ("create:rate_limit#1;retry_after=missing", 1.0),  # the configured default wait
        ("create:rate_limit#1;retry_after=garbage", 1.0),
    )
    # Only OpenAI's x-ratelimit-reset-requests, no Retry-After.
    + cases((CHAT,), ("create:rate_limit#1;retry_after=reset:2", 2.0))
    # Only Anthropic's anthropic-ratelimit-requests-reset time, no retry-after.
    + cases((MESSAGES,), ("create:rate_limit#1;retry_after=reset:3", 2.0)),
    indirect=["faulty"],
)
def test_rate_limited_posts_wait_then_complete(
    prefect_harness: None, faulty: Sim, ledger: Ledger, tmp_path: Path, at_least: float
) -> None:
    run(tmp_path, 25)
    assert statuses(ledger) == {"completed": 25}
    assert faulty.creates() == 2
    assert len(faulty.charges()) == 1  # the refused create cost nothing
    events = ledger.events(MONTH)
    waited = next(e for e in events if e.entity_id == "p000" and e.to_status == "waiting")
    released = next(e for e in events if e.entity_id == "p000" and e.why == "wait over")
    # The wait is counted from the moment the refusal was judged, a ledger write before the
    # `waiting` event is stamped: on a loaded machine that moment reached 80 ms. A retry
    # without waiting would take ~10 ms.
    assert released.at - waited.at >= timedelta(seconds=at_least - 0.25)
    assert all(p.attempts == 1 and p.requeues == 1 for p in ledger.posts(MONTH))
    assert_attempts_are_charges(ledger, faulty)


# --- R14: credentials, balance, permission ---------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "faulty", "failure"),
    cases(
        UPSTREAM_KINDS,
        ("create:auth#1", FailureKind.AUTH),  # 401 invalid_api_key
        ("create:quota#1", FailureKind.QUOTA),  # 402; OpenAI's: 429 insufficient_quota
        ("create:permission#1", FailureKind.PERMISSION),  # 403
    )
    + cases((TASK_API,), ("create:quota_429#1", FailureKind.QUOTA))
    # Anthropic: "quota" is a 400 saying the credit balance is too low, this a 402.
    + cases((MESSAGES, MESSAGE_BATCHES), ("create:quota_429#1", FailureKind.QUOTA)),
    indirect=["faulty"],
)
def test_credential_faults_stop_the_run_without_any_retry(
    prefect_harness: None,
    faulty: Sim,
    ledger: Ledger,
    tmp_path: Path,
    failure: FailureKind,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from flows.monthly import RunStopped

    monkeypatch.setenv("POSTLEDGER_MAX_IN_FLIGHT", "1")  # so that "no further batch" is exact
    monkeypatch.setenv("POSTLEDGER_MAX_SUBMISSION_BATCHES", "1")  # Batch APIs: one per job
    with pytest.raises(RunStopped, match=failure.value):
        run(tmp_path, 60)
    assert faulty.creates() == 1  # no retry at all, no further batch
    assert faulty.charges() == []
    failed = ledger.posts(MONTH, PostStatus.FAILED)
    assert len(failed) == 25 and {p.failure_kind for p in failed} == {failure}
    assert all(p.attempts == 0 for p in failed)  # refused: nothing was charged
    reason = failed[0].failure_reason or ""
    said = ("Incorrect API key", "invalid x-api-key")
    assert any(words in reason for words in said) or failure is not FailureKind.AUTH
    (first, *rest) = ledger.batches(MONTH)
    assert first.request_retries == 0 and first.charge is Charge.NONE
    assert {b.status for b in rest} == {BatchStatus.QUEUED}  # never sent
    assert statuses(ledger) == {"failed": 25, "queued": 35}


# --- R10: transport faults at the request layer ----------------------------------------------


@pytest.mark.parametrize(
    ("kind", "faulty"),
    cases(UPSTREAM_KINDS, "create:http_503#1")
    + cases(WITH_TASKS, "poll:http_502#1")
    + cases(
        (TASK_API,),
        # What a create made is found again by its idempotency key: an upstream that keeps
        # tasks and honours keys (on the OpenAI kinds such a create is ambiguous, see below).
        "create:timeout_after_create#1;hold=3",
        "create:http_500_after_create#1",
        "create:reset_after_create#1",
        "create:reset#1",
        "create:timeout#1;hold=3",
        "poll:reset#1",
        "poll:timeout#1;hold=3",
    ),
    indirect=["faulty"],
)
def test_transport_fault_is_retried_and_charged_once(
    prefect_harness: None, faulty: Sim, ledger: Ledger, tmp_path: Path, kind: str
) -> None:
    run(tmp_path, 25)
    assert statuses(ledger) == {"completed": 25}
    (charge,) = faulty.charges()
    (batch,) = ledger.batches(MONTH)
    assert batch.request_retries == 1 and batch.sends == 1
    assert all(p.attempts == 1 for p in ledger.posts(MONTH))
    assert_attempts_are_charges(ledger, faulty)
    if kind == TASK_API:
        assert batch.upstream_task_id == charge["task_id"]
        assert batch.charge is Charge.CONFIRMED
    elif kind in SYNCHRONOUS:  # the answer is the output, no task to poll
        assert batch.upstream_task_id is None
        assert batch.usage and batch.usage["input_tokens"] > 0 and batch.usage["output_tokens"] > 0
    elif kind == MESSAGE_BATCHES:  # the Message Batch's id; its one request is the batch
        assert batch.upstream_task_id and batch.upstream_task_id.startswith("msgbatch_")
        assert batch.charge is Charge.CONFIRMED
        # The request's custom_id: the batch id, with its submission's token.
        assert batch_of_line(charge["idempotency_key"]) == batch.batch_id
    else:  # the Batch API: its batch's id; the submission's key travels in its metadata
        assert batch.upstream_task_id and batch.upstream_task_id.startswith("batch_")
        assert batch.charge is Charge.CONFIRMED
        assert batch.submission_id is not None
        submission = ledger.submission(batch.submission_id)
        assert charge["idempotency_key"] == submission.idempotency_key
        assert submission.upstream_job_id == batch.upstream_task_id


@pytest.mark.parametrize("faulty", ["create:http_503#1+2"], indirect=True)
def test_final_transport_failure_sends_the_same_key_again_and_others_go_on(
    prefect_harness: None,
    faulty: Sim,
    ledger: Ledger,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("POSTLEDGER_REQUEST_RETRIES", "1")
    monkeypatch.setenv("POSTLEDGER_MAX_IN_FLIGHT", "1")
    started = datetime.now(UTC)
    with logs_shipped():
        run(tmp_path, 50)
    assert statuses(ledger) == {"completed": 50}
    # Handled, and said so in the run's log as the UI shows it: one WARNING line in plain
    # words, no ERROR, no traceback.
    logs = logs_since(started)
    assert [log.message for log in logs if log.level >= logging.ERROR] == []
    assert not [
        log for log in logs if "Traceback" in log.message or "NoneType: None" in log.message
    ]
    handled = [log for log in logs if "Handled:" in log.message]
    assert len(handled) == 1 and handled[0].level == logging.WARNING
    assert "HTTP 503" in handled[0].message
    first, second = ledger.batches(MONTH)
    assert (first.sends, first.request_retries) == (2, 1)
    assert [e.why for e in ledger.events(MONTH) if e.entity_id == first.batch_id][2].endswith(
        "sent again later with the same idempotency key"
    )
    assert [c["idempotency_key"] for c in faulty.charges()] == [
        first.idempotency_key,
        second.idempotency_key,
    ]
    assert_attempts_are_charges(ledger, faulty)


@pytest.mark.parametrize(
    ("kind", "faulty"),
    # The task API said not to honour keys; chat completions never do, and keep nothing to be
    # found again. (The Batch API finds what such a create made by its metadata:
    # tests/flow/test_openai_batch.py; a Message Batch is found by what it carries: below.)
    cases((TASK_API, *SYNCHRONOUS), "create:timeout_after_create#1;hold=3")
    # A 500 that came after the model ran and was billed (as behind a gateway).
    + cases(SYNCHRONOUS, "create:http_500_after_create#1"),
    indirect=["faulty"],
)
def test_ambiguous_create_without_idempotency_is_uncertain_never_resent(
    prefect_harness: None,
    faulty: Sim,
    ledger: Ledger,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from postledger.recovery.steps import RecoveryAction, recovery_plan
    from postledger.settings import Settings

    monkeypatch.setenv("POSTLEDGER_UPSTREAM_IDEMPOTENT", "false")
    monkeypatch.setenv("POSTLEDGER_MAX_IN_FLIGHT", "1")
    monkeypatch.setenv("POSTLEDGER_MAX_SUBMISSION_BATCHES", "1")  # Message Batches: one per job
    run(tmp_path, 30)
    assert faulty.creates() == 2  # the ambiguous one, then the next batch
    first, second = ledger.batches(MONTH)
    # Uncertain, not failed: it may have been made and charged, and nothing says otherwise.
    assert (first.status, first.failure_kind, first.charge) == (
        BatchStatus.RUNNING,
        None,
        Charge.POSSIBLE,
    )
    assert first.request_retries == 0
    assert second.status is BatchStatus.COMPLETED
    assert statuses(ledger) == {"running": 25, "completed": 5}
    assert_attempts_are_charges(ledger, faulty)  # the upstream did make it: 1 charge, 1 attempt
    assert ledger.retry_failed(MONTH) == 0  # nothing to resend behind a person's back
    with ledger.plain() as reader:
        plan = recovery_plan(reader, MONTH, Settings())
    (step,) = plan.steps
    assert (step.batch_id, step.action) == (first.batch_id, RecoveryAction.RESUBMIT)
    assert "charged twice" in step.why and plan.double_charge_cost > 0


@pytest.mark.parametrize(
    ("kind", "faulty"),
    cases(
        (MESSAGE_BATCHES,),
        "create:timeout_after_create#1;hold=3",
        "create:http_500_after_create#1",
    ),
    indirect=["faulty"],
)
def test_a_message_batch_whose_create_answer_was_lost_is_found_by_what_it_carries(
    prefect_harness: None,
    faulty: Sim,
    ledger: Ledger,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The Message Batch was made and its requests ran (and were paid for); the answer never
    came. The run looks for it in the listing, waits until it ends, confirms it by its
    results' ids, and follows it: no second Message Batch, no second charge."""
    monkeypatch.setenv("POSTLEDGER_MAX_IN_FLIGHT", "1")
    monkeypatch.setenv("POSTLEDGER_MAX_SUBMISSION_BATCHES", "1")  # one ledger batch per job
    monkeypatch.setenv("POSTLEDGER_CREATE_SETTLE", "0.2")
    run(tmp_path, 30)
    assert statuses(ledger) == {"completed": 30}
    # One Message Batch per ledger batch: the lost one was not made again.
    assert faulty.creates() == len(ledger.batches(MONTH)) == 2
    first = ledger.batches(MONTH)[0]
    assert first.sends == 1 and first.upstream_task_id is not None
    assert any(
        e.entity_id == first.batch_id
        and e.why.startswith(f"found upstream job {first.upstream_task_id}")
        for e in ledger.events(MONTH)
    )
    assert faulty.charged_per_post() == Counter({p.post_id: 1 for p in ledger.posts(MONTH)})
    assert_attempts_are_charges(ledger, faulty)


def test_connection_refused_costs_nothing_and_is_bounded(
    prefect_harness: None, ledger: Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()  # nothing listens there
    monkeypatch.setenv("POSTLEDGER_UPSTREAM_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("POSTLEDGER_REQUEST_RETRIES", "1")
    monkeypatch.setenv("POSTLEDGER_MAX_REQUEUES", "5")
    monkeypatch.setenv("POSTLEDGER_APPROVAL_TIMEOUT", "1")
    monkeypatch.setenv("POSTLEDGER_APPROVAL_POLL", "0.2")
    from flows.dispatch import RunStopped

    # Two final transport failures in a row open the breaker (R18); nobody answers the pause.
    with pytest.raises(RunStopped, match="nobody answered"):
        run(tmp_path, 3)
    posts = ledger.posts(MONTH)
    assert {(p.status, p.failure_kind, p.attempts, p.requeues) for p in posts} == {
        (PostStatus.PENDING, None, 0, 2)
    }
    batches = ledger.batches(MONTH)
    assert len(batches) == 2 and all(b.request_retries == 1 for b in batches)
    assert {b.charge for b in batches} == {Charge.NONE}
    assert ledger.approvals.breaker(f"127.0.0.1:{port}").level is BreakerLevel.OPEN


# --- upstream task failures ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "faulty"),
    cases(BILL_FAILED_TASKS, "task:task_failed#1")
    # The batch's one request failed upstream (a 500 in its line): taken as billed.
    + cases((BATCH,), "output:request_error#1"),
    indirect=["faulty"],
)
def test_failed_upstream_task_is_a_paid_business_retry(
    prefect_harness: None, faulty: Sim, ledger: Ledger, tmp_path: Path
) -> None:
    run(tmp_path, 25)
    assert statuses(ledger) == {"completed": 25}
    assert [len(c["post_ids"]) for c in faulty.charges()] == [25, 25]
    assert ledger.batches(MONTH)[0].failure_kind is FailureKind.UPSTREAM_FAILED
    assert all(p.attempts == 2 for p in ledger.posts(MONTH))
    assert_attempts_are_charges(ledger, faulty)


@pytest.mark.parametrize(
    ("kind", "faulty"),
    cases((MESSAGE_BATCHES,), "task:task_failed#1", "task:expired#1", "task:cancelled#1")
    + cases((BATCH,), "task:task_failed#1", "task:expired#1", "task:cancelled#1"),
    indirect=["faulty"],
)
def test_a_request_that_never_ran_is_a_business_retry_that_cost_nothing(
    prefect_harness: None, faulty: Sim, ledger: Ledger, tmp_path: Path
) -> None:
    """An errored, expired or canceled request of a Message Batch, or the request of an OpenAI
    batch that failed validation, expired or was cancelled before it ran, is not billed, and
    the batch is sent again: only the second one is charged, and the ledger says the same (the
    first send's possible charge given back; the attempt still counts against the cap)."""
    from postledger.guards.charges import spend_summary

    run(tmp_path, 25)
    assert statuses(ledger) == {"completed": 25}
    assert [len(c["post_ids"]) for c in faulty.charges()] == [25]
    first, second = ledger.batches(MONTH)
    assert first.failure_kind is FailureKind.UPSTREAM_FAILED
    assert "not billed" in (first.failure_reason or "")
    assert (first.charge, second.charge) == (Charge.NONE, Charge.CONFIRMED)
    spend = spend_summary(ledger.spend(MONTH))
    assert (spend["refunded_submissions"], spend["wasted"], spend["possible"]) == (1, 0, 0)
    assert all(p.attempts == 2 for p in ledger.posts(MONTH))


@pytest.mark.parametrize(
    ("kind", "faulty"), cases(WITH_TASKS, "poll:forget#1"), indirect=["faulty"]
)
def test_forgotten_task_is_recorded_and_never_replaced(
    prefect_harness: None, faulty: Sim, ledger: Ledger, tmp_path: Path
) -> None:
    run(tmp_path, 25)
    assert len(faulty.charges()) == 1
    assert faulty.creates() == 1  # no silent new task
    posts = ledger.posts(MONTH)
    assert {(p.status, p.failure_kind) for p in posts} == {
        (PostStatus.FAILED, FailureKind.TASK_UNKNOWN)
    }
    task_id = ledger.batches(MONTH)[0].upstream_task_id
    assert task_id is not None  # the task was made: the charge above
    assert task_id in (posts[0].failure_reason or "")


@pytest.mark.parametrize("faulty", ["output:bad_field@1.0"], indirect=True)
def test_attempts_are_capped(
    prefect_harness: None, faulty: Sim, ledger: Ledger, tmp_path: Path
) -> None:
    run(tmp_path, 1)
    (post,) = ledger.posts(MONTH)
    assert (post.status, post.failure_kind, post.attempts) == (
        PostStatus.FAILED,
        FailureKind.ATTEMPTS_EXHAUSTED,
        3,
    )
    assert "sentiment" in (post.failure_reason or "")
    assert len(faulty.charges()) == 3


# --- secrets ---------------------------------------------------------------------------------

SECRET = "fake-key-for-the-fault-tests"


@pytest.fixture
def guarded_sim(monkeypatch: pytest.MonkeyPatch, kind: str) -> Iterator[Sim]:
    yield from start_sim(monkeypatch, kind, latency=0.1, api_key=SECRET)


@pytest.mark.parametrize("kind", UPSTREAM_KINDS)
def test_the_api_key_is_sent_and_never_kept(
    prefect_harness: None,
    guarded_sim: Sim,
    ledger: Ledger,
    ledger_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from flows.monthly import RunStopped

    monkeypatch.setenv("POSTLEDGER_API_KEY", SECRET + "-wrong")
    with pytest.raises(RunStopped) as stopped:
        run(tmp_path, 5)
    assert "fix the API key" in str(stopped.value)
    assert {p.failure_kind for p in ledger.posts(MONTH)} == {FailureKind.AUTH}

    assert ledger.retry_failed(MONTH, {FailureKind.AUTH}) == 5  # a person fixed the key
    monkeypatch.setenv("POSTLEDGER_API_KEY", SECRET)
    run(tmp_path, 5)
    assert statuses(ledger) == {"completed": 5}

    assert SECRET not in ledger_text(ledger_url)
    assert SECRET not in str(stopped.value)
    assert SECRET not in caplog.text


# --- everything at once ----------------------------------------------------------------------

MIXED = ",".join(
    [
        "create:http_503@0.08",
        "create:timeout_after_create@0.05;hold=2",
        "create:http_500_after_create@0.05",
        "create:rate_limit@0.05;retry_after=1",
        "poll:http_502@0.08",
        "poll:forget@0.03",
        "task:task_failed@0.05",
        "output:not_json@0.05",
        "output:bad_field@0.1",
        "output:duplicate_id@0.05",
    ]
)


@pytest.mark.on_postgres  # every rule's writes at once
@pytest.mark.parametrize("faulty", [MIXED], indirect=True)
def test_mixed_faults_every_post_ends_and_attempts_equal_charges(
    prefect_harness: None, faulty: Sim, ledger: Ledger, tmp_path: Path
) -> None:
    """The small sibling of bench/faults.py: every post ends completed or failed with a kind,
    and for every post, charged tasks containing it == its business attempts."""
    run(tmp_path, 150)
    posts = ledger.posts(MONTH)
    assert {p.status for p in posts} <= {PostStatus.COMPLETED, PostStatus.FAILED}
    assert all(p.failure_kind for p in posts if p.status is PostStatus.FAILED)
    assert all(p.attempts <= 3 for p in posts)
    assert len(faulty.charges()) > 6  # the faults did fire: more charges than clean batches
    assert_attempts_are_charges(ledger, faulty)
