"""The OpenAI Batch API over real HTTP against the simulator: classified failures, per-request
errors as per-post failures, expired and cancelled batches, and an orphaned upstream batch
(made, its id never saved) adopted through its metadata with no new charge."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from postledger.ledger import Ledger
from postledger.record.crash import CRASH_EXIT_CODE
from postledger.record.models import BatchStatus, Charge, FailureKind, PostStatus
from tests.conftest import Sim, fast_timings, start_openai_sim
from tests.test_faults import MONTH, assert_attempts_are_charges, run, statuses
from tests.test_recovery import run_month

KIND = "openai_batch"


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    fast_timings(monkeypatch, read_timeout="1", poll_interval="0.05", create_settle="0.5")


@pytest.fixture
def batches(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[Sim]:
    yield from start_openai_sim(monkeypatch, KIND, latency=0.1, faults=request.param)


@pytest.mark.parametrize("batches", ["create:http_503#1", "poll:http_502#1"], indirect=True)
def test_transport_faults_are_retried_and_charged_once(
    prefect_harness: None, batches: Sim, ledger: Ledger, tmp_path: Path
) -> None:
    run(tmp_path, 25)
    assert statuses(ledger) == {"completed": 25}
    assert len(batches.charges()) == 1
    (batch,) = ledger.batches(MONTH)
    assert batch.upstream_task_id and batch.upstream_task_id.startswith("batch_")
    assert batch.request_retries == 1 and batch.charge is Charge.CONFIRMED
    assert batches.charges()[0]["idempotency_key"] == batch.idempotency_key  # in the metadata
    assert_attempts_are_charges(ledger, batches)


@pytest.mark.parametrize(
    "batches",
    ["create:timeout_after_create#1;hold=3", "create:http_500_after_create#1"],
    indirect=True,
)
def test_a_create_whose_answer_was_lost_is_found_by_its_metadata_never_made_again(
    prefect_harness: None, batches: Sim, ledger: Ledger, tmp_path: Path
) -> None:
    run(tmp_path, 25)
    assert statuses(ledger) == {"completed": 25}
    assert batches.stats()["requests"]["create"] == 1  # looked for, not created again
    (charge,) = batches.charges()
    (batch,) = ledger.batches(MONTH)
    assert charge["idempotency_key"] == batch.idempotency_key  # the one it made, adopted
    assert batch.upstream_task_id and batch.request_retries == 0
    assert any(
        "by its metadata" in e.why for e in ledger.events(MONTH) if e.entity_id == batch.batch_id
    )
    assert_attempts_are_charges(ledger, batches)


@pytest.mark.parametrize("batches", ["create:rate_limit#1;retry_after=2"], indirect=True)
def test_rate_limit_exceeded_waits_then_completes(
    prefect_harness: None, batches: Sim, ledger: Ledger, tmp_path: Path
) -> None:
    run(tmp_path, 25)
    assert statuses(ledger) == {"completed": 25}
    assert len(batches.charges()) == 1
    events = ledger.events(MONTH)
    waited = next(e for e in events if e.entity_id == "p000" and e.to_status == "waiting")
    released = next(e for e in events if e.entity_id == "p000" and e.why == "wait over")
    # Counted from the moment the refusal was judged, a ledger write before the `waiting`
    # event is stamped (as in test_openai_chat): allow that write a quarter of a second.
    assert released.at - waited.at >= timedelta(seconds=1.75)


@pytest.mark.parametrize(
    ("batches", "kind"),
    [
        ("create:quota#1", FailureKind.QUOTA),
        ("create:auth#1", FailureKind.AUTH),
        ("create:permission#1", FailureKind.PERMISSION),
    ],
    indirect=["batches"],
)
def test_quota_key_and_permission_stop_the_run_without_paying(
    prefect_harness: None,
    batches: Sim,
    ledger: Ledger,
    tmp_path: Path,
    kind: FailureKind,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from flows.monthly import RunStopped

    monkeypatch.setenv("POSTLEDGER_MAX_IN_FLIGHT", "1")
    with pytest.raises(RunStopped, match=kind.value):
        run(tmp_path, 30)
    assert batches.stats()["requests"]["create"] == 1 and batches.charges() == []
    failed = ledger.posts(MONTH, PostStatus.FAILED)
    assert len(failed) == 25 and {p.failure_kind for p in failed} == {kind}
    assert all(p.attempts == 0 for p in failed)


@pytest.mark.parametrize("batches", ["output:request_error#1", "output:bad_field#1"], indirect=True)
def test_one_failed_request_is_one_post_retried_alone(
    prefect_harness: None, batches: Sim, ledger: Ledger, tmp_path: Path
) -> None:
    run(tmp_path, 25)
    assert [len(c["post_ids"]) for c in batches.charges()] == [25, 1]
    assert statuses(ledger) == {"completed": 25}
    (retried,) = batches.charges()[1]["post_ids"]
    why = [e.why for e in ledger.events(MONTH) if e.entity_id == retried]
    assert any("server_error" in w or "sentiment" in w for w in why)
    assert_attempts_are_charges(ledger, batches)


@pytest.mark.parametrize(
    ("batches", "code"),
    [("task:expired#1", "batch_expired"), ("task:cancelled#1", "batch_cancelled")],
    indirect=["batches"],
)
def test_expired_and_cancelled_batches_keep_what_ran_and_retry_the_rest(
    prefect_harness: None, batches: Sim, ledger: Ledger, tmp_path: Path, code: str
) -> None:
    run(tmp_path, 24)
    assert [len(c["post_ids"]) for c in batches.charges()] == [24, 12]
    assert statuses(ledger) == {"completed": 24}
    first = ledger.batches(MONTH)[0]
    assert first.status is BatchStatus.COMPLETED
    undone = batches.charges()[1]["post_ids"]
    for post_id in undone:
        reasons = [e.why for e in ledger.events(MONTH) if e.entity_id == post_id]
        assert any(code in why for why in reasons), reasons
    assert_attempts_are_charges(ledger, batches)


@pytest.mark.parametrize("batches", ["task:task_failed#1"], indirect=True)
def test_a_failed_batch_is_a_paid_business_retry(
    prefect_harness: None, batches: Sim, ledger: Ledger, tmp_path: Path
) -> None:
    run(tmp_path, 25)
    assert [len(c["post_ids"]) for c in batches.charges()] == [25, 25]
    assert statuses(ledger) == {"completed": 25}
    assert ledger.batches(MONTH)[0].failure_kind is FailureKind.UPSTREAM_FAILED
    assert_attempts_are_charges(ledger, batches)


@pytest.mark.parametrize("batches", ["poll:forget#1"], indirect=True)
def test_a_batch_the_upstream_forgot_is_a_recovery_failure(
    prefect_harness: None, batches: Sim, ledger: Ledger, tmp_path: Path
) -> None:
    run(tmp_path, 25)
    assert len(batches.charges()) == 1 and batches.stats()["requests"]["create"] == 1
    assert {(p.status, p.failure_kind) for p in ledger.posts(MONTH)} == {
        (PostStatus.FAILED, FailureKind.TASK_UNKNOWN)
    }


# --- recovery: the orphan is adopted, not paid again -----------------------------------------


@pytest.fixture
def batch_sim(monkeypatch: pytest.MonkeyPatch) -> Iterator[Sim]:
    monkeypatch.setenv("POSTLEDGER_MAX_BATCH_POSTS", "3")
    monkeypatch.setenv("POSTLEDGER_POLL_INTERVAL", "0.1")
    yield from start_openai_sim(monkeypatch, KIND, latency=0.3)


@pytest.mark.processes  # runs postledger in other processes
def test_an_orphaned_batch_is_found_by_its_metadata_and_adopted_with_no_new_charge(
    batch_sim: Sim, ledger_url: str, tmp_path: Path
) -> None:
    crashed = run_month(tmp_path, POSTLEDGER_CRASH_AT="after_create")
    assert crashed.returncode == CRASH_EXIT_CODE, crashed.stdout + crashed.stderr
    ledger = Ledger(ledger_url)
    interrupted = ledger.batches(MONTH, BatchStatus.RUNNING)
    assert interrupted and not any(b.upstream_task_id for b in interrupted)
    charged_at_crash = batch_sim.charges()
    keys = Counter(c["idempotency_key"] for c in charged_at_crash)
    # The batch that crashed right after its create: made and paid upstream, id never saved.
    # (A neighbour still mid-create when the process died may never have arrived.)
    orphans = [b for b in interrupted if keys[b.idempotency_key] == 1]
    assert orphans
    ledger.close()

    finished = run_month(tmp_path, "--poll", "--resubmit")
    assert finished.returncode == 0, finished.stdout + finished.stderr
    ledger = Ledger(ledger_url)
    assert {p.status for p in ledger.posts(MONTH)} == {PostStatus.COMPLETED}
    charges = batch_sim.charges()
    assert Counter(c["idempotency_key"] for c in charges).most_common(1)[0][1] == 1
    assert Counter(pid for c in charges for pid in c["post_ids"]) == Counter(
        {p.post_id: 1 for p in ledger.posts(MONTH)}
    )
    upstream_ids = {c["idempotency_key"]: c["task_id"] for c in charged_at_crash}
    listed = httpx.get(f"{batch_sim.url}/v1/batches", params={"limit": 100}).json()["data"]
    batch_of_task = {b["id"]: b for b in listed}
    for orphan in orphans:
        adopted = ledger.batch(orphan.batch_id)
        assert adopted.status is BatchStatus.COMPLETED and adopted.sends == 1
        upstream = batch_of_task[adopted.upstream_task_id or ""]
        assert upstream["metadata"]["postledger_key"] == orphan.idempotency_key
        assert upstream_ids[orphan.idempotency_key]  # the charge of the run that crashed
        assert any(
            e.entity_id == orphan.batch_id and e.why.startswith("adopted upstream task")
            for e in ledger.events(MONTH)
        )
    ledger.close()


def test_a_line_answers_for_its_own_post_only() -> None:
    """The model's text never decides which post an answer belongs to: its custom_id does."""
    import json

    from postledger.upstreams.openai_batch import assemble

    def line(custom_id: str, content: object) -> dict[str, object]:
        body = {
            "choices": [{"message": {"content": json.dumps(content)}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5},
        }
        return {"custom_id": custom_id, "response": {"status_code": 200, "body": body}}

    good = {"id": "a", "category": "praise", "sentiment": "positive", "summary": "ok"}
    raw, usage = assemble(
        [
            line("a", [good]),
            line("b", {**good, "id": "c"}),  # names another post: b's error, never c's result
            line("c", {**good, "id": "c"}),  # a bare object (json_object mode) is fine
            line("d", [good, good]),  # two items for one post
        ],
        "completed",
    )
    items = {item["id"]: item for item in json.loads(raw)}
    assert items["a"] == good and items["c"]["category"] == "praise"
    assert "names post 'c'" in items["b"]["error"]
    assert "not one item" in items["d"]["error"]
    assert usage == {"input_tokens": 40, "output_tokens": 20}
