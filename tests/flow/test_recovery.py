"""A run dies at every named crash point (R21-R26); the next run finishes from what was saved.

The run that dies is its own `postledger run` process, ended by `os._exit` at the crash point.
At one point both runs are embedded `postledger run`s, as a user restarts one (the next frees
the `ai-batch` slot the dead run held on the local server they both started). At the others the
run that dies uses this worker's Prefect server, as a deployment's runs share one, and the next
run is the monthly flow in this process, on that server: what it finishes and what it pays
are decided by the ledger alone. The evidence: the ledger, and the simulator's own charge log
and per-task poll counts. Each upstream kind is crashed where its rules differ: a saved output
and a saved task id on all that have them; a Message Batch made but never written down.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from postledger.ledger import Ledger
from postledger.record.crash import CRASH_EXIT_CODE, CrashPoint
from postledger.record.models import Answer, BatchStatus, FailureKind, PostStatus
from postledger.upstreams.anthropic_batch_match import batch_of_line
from tests.support.commands import postledger
from tests.support.months import MONTH, finish_month_here, on_worker_server, run_month
from tests.support.simulators import UPSTREAM_KINDS, Sim, start_sim

pytestmark = pytest.mark.processes  # runs postledger in other processes


@pytest.fixture(autouse=True)
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POSTLEDGER_MAX_BATCH_POSTS", "3")
    monkeypatch.setenv("POSTLEDGER_POLL_WAIT", "1")


@pytest.fixture
def sim(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[Sim]:
    honour_keys = getattr(request, "param", True)
    yield from start_sim(monkeypatch, latency=0.4, honour_keys=honour_keys)


def charged_posts(sim: Sim) -> Counter[str]:
    return sim.charged_per_post()


# Where the next run is a `postledger run` of its own, as a user's would be.
RESTARTED_BY_HAND = CrashPoint.AFTER_CREATE


# A crash across processes at each point, on PostgreSQL too; after_create there leaves the
# records after_running does, and its two runs each start an embedded Prefect server (~25 s).
@pytest.mark.on_postgres(
    ids=["after_running", "after_task_id", "after_output", "during_validation", "after_completed"]
)
@pytest.mark.parametrize("point", list(CrashPoint))
def test_a_crash_at_each_point_is_finished_by_the_next_run(
    point: CrashPoint, sim: Sim, ledger_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # The run that crashes: embedded where the next run is started by hand, as a user's would
    # be; elsewhere on this worker's server, which the next run (here) shares.
    server = {} if point is RESTARTED_BY_HAND else on_worker_server(request)
    crashed = run_month(tmp_path, POSTLEDGER_CRASH_AT=point.value, **server)
    assert crashed.returncode == CRASH_EXIT_CODE, crashed.stdout + crashed.stderr
    ledger = Ledger(ledger_url)
    saved = {
        b.upstream_task_id
        for b in ledger.batches(MONTH)
        if b.raw_output is not None and b.upstream_task_id
    }
    polls_before = sim.stats()["polls_by_task"]
    ledger.close()

    if point is RESTARTED_BY_HAND:
        finished = run_month(tmp_path, "--poll", "--resubmit")
        assert finished.returncode == 0, finished.stdout + finished.stderr
        # The crash happened inside a batch task, holding an `ai-batch` slot that nothing else
        # would ever give back on the local server: the next run freed it, and said so.
        assert "tag:ai-batch slot" in finished.stdout + finished.stderr
    else:
        finish_month_here(request, tmp_path)

    ledger = Ledger(ledger_url)
    posts = ledger.posts(MONTH)
    assert {p.status for p in posts} == {PostStatus.COMPLETED}
    # The upstream honours keys: every resubmission was answered with the task it had made.
    assert set(charged_posts(sim).values()) == {1}
    assert {p.post_id: p.attempts for p in posts} == dict(charged_posts(sim))
    polls_after = sim.stats()["polls_by_task"]
    for task_id in saved:  # output saved before the crash: no AI call for it after
        assert polls_after.get(task_id) == polls_before.get(task_id)
    ledger.close()


@pytest.mark.parametrize("sim", [False], indirect=True)
def test_without_idempotency_a_resubmission_waits_for_a_yes_and_only_then_pays_twice(
    sim: Sim, ledger_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    no_keys = {"POSTLEDGER_UPSTREAM_IDEMPOTENT": "false", **on_worker_server(request)}
    crashed = run_month(tmp_path, POSTLEDGER_CRASH_AT="after_create", **no_keys)
    assert crashed.returncode == CRASH_EXIT_CODE, crashed.stderr
    # Environment variables: never postledger()'s own keyword arguments.
    shown = postledger("plan", "--month", MONTH, "--json", cwd=tmp_path, **no_keys)  # type: ignore[arg-type]
    plan = json.loads(shown.stdout)
    resubmit = plan["groups"]["resubmit"]["batches"]
    assert resubmit and plan["possible_double_charge_input_tokens"] > 0
    assert plan["possible_double_charge_cost"] > 0  # in money, from the price table
    at_crash = Counter(c["idempotency_key"] for c in sim.charges())
    ledger = Ledger(ledger_url)
    key_of = {b.batch_id: b.idempotency_key for b in ledger.batches(MONTH)}
    ledger.close()
    made = [b for b in resubmit if at_crash[key_of[b]] == 1]
    assert made  # the batch whose create was answered but never written down

    unanswered = run_month(tmp_path, POSTLEDGER_APPROVAL_TIMEOUT="1", **no_keys)
    assert unanswered.returncode == 1  # done what was safe; the rest waits for a person
    ledger = Ledger(ledger_url)
    now = Counter(c["idempotency_key"] for c in sim.charges())
    for batch_id in resubmit:
        assert ledger.batch(batch_id).status is BatchStatus.RUNNING
        assert now[key_of[batch_id]] == at_crash[key_of[batch_id]]  # no yes, no charge
    (asked,) = ledger.approvals.approvals(MONTH)
    assert (asked.answer, asked.poll, asked.resubmit) == (Answer.TIMED_OUT, None, None)
    ledger.close()

    with pytest.MonkeyPatch.context() as env:
        env.setenv("POSTLEDGER_UPSTREAM_IDEMPOTENT", "false")
        finish_month_here(request, tmp_path)  # the yes, given up front
    ledger = Ledger(ledger_url)
    assert {p.status for p in ledger.posts(MONTH)} == {PostStatus.COMPLETED}
    final = Counter(c["idempotency_key"] for c in sim.charges())
    for batch in ledger.batches(MONTH):  # planned-only (cancelled) batches were never sent
        sent_once = 1 if batch.sends else 0
        expected = at_crash[batch.idempotency_key] + 1 if batch.batch_id in resubmit else sent_once
        assert final[batch.idempotency_key] == expected, batch.batch_id
    # Paid twice exactly where a person confirmed a resubmission of a batch already made.
    assert {b for b in resubmit if final[key_of[b]] == 2} == set(made)
    ledger.close()


def test_a_task_the_upstream_forgot_is_a_recovery_failure_with_no_new_charge(
    sim: Sim, ledger_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    crashed = run_month(tmp_path, POSTLEDGER_CRASH_AT="after_task_id", **on_worker_server(request))
    assert crashed.returncode == CRASH_EXIT_CODE, crashed.stderr
    ledger = Ledger(ledger_url)
    lost = [b for b in ledger.batches(MONTH, BatchStatus.RUNNING) if b.upstream_task_id]
    assert lost
    for batch in lost:
        httpx.post(f"{sim.url}/_sim/tasks/{batch.upstream_task_id}/forget").raise_for_status()
    charged_then = charged_posts(sim)

    finish_month_here(request, tmp_path)
    lost_posts = {pid for b in lost for pid in b.post_ids}
    for post in ledger.posts(MONTH):
        if post.post_id in lost_posts:
            assert (post.status, post.failure_kind) == (PostStatus.FAILED, FailureKind.TASK_UNKNOWN)
            assert charged_posts(sim)[post.post_id] == charged_then[post.post_id]  # R26
        else:
            assert post.status is PostStatus.COMPLETED
    ledger.close()


# --- every upstream kind ----------------------------------------------------------------------

WITH_TASK_IDS = ("task_api", "openai_batch", "anthropic_batch")
OTHER_KINDS = [kind for kind in UPSTREAM_KINDS if kind != "task_api"]


@pytest.fixture
def kind_sim(monkeypatch: pytest.MonkeyPatch, kind: str) -> Iterator[Sim]:
    monkeypatch.setenv("POSTLEDGER_MAX_IN_FLIGHT", "1")  # at a crash, only its batch is out
    monkeypatch.setenv("POSTLEDGER_POLL_INTERVAL", "0.1")
    yield from start_sim(monkeypatch, kind, latency=0.4)


# The two with a job saved: what the next run reads back of a submission.
@pytest.mark.on_postgres(ids=["openai_batch-after_task_id", "anthropic_batch-after_task_id"])
@pytest.mark.parametrize(
    ("kind", "point"),
    # The output saved, not yet checked: the next run checks it, no call made for it again.
    # The task id saved, nothing received: the next run polls that task, pays nothing new.
    # (The task API at every point: the test above.)
    [(kind, CrashPoint.DURING_VALIDATION) for kind in OTHER_KINDS]
    + [(kind, CrashPoint.AFTER_TASK_ID) for kind in WITH_TASK_IDS if kind in OTHER_KINDS],
)
def test_every_kind_finishes_a_crashed_month_from_what_was_saved(
    kind: str,
    point: CrashPoint,
    kind_sim: Sim,
    ledger_url: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    crashed = run_month(tmp_path, POSTLEDGER_CRASH_AT=point.value, **on_worker_server(request))
    assert crashed.returncode == CRASH_EXIT_CODE, crashed.stdout + crashed.stderr
    charged_at_crash = charged_posts(kind_sim)
    assert charged_at_crash  # the crashed batch was paid for
    finish_month_here(request, tmp_path)
    ledger = Ledger(ledger_url)
    posts = ledger.posts(MONTH)
    assert {p.status for p in posts} == {PostStatus.COMPLETED}
    assert set(charged_posts(kind_sim).values()) == {1}  # nothing paid twice
    assert {p.post_id: p.attempts for p in posts} == dict(charged_posts(kind_sim))
    ledger.close()


@pytest.mark.parametrize("kind", ["anthropic_batch"])
def test_a_message_batch_made_but_never_written_down_is_found_before_anyone_is_asked(
    kind: str, kind_sim: Sim, ledger_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A Message Batch carries no metadata, but its requests carry their submission's token:
    one made but never written down is found in the listing by the next run and adopted, so
    nobody is asked to pay for it twice. (`postledger plan`, which reads the ledger alone and
    makes no call, lists its batches to resubmit until a run has looked.)"""
    server = on_worker_server(request)
    crashed = run_month(tmp_path, POSTLEDGER_CRASH_AT="after_create", **server)
    assert crashed.returncode == CRASH_EXIT_CODE, crashed.stdout + crashed.stderr
    made = kind_sim.charges()  # one Message Batch: a request (and a charge) per ledger batch
    batch_ids = sorted(batch_of_line(c["idempotency_key"]) for c in made)
    # Environment variables: never postledger()'s own keyword arguments.
    plan = json.loads(postledger("plan", "--month", MONTH, "--json", cwd=tmp_path, **server).stdout)  # type: ignore[arg-type]
    assert plan["groups"]["resubmit"]["batches"] == batch_ids

    unanswered = run_month(tmp_path, POSTLEDGER_APPROVAL_TIMEOUT="1", **server)
    assert unanswered.returncode in (0, 1), unanswered.stdout + unanswered.stderr
    assert kind_sim.charges() == made  # found, not sent again
    ledger = Ledger(ledger_url)
    adoptions = [e.why for e in ledger.events(MONTH) if e.why.startswith("adopted upstream job")]
    assert adoptions and all("by the requests it carries" in why for why in adoptions)
    ledger.close()

    finish_month_here(request, tmp_path)  # whatever is left to say yes to, said
    ledger = Ledger(ledger_url)
    assert {p.status for p in ledger.posts(MONTH)} == {PostStatus.COMPLETED}
    assert set(charged_posts(kind_sim).values()) == {1}  # nothing paid twice
    assert kind_sim.charges() == made
    ledger.close()


