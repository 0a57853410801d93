"""On a Batch API one upstream job (a submission) carries many ledger batches, one request line
each (`tasks/submission.py`), over real HTTP against the simulator: a month goes in one job,
each line settles its own batch by the same rules as a batch sent alone, a line that never ran
goes into the next submission unbilled, and a job made but never written down is found
(OpenAI's by its metadata, Anthropic's by the requests it carries) and adopted with no new
charge. The evidence is the ledger and the simulator's charge log."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlmodel import Session, col, select

from postledger.ledger import Ledger
from postledger.record.crash import CRASH_EXIT_CODE
from postledger.record.models import BatchStatus, PostStatus, SubmissionRecord
from postledger.recovery.steps import RecoveryAction, recovery_plan
from postledger.settings import Settings
from simulator.model import count_tokens
from tests.support.months import (
    MONTH,
    assert_attempts_are_charges,
    finish_month_here,
    on_worker_server,
    run_month,
    statuses,
)
from tests.support.months import run_flow as run
from tests.support.simulators import Sim, start_sim

pytestmark = pytest.mark.usefixtures("fast_retries")
FAST_TIMINGS = {
    "read_timeout": "2",
    "poll_interval": "0.05",
    "create_settle": "0.5",
    "max_batch_posts": "5",
}
BATCH_KINDS = ["openai_batch", "anthropic_batch"]


def submissions(ledger: Ledger) -> list[SubmissionRecord]:
    with Session(ledger.engine) as session:
        query = select(SubmissionRecord).order_by(col(SubmissionRecord.created_at))
        return list(session.exec(query))


@pytest.mark.on_postgres  # a job and its batches
@pytest.mark.parametrize("kind", BATCH_KINDS)
def test_a_month_goes_in_one_job_whose_lines_settle_each_batch(
    prefect_harness: None, sim: Sim, ledger: Ledger, tmp_path: Path, kind: str
) -> None:
    run(tmp_path, 40)  # 8 batches of 5 posts

    assert statuses(ledger) == {"completed": 40}
    assert sim.creates() == 1  # one upstream job, not one per batch
    (submission,) = submissions(ledger)
    batches = ledger.batches(MONTH)
    assert submission.batch_ids == [b.batch_id for b in batches]
    assert submission.upstream_job_id
    assert {b.upstream_task_id for b in batches} == {submission.upstream_job_id}
    assert {b.submission_id for b in batches} == {submission.submission_id}
    assert_attempts_are_charges(ledger, sim)
    # The instructions are paid once per ledger batch (line), not once per post or per job.
    texts = [p.text for p in ledger.posts(MONTH)]
    expected = len(batches) * instruction_tokens(kind) + sum(map(count_tokens, texts))
    assert sum(c["input_tokens"] for c in sim.charges()) == expected
    spend = ledger.spend_totals(MONTH)
    assert spend["input_tokens"] == expected and spend["possible"] == 0


def instruction_tokens(kind: str) -> int:
    """The tokens of the instructions one request line carries, as the simulator counts them
    (the built-in analysis's instructions and what the adapter puts around them)."""
    from postledger.analysis import load_analysis
    from postledger.upstreams.anthropic_protocol import messages_body
    from postledger.upstreams.openai_protocol import chat_body
    from simulator.anthropic_api import system_text
    from simulator.openai_api import chat_input

    posts, analysis = [("p000", "a post")], load_analysis(None)
    if kind == "openai_batch":
        prompt, _ = chat_input(chat_body("m", analysis, posts, True)["messages"])
    else:
        params = messages_body("m", analysis, posts, 4096)
        system = {"role": "system", "content": system_text(params.get("system"))}
        prompt, _ = chat_input([system, *params["messages"]])
    return count_tokens(prompt)


@pytest.mark.parametrize("kind", ["openai_batch"])
@pytest.mark.parametrize(
    ("faulty", "rule"),
    [
        ("output:bad_field#1", "one invalid post is sent again alone"),
        ("output:not_json#1", "an unusable answer is split once, into the next submission"),
        ("output:request_error#1", "an errored line is taken as paid and sent again"),
    ],
    indirect=["faulty"],
)
def test_each_line_settles_its_own_batch_by_its_rule(
    prefect_harness: None, faulty: Sim, ledger: Ledger, tmp_path: Path, rule: str
) -> None:
    run(tmp_path, 40)

    assert statuses(ledger) == {"completed": 40}, rule
    first, second = submissions(ledger)  # the trouble of one line goes into the next job
    assert faulty.creates() == 2
    assert len(first.batch_ids) == 8
    again = [ledger.batch(batch_id) for batch_id in second.batch_ids]
    touched = {b.split_from or b.batch_id for b in again}
    if "bad_field" in rule or rule.startswith("one invalid"):
        (batch,) = again
        assert len(batch.post_ids) == 1  # the invalid post alone; the other four completed
    elif "split" in rule:
        assert len(again) == 2 and {len(b.post_ids) for b in again} == {2, 3}
        (parent,) = touched
        assert ledger.batch(parent).status is BatchStatus.FAILED  # split, not sent again
    else:
        (batch,) = again
        assert len(batch.post_ids) == 5  # the whole line again, as a new paid attempt
    retried = {p.post_id: p.attempts for p in ledger.posts(MONTH) if p.attempts > 1}
    assert set(retried.values()) == {2} and retried
    assert_attempts_are_charges(ledger, faulty)  # every line that ran was paid, once


@pytest.mark.parametrize("kind", BATCH_KINDS)
@pytest.mark.parametrize("faulty", ["create:auth#1"], indirect=True)
def test_a_refused_job_fails_every_batch_it_carried_and_stops_the_run(
    prefect_harness: None, faulty: Sim, ledger: Ledger, tmp_path: Path
) -> None:
    from flows.monthly import RunStopped

    with pytest.raises(RunStopped, match="auth"):
        run(tmp_path, 40)
    assert faulty.creates() == 1 and faulty.charges() == []  # refused: nothing ran, or paid
    (submission,) = submissions(ledger)
    assert submission.upstream_job_id is None and len(submission.batch_ids) == 8
    failed = ledger.posts(MONTH, PostStatus.FAILED)
    assert len(failed) == 40 and {p.attempts for p in failed} == {0}
    assert ledger.spend_totals(MONTH)["possible"] == 0


@pytest.mark.parametrize("kind", ["openai_batch"])
@pytest.mark.parametrize("faulty", ["task:expired#1"], indirect=True)
def test_an_expired_job_keeps_its_finished_lines_and_sends_only_the_rest(
    prefect_harness: None, faulty: Sim, ledger: Ledger, tmp_path: Path
) -> None:
    run(tmp_path, 40)

    assert statuses(ledger) == {"completed": 40}
    # The next jobs: one, or more where the window had room before every line was settled.
    first, *later = submissions(ledger)
    assert later
    ran, undone = first.batch_ids[:4], first.batch_ids[4:]  # the simulator runs the first half
    for batch_id in ran:
        assert ledger.batch(batch_id).status is BatchStatus.COMPLETED
    # Only the posts of the unfinished batches, planned again, go in the next jobs.
    again = [b for submission in later for b in submission.batch_ids]
    posts_of = {b: set(ledger.batch(b).post_ids) for b in first.batch_ids + again}
    assert set().union(*(posts_of[b] for b in again)) == set().union(*(posts_of[b] for b in undone))
    # A line that never ran was not billed: a business retry that cost nothing, its possible
    # charge given back; every post was paid for once.
    never_ran = set().union(*(posts_of[b] for b in undone))
    assert {p.post_id: p.attempts for p in ledger.posts(MONTH)} == {
        p.post_id: 2 if p.post_id in never_ran else 1 for p in ledger.posts(MONTH)
    }
    assert faulty.charged_per_post() == Counter({p.post_id: 1 for p in ledger.posts(MONTH)})
    spend = ledger.spend_totals(MONTH)
    assert (spend["refunded_submissions"], spend["wasted"], spend["possible"]) == (4, 0, 0)


# --- a job made and never written down ------------------------------------------------------


@pytest.fixture
def batch_sim(monkeypatch: pytest.MonkeyPatch, kind: str) -> Iterator[Sim]:
    monkeypatch.setenv("POSTLEDGER_MAX_BATCH_POSTS", "3")
    monkeypatch.setenv("POSTLEDGER_POLL_INTERVAL", "0.1")
    yield from start_sim(monkeypatch, kind, latency=0.3)


def batch_sim_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.getfixturevalue("kind")
    return kind


def crash_after_the_create(
    tmp_path: Path, request: pytest.FixtureRequest, ledger_url: str
) -> tuple[Ledger, SubmissionRecord]:
    """`postledger run` of twelve posts (four batches), killed the moment its job was made:
    the submission written down, its job id never saved."""
    crashed = run_month(tmp_path, POSTLEDGER_CRASH_AT="after_create", **on_worker_server(request))
    assert crashed.returncode == CRASH_EXIT_CODE, crashed.stdout + crashed.stderr
    ledger = Ledger(ledger_url)
    (orphan,) = submissions(ledger)
    assert orphan.upstream_job_id is None and len(orphan.batch_ids) == 4
    return ledger, orphan


@pytest.mark.on_postgres  # a job adopted by the next run
@pytest.mark.processes  # runs postledger in other processes
@pytest.mark.parametrize("kind", BATCH_KINDS)
def test_a_job_never_written_down_is_found_and_adopted_with_no_new_charge(
    batch_sim: Sim, ledger_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    ledger, _ = crash_after_the_create(tmp_path, request, ledger_url)
    charged_at_crash = [c["task_id"] for c in batch_sim.charges()]
    # The job was made, and paid for: OpenAI charges the job, Anthropic each request of it.
    assert len(charged_at_crash) == (1 if batch_sim_kind(request) == "openai_batch" else 4)
    ledger.close()

    finish_month_here(request, tmp_path)
    ledger = Ledger(ledger_url)
    assert {p.status for p in ledger.posts(MONTH)} == {PostStatus.COMPLETED}
    # Zero new charges: the one job made before the crash, polled to its end.
    assert [c["task_id"] for c in batch_sim.charges()] == charged_at_crash
    assert batch_sim.charged_per_post() == Counter({p.post_id: 1 for p in ledger.posts(MONTH)})
    assert batch_sim.creates() == 1
    (adopted,) = submissions(ledger)
    # OpenAI's job found by its metadata; Anthropic's Message Batch by the requests it carries.
    assert adopted.upstream_job_id and adopted.upstream_job_id.startswith(("batch_", "msgbatch_"))
    for batch_id in adopted.batch_ids:
        batch = ledger.batch(batch_id)
        assert batch.upstream_task_id == adopted.upstream_job_id and batch.sends == 1
    assert any(e.why.startswith("adopted upstream job") for e in ledger.events(MONTH))
    ledger.close()


@pytest.mark.processes
@pytest.mark.parametrize("kind", ["anthropic_batch"])
def test_a_message_batch_of_the_same_size_made_before_the_submission_is_not_adopted(
    batch_sim: Sim, ledger_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A near miss: a Message Batch with as many requests, named by the very batch ids, made
    before the submission was written down. The create's answer is lost (a 500) and no batch
    was made for it: nothing is adopted, and the run asks before sending again."""
    foreign = batch_sim.make_message_batch([f"{MONTH}-b{n:04d}" for n in range(1, 5)])
    batch_sim.set_faults([{"on": "create", "fault": "http_500", "nth": [1]}])
    first = run_month(tmp_path, **on_worker_server(request))
    assert first.returncode != 0, first.stdout + first.stderr
    ledger = Ledger(ledger_url)
    (orphan,) = submissions(ledger)
    assert orphan.upstream_job_id is None and orphan.metadata_sent == {}  # a batch takes none
    assert {ledger.batch(b).upstream_task_id for b in orphan.batch_ids} == {None}
    assert not any(foreign in e.why or "adopted" in e.why for e in ledger.events(MONTH))
    with ledger.plain() as reader:
        plan = recovery_plan(reader, MONTH, Settings())
    # Found nowhere: every batch it carried waits for a person's yes, with the warning that
    # a resubmission may be charged twice.
    assert [s.batch_id for s in plan.steps] == orphan.batch_ids
    assert {s.action for s in plan.steps} == {RecoveryAction.RESUBMIT}
    assert plan.needs_yes and plan.double_charge_cost > 0
    assert {c["idempotency_key"] for c in batch_sim.charges()} == {  # only the foreign batch ran
        f"{MONTH}-b{n:04d}" for n in range(1, 5)
    }
    ledger.close()
