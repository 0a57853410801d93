"""Progress, failure reasons and spend (R27-R30): the Prefect artifacts, `status` and `report`
agree with the ledger, the money agrees with the simulator's own usage log, a budget is kept,
and looking never calls the AI."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

from postledger.analysis.default import DEFAULT_INSTRUCTIONS
from postledger.defaults import DEFAULT_PRICES
from postledger.guards.spend import cost_of
from postledger.guards.usage import Usage
from postledger.ledger import Ledger
from postledger.record.models import Answer, PostStatus, Question
from tests.support.commands import postledger
from tests.support.months import MONTH, on_worker_server
from tests.support.months import posts_file as write_posts
from tests.support.prefect_api import flow_run_state
from tests.support.processes import child_env, running
from tests.support.simulators import Sim, start_sim
from tests.support.waiting import in_background, wait_for

if TYPE_CHECKING:
    from prefect.client.schemas.objects import Artifact as ArtifactRecord

pytestmark = pytest.mark.usefixtures("fast_retries")
FAST_TIMINGS = {"poll_wait": "0.5", "approval_poll": "0.3"}
SIMULATOR = {"latency": 0.1, "seed": 3}  # the `faulty` fixture's
PRICE = DEFAULT_PRICES["sim-analyst-1"]
MIXED = "create:http_503@0.08,poll:http_502@0.08,poll:forget@0.03,task:task_failed@0.05,"
MIXED += "output:not_json@0.05,output:bad_field@0.1,create:rate_limit@0.05;retry_after=1"


def posts_file(tmp_path: Path, n: int) -> Path:
    return write_posts(
        tmp_path / f"{MONTH}.jsonl", n, ids="s{:03d}", text="Sync drops my notes, case {}."
    )


def artifact(key: str) -> Any:
    from prefect.artifacts import Artifact

    # Typed as maybe a coroutine (as from async code); called from sync code: the artifact.
    found = cast("ArtifactRecord | None", Artifact.get(key))
    assert found is not None, key
    return found.data


@pytest.mark.on_postgres  # the figures read back
@pytest.mark.parametrize("faulty", [MIXED], indirect=True)
def test_artifacts_status_and_report_agree_with_the_ledger_and_call_nothing(
    prefect_harness: None,
    faulty: Sim,
    ledger: Ledger,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from flows.monthly import monthly_posts

    monkeypatch.setenv("POSTLEDGER_MAX_ATTEMPTS", "1")  # so that some posts end failed
    monthly_posts(month=MONTH, posts_path=str(posts_file(tmp_path, 120)))
    posts = ledger.posts(MONTH)
    completed = sum(p.status is PostStatus.COMPLETED for p in posts)
    failed_by_kind = dict(Counter(p.failure_kind.value for p in posts if p.failure_kind))
    assert failed_by_kind, "the faults should have failed some posts"

    assert float(artifact(f"postledger-{MONTH}-progress")) == pytest.approx(
        100 * completed / len(posts)
    )
    table = json.loads(artifact(f"postledger-{MONTH}-failures"))
    assert {row["kind"]: row["posts"] for row in table} == failed_by_kind
    assert all(row["how to continue"] for row in table)
    summary = artifact(f"postledger-{MONTH}-summary")
    assert f"**{completed} of {len(posts)} posts completed**" in summary
    # The progress says the month's spend in currency units, as the ledger's rows add up.
    from prefect.artifacts import Artifact

    from postledger.guards.charges import spend_summary
    from postledger.progress.words import spend_words

    rows = spend_summary(ledger.spend(MONTH))
    assert ledger.spend_totals(MONTH) == rows
    assert rows["confirmed"] > 0 and rows["wasted"] > 0  # the faults wasted some
    progress = cast("ArtifactRecord | None", Artifact.get(f"postledger-{MONTH}-progress"))
    assert progress is not None and progress.description is not None
    assert spend_words(ledger.spend_totals(MONTH), simulated=False) in progress.description

    stats_before = faulty.stats()["requests"]
    for _ in range(3):
        shown = postledger("status", "--month", MONTH, "--json")
        assert shown.returncode == 0, shown.stderr
        written = postledger("report", "--month", MONTH, "--out", str(tmp_path / "report"))
        assert written.returncode == 0, written.stderr
    assert faulty.stats()["requests"] == stats_before  # looking never calls the AI (R30)

    listed = postledger("status", "--month", MONTH, "--failed", COLUMNS="250")
    failed_ids = [p.post_id for p in posts if p.status is PostStatus.FAILED]
    assert all(post_id in listed.stdout for post_id in failed_ids)
    # Watching an ended month shows it once and ends by itself.
    watched = postledger("status", "-m", MONTH, "--watch", "--every", "0.3")
    assert watched.returncode == 0, watched.stderr
    assert f"{MONTH} has ended" in watched.stdout and "batches in flight" in watched.stdout
    # A month not started yet is waited for, refreshed, until Ctrl-C.
    screen = tmp_path / "watch.out"
    later = "2026-11"
    watch = [sys.executable, "-m", "cli", "status", "-m", later, "--watch", "--every", "0.3"]
    with screen.open("w") as sink, running(watch, env=child_env(), stdout=sink) as watching:
        deadline = time.monotonic() + 60
        while screen.read_text().count(f"waiting for {later} to start") < 2:  # refreshed
            assert time.monotonic() < deadline and watching.poll() is None
            time.sleep(0.2)
        watching.send_signal(signal.SIGINT)
        assert watching.wait(timeout=30) == 0
    assert faulty.stats()["requests"] == stats_before

    status = json.loads(shown.stdout)
    assert status["completed"] == completed
    assert {f["kind"]: f["count"] for f in status["failures"]} == failed_by_kind
    lines = [json.loads(line) for line in (tmp_path / "report" / f"posts-{MONTH}.jsonl").open()]
    assert [r["id"] for r in lines] == [p.post_id for p in posts]
    assert sum(r["status"] == "completed" and r["category"] is not None for r in lines) == completed
    header = (tmp_path / "report" / f"posts-{MONTH}.csv").read_text().splitlines()[0]
    assert header.startswith("id,status,category,sentiment,summary,failure_kind")


@pytest.mark.on_postgres  # a reader beside a writer
@pytest.mark.processes  # runs postledger in other processes
def test_status_looks_while_a_run_goes_on_in_another_process(
    monkeypatch: pytest.MonkeyPatch, ledger_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The run talks to one simulator; `status` and `report`, configured with another as
    their upstream, never reach it — not even while the month is being processed. (The run
    uses this worker's Prefect server: where Prefect runs is not the point here.)"""
    with contextlib.ExitStack() as stack:
        working = next(stack.enter_context(contextlib.closing(start_sim(monkeypatch, latency=0.5))))
        idle = next(stack.enter_context(contextlib.closing(start_sim(monkeypatch, latency=0.5))))
        env = child_env(None, POSTLEDGER_UPSTREAM_URL=working.url, **on_worker_server(request))
        posts = str(posts_file(tmp_path, 100))
        command = [sys.executable, "-m", "cli", "run", "--month", MONTH, "--posts", posts]
        run = stack.enter_context(
            running(
                command, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
        )
        try:
            deadline = time.monotonic() + 240  # the run starts: imports, its server
            while not working.charges() and time.monotonic() < deadline:
                time.sleep(0.2)
            seen: list[int] = []
            while run.poll() is None and len(seen) < 2:
                shown = postledger(
                    "status", "--month", MONTH, "--json", POSTLEDGER_UPSTREAM_URL=idle.url
                )
                if shown.returncode == 0:
                    seen.append(json.loads(shown.stdout)["completed"])
                postledger("report", "--month", MONTH, "--out", str(tmp_path / "r"))
        finally:
            assert run.wait(timeout=240) == 0
        assert seen, "status should have been read while the run went on"
        assert idle.stats()["requests"] == {}


def actual_cost(posts: list[tuple[str, str]]) -> int:
    """The simulator's own charge for a batch, from its own token counting: a task's prompt
    (the built-in analysis's instructions) and its posts' texts."""
    from simulator.model import count_tokens, write_output

    input_tokens = count_tokens(DEFAULT_INSTRUCTIONS) + sum(count_tokens(t) for _, t in posts)
    return cost_of(PRICE, Usage(input_tokens, count_tokens(write_output(posts))))


def wait_for_question(ledger: Ledger) -> Any:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        question = ledger.approvals.waiting(MONTH)
        if question is not None and question.kind is Question.BUDGET:
            return question
        time.sleep(0.1)
    raise AssertionError("the run did not pause for the budget")


@pytest.mark.on_postgres  # the budget read from the ledger
@pytest.mark.parametrize("answer", [Answer.CONTINUE, Answer.STOP])
def test_a_month_whose_forecast_crosses_its_budget_asks_before_its_first_batch(
    prefect_harness: None,
    sim: Sim,
    ledger: Ledger,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    answer: Answer,
) -> None:
    from prefect.artifacts import Artifact

    from flows.dispatch import RunStopped
    from flows.monthly import monthly_posts
    from flows.resume import resume_run

    monkeypatch.setenv("POSTLEDGER_MAX_BATCH_POSTS", "5")
    texts = [(f"s{i:03d}", f"Sync drops my notes, case {i}.") for i in range(40)]
    batches = [texts[i : i + 5] for i in range(0, 40, 5)]
    max_cost = sum(actual_cost(b) for b in batches[:4])  # about half of what the month costs
    monkeypatch.setenv("POSTLEDGER_MAX_COST", str(max_cost))

    path = str(posts_file(tmp_path, 40))
    thread, outcome = in_background(lambda: monthly_posts(month=MONTH, posts_path=path))
    question = wait_for_question(ledger)
    assert "the forecast for what is left" in question.question
    # The question is recorded before the run pauses: resumed only once it is paused.
    assert wait_for("Paused", lambda: flow_run_state(question.flow_run_id) == "PAUSED")
    assert sim.charges() == [] and ledger.spend(MONTH) == []  # nothing sent while it asks
    shown = Artifact.get(f"postledger-{MONTH}-forecast")
    assert shown is not None and "40 posts in 8 batches" in str(shown.data)  # type: ignore[union-attr]

    resume_run(question, {"decision": answer.value, "note": ""})
    thread.join(60)
    if answer is Answer.CONTINUE:  # for the rest of the month: no batch is held after
        assert "result" in outcome, outcome.get("error")
        assert {p.status for p in ledger.posts(MONTH)} == {PostStatus.COMPLETED}
        assert len(sim.charges()) == 8
        assert [q.kind for q in ledger.approvals.approvals(MONTH)] == [Question.BUDGET]
    else:
        assert isinstance(outcome.get("error"), RunStopped)
        assert "budget" in str(outcome["error"]) and "nothing was sent" in str(outcome["error"])
        assert sim.charges() == []
        assert ledger.counts(MONTH)[PostStatus.PENDING] == 40