# --- a crash on a shared Prefect server ------------------------------------------------------


@pytest.mark.on_postgres  # the month taken over
@pytest.mark.processes  # runs postledger in another process
def test_the_run_that_takes_over_a_crashed_runs_month_frees_its_slot_at_once(
    prefect_harness: None,
    sim: Sim,
    ledger_url: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """Workers share one Prefect server: a run killed mid-batch leaves its `ai-batch` slot
    leased there until the lease lapses and a reaper frees it. The next run of the month,
    which takes the month over from the dead run, frees that run's slots first."""
    from tests.support.prefect_api import ai_batch_slots_taken

    shared = on_worker_server(request)  # this worker's server, as a worker's would be
    crashed = run_month(tmp_path, POSTLEDGER_CRASH_AT="after_create", **shared)
    assert crashed.returncode == CRASH_EXIT_CODE, crashed.stdout + crashed.stderr
    assert ai_batch_slots_taken() >= 1  # the dead run's slot, still leased
    finish_month_here(request, tmp_path)
    # Freed by the takeover: this server runs no reaper, and the dead run's lease had not
    # lapsed when the next run began (a slot it could not free would still be counted).
    assert ai_batch_slots_taken() == 0
    ledger = Ledger(ledger_url)
    assert {p.status for p in ledger.posts(MONTH)} == {PostStatus.COMPLETED}
    ledger.close()
