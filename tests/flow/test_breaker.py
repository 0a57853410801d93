"""The circuit breaker (R18, R19) over real HTTP: the simulator's own request counts and charge
log show what was sent and when; the ledger shows the breaker's history and people's answers.
(Its rules in the ledger alone: tests/ledger/test_breaker_records.py.)"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from uuid import UUID

import pytest

from postledger.guards.breaker import Signal
from postledger.ledger import Ledger
from postledger.record.models import Answer, BreakerLevel, PostStatus
from tests.support.commands import postledger
from tests.support.months import MONTH, on_worker_server
from tests.support.months import posts_file as write_posts
from tests.support.prefect_api import ai_batch_slots_taken, flow_run_state
from tests.support.prefect_server import PrefectServer
from tests.support.processes import child_env, running
from tests.support.simulators import Sim, start_sim
from tests.support.waiting import in_background, wait_for

if TYPE_CHECKING:
    from prefect.client.schemas.objects import Artifact as ArtifactRecord

L = BreakerLevel
# Two failures in a row, a person's continue, one success in probe.
TRIPPED_THEN_CONTINUED = [
    (L.NORMAL, L.PROBE),
    (L.PROBE, L.OPEN),
    (L.OPEN, L.PROBE),
    (L.PROBE, L.NORMAL),
]
SIMULATOR = {"latency": 0.3}  # the `faulty` fixture's
# One post per batch (`fast_decisions`). The breaker trips at the third and fourth, so some
# fourteen batches are left after it closes: enough for the two held in flight at once after
# it (`hold_the_window_after_the_close`), whenever the test's hold begins.
BATCHES = 20


# --- the flow obeys it -----------------------------------------------------------------------


@pytest.fixture(autouse=True)
def fast_decisions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POSTLEDGER_REQUEST_RETRIES", "0")  # one fault = one final failure
    monkeypatch.setenv("POSTLEDGER_MAX_BATCH_POSTS", "1")
    monkeypatch.setenv("POSTLEDGER_POLL_WAIT", "0.5")
    monkeypatch.setenv("POSTLEDGER_APPROVAL_POLL", "0.3")


def posts_file(tmp_path: Path, n: int) -> Path:
    return write_posts(
        tmp_path / f"{MONTH}.jsonl", n, ids="p{:02d}", text="Why does export fail, case {}?"
    )


def peak_in_flight(charges: list[dict[str, Any]], since: datetime, until: datetime | None) -> int:
    """The most upstream tasks in flight at once during [since, until), from the charge log."""
    moments = []
    for charge in charges:
        start = datetime.fromisoformat(charge["at"])
        end = datetime.fromisoformat(charge["done_at"])
        start, end = max(start, since), min(end, until) if until else end
        if start < end:
            moments += [(start, 1), (end, -1)]
    peak = now = 0
    for _, step in sorted(moments):
        now += step
        peak = max(peak, now)
    return peak


def test_the_breaker_form_preselects_no_decision() -> None:
    from flows.approval import BreakerAnswer

    schema = BreakerAnswer.model_json_schema()
    assert "decision" in schema["required"]
    assert "default" not in schema["properties"]["decision"]


def creates(sim: Sim) -> int:
    return int(sim.stats()["requests"].get("create", 0))


def level_changes(ledger: Ledger, sim: Sim) -> list[tuple[BreakerLevel, BreakerLevel, datetime]]:
    return [
        (e.from_level, e.to_level, e.at)
        for e in ledger.approvals.history(sim.url.removeprefix("http://"))
        if e.from_level is not e.to_level
    ]


def held(sim: Sim) -> list[dict[str, Any]]:
    """The charges of the tasks made while the simulator holds, still held: in flight, and
    none of them ends until `sim.hold(False)` (their charge has no end yet)."""
    return [charge for charge in sim.charges() if charge["done_at"] == ""]


def has_closed(ledger: Ledger, sim: Sim) -> bool:
    return (L.PROBE, L.NORMAL) in [(a, b) for a, b, _ in level_changes(ledger, sim)]


# How long a step of `hold_the_window_after_the_close` may take: far more than a slot
# hand-off ever took here (bench/README.md: under a second; 1.7 s on a loaded CI machine), so
# that only a window that did not come back can time out.
HELD_TIMEOUT = 60.0


def hold_the_window_after_the_close(
    sim: Sim, ledger: Ledger, alive: Callable[[], None], after: str
) -> list[str]:
    """Called with the simulator holding (`sim.hold(True)`) and the breaker tripped but not
    yet closed. Each task made before the close (the probe; in the run without a pause, maybe
    a batch sent just before the trip) is let end on its own: released, and the simulator
    holds again at once. From the close on, no task ends: the flow can only fill its window,
    and must have two batches in flight at once, within `HELD_TIMEOUT` — a window of one after
    the close, or one given back only once a batch has ended, leaves a single task held, for
    ever. Then, still held, no third one starts (the ceiling). Returns the task ids released
    before the close; the simulator is left holding. `alive` fails if the run has ended."""
    released: list[str] = []
    deadline = time.monotonic() + HELD_TIMEOUT
    while True:
        waiting = held(sim)  # before the ledger: a task made after the close is made after it
        if has_closed(ledger, sim):
            break
        if waiting:  # made before the close: let it end, and hold what comes next
            sim.hold(False)
            sim.hold(True)
            released += [charge["task_id"] for charge in waiting]
        assert time.monotonic() < deadline, f"the breaker did not close within {HELD_TIMEOUT} s"
        alive()
        time.sleep(0.05)
    started = time.monotonic()
    while len(now := held(sim)) < 2:
        waited = time.monotonic() - started
        if waited > HELD_TIMEOUT:
            only = "only one batch was" if len(now) == 1 else f"{len(now)} batches were"
            pytest.fail(
                f"{after} {only} in flight for {waited:.0f} s: the window did not come back "
                f"(the simulator: {sim.stats()})"
            )
        alive()
        time.sleep(0.05)
    time.sleep(1.0)  # still held: a third would have had time to start
    now = held(sim)
    assert len(now) == 2 and sim.stats()["in_flight"] == 2, f"more than two in flight: {now}"
    return released


@pytest.mark.processes  # runs postledger in other processes
@pytest.mark.parametrize("faulty", ["create:reset#3"], indirect=True)
def test_one_final_transport_failure_sends_one_at_a_time_until_a_success(
    prefect_harness: None, faulty: Sim, ledger: Ledger, tmp_path: Path
) -> None:
    from flows.monthly import monthly_posts

    path = str(posts_file(tmp_path, BATCHES))
    thread, outcome = in_background(
        lambda: monthly_posts(month=MONTH, posts_path=path, return_state=True)
    )
    # Held from the trip on (the probe may have been made before it: it then ends on its own).
    wait_for("the trip", lambda: level_changes(ledger, faulty))
    faulty.hold(True)
    try:
        hold_the_window_after_the_close(faulty, ledger, alive(thread, outcome), "after the close")
    finally:
        faulty.hold(False)
        thread.join(120)  # failed or not: the run ends before its simulator serves another test
    assert "result" in outcome, outcome.get("error")
    state = outcome["result"]
    assert state.is_completed(), state

    assert {p.status for p in ledger.posts(MONTH)} == {PostStatus.COMPLETED}
    (_, probe, tripped), (_, normal, closed) = level_changes(ledger, faulty)
    assert (probe, normal) == (L.PROBE, L.NORMAL)
    charges = faulty.charges()
    assert len(charges) == BATCHES  # the refused create made nothing; its batch was sent again
    assert peak_in_flight(charges, tripped, closed) == 1
    # At least the probe was sent in between (and possibly a batch already marked `running`
    # before the trip, whose create reached the upstream just after it).
    assert sum(tripped <= datetime.fromisoformat(c["at"]) < closed for c in charges) >= 1
    assert peak_in_flight(charges, closed, None) == 2  # the two held; never more
    assert faulty.stats()["max_in_flight"] == 2


def alive(thread: Any, outcome: dict[str, Any]) -> Callable[[], None]:
    """Fails once the flow run in `thread` (`in_background`) has ended."""

    def check() -> None:
        assert thread.is_alive(), f"the run ended while its batches were held: {outcome}"

    return check


def run_in_background(tmp_path: Path, n: int) -> tuple[Any, dict[str, Any]]:
    from flows.monthly import monthly_posts

    path = str(posts_file(tmp_path, n))
    return in_background(lambda: monthly_posts(month=MONTH, posts_path=path))


def paused_form_says(question: Any) -> str:
    """The description the paused run's form shows (its run input's), from the Prefect API."""
    from prefect import get_client
    from prefect.input.actions import read_flow_run_input
    from prefect.input.run_input import keyset_from_paused_state

    with get_client(sync_client=True) as client:
        state = client.read_flow_run(question.flow_run_id).state
    assert state is not None
    said = read_flow_run_input(
        keyset_from_paused_state(state)["description"], flow_run_id=question.flow_run_id
    )
    return str(said)


def approve_in_another_process(ledger_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return postledger(
        "approve", "--month", MONTH, *args, cwd=Path.cwd(), POSTLEDGER_DATABASE_URL=ledger_url
    )


@pytest.mark.processes  # runs postledger in other processes
@pytest.mark.parametrize("faulty", ["create:reset#3+4"], indirect=True)
@pytest.mark.parametrize("answer_with", ["postledger approve", "resume_flow_run"])
def test_second_failure_opens_pauses_and_continue_probes_first(
    prefect_harness: None,
    faulty: Sim,
    ledger: Ledger,
    ledger_url: str,
    tmp_path: Path,
    answer_with: str,
) -> None:
    thread, outcome = run_in_background(tmp_path, BATCHES)
    question = wait_for("the paused run's question", lambda: ledger.approvals.waiting(MONTH))
    assert wait_for("Paused", lambda: flow_run_state(question.flow_run_id) == "PAUSED")
    sent = creates(faulty)
    time.sleep(1.0)
    assert creates(faulty) == sent  # open: no new create reaches the upstream
    assert flow_run_state(question.flow_run_id) == "PAUSED"
    assert ai_batch_slots_taken() == 0  # a paused run holds no slot
    assert "is open" in question.question and "continue" in question.question
    # What it costs, in currency units: the month so far, and the probe a continue sends.
    assert "so far**: spend confirmed " in question.question
    assert "(the first costs about " in question.question
    assert "No answer within 24 h counts as stop" in question.question
    from prefect.artifacts import Artifact

    # Typed as maybe a coroutine (as from async code); called from sync code: the artifact.
    progress = cast("ArtifactRecord | None", Artifact.get(f"postledger-{MONTH}-progress"))
    assert progress is not None and progress.description is not None
    assert "Paused, waiting for a person: the circuit breaker is open" in progress.description
    assert "a continue sends next a batch of about " in progress.description
    assert f"postledger approve --month {MONTH}" in progress.description
    assert "The analysis post_analysis (category, sentiment, summary)" in progress.description
    assert "Each post is asked the analysis post_analysis" in paused_form_says(question)

    faulty.hold(True)  # from the probe on (nothing is in flight while paused)
    try:
        if answer_with == "postledger approve":
            done = approve_in_another_process(ledger_url, "--note", "upstream is back")
            assert done.returncode == 0, done.stderr
            assert "resumed flow run" in done.stdout
        else:
            from prefect.flow_runs import resume_flow_run

            resume_flow_run(
                UUID(question.flow_run_id),
                run_input={"decision": "continue", "note": "upstream is back"},
            )
        after = "after the continue"
        released = hold_the_window_after_the_close(faulty, ledger, alive(thread, outcome), after)
    finally:
        faulty.hold(False)
        thread.join(120)  # failed or not: the run ends before its simulator serves another test
    assert len(released) == 1  # the probe, alone
    assert "result" in outcome, outcome.get("error")

    assert {p.status for p in ledger.posts(MONTH)} == {PostStatus.COMPLETED}
    changes = level_changes(ledger, faulty)
    assert [(a, b) for a, b, _ in changes] == TRIPPED_THEN_CONTINUED
    opened, continued, closed = changes[1][2], changes[2][2], changes[3][2]
    charges = faulty.charges()
    assert not [c for c in charges if opened <= datetime.fromisoformat(c["at"]) < continued]
    assert peak_in_flight(charges, continued, closed) == 1
    assert peak_in_flight(charges, closed, None) == 2  # the two held; never more
    (asked,) = ledger.approvals.approvals(MONTH)
    assert (asked.answer, asked.note) == (Answer.CONTINUE, "upstream is back")


@pytest.mark.processes  # runs postledger in other processes
@pytest.mark.parametrize("faulty", [None], indirect=True)
def test_a_new_run_while_open_pauses_at_once_and_stop_sends_nothing(
    prefect_harness: None, faulty: Sim, ledger: Ledger, ledger_url: str, tmp_path: Path
) -> None:
    from flows.dispatch import RunStopped

    upstream = faulty.url.removeprefix("http://")
    for n in (1, 2):
        ledger.approvals.signal(upstream, Signal.TRANSPORT_FAILURE, f"fail {n}", month="2026-09")

    thread, outcome = run_in_background(tmp_path, 6)
    question = wait_for("the paused run's question", lambda: ledger.approvals.waiting(MONTH))
    assert wait_for("Paused", lambda: flow_run_state(question.flow_run_id) == "PAUSED")
    done = approve_in_another_process(ledger_url, "--stop", "--note", "not today")
    assert done.returncode == 0, done.stderr
    thread.join(60)

    assert isinstance(outcome.get("error"), RunStopped)
    assert "a person said stop" in str(outcome["error"])
    assert creates(faulty) == 0 and faulty.charges() == []
    assert ledger.approvals.breaker(upstream).level is L.OPEN
    assert {p.status for p in ledger.posts(MONTH)} <= {PostStatus.PENDING, PostStatus.QUEUED}
    assert all(p.attempts == 0 for p in ledger.posts(MONTH))
    (asked,) = ledger.approvals.approvals(MONTH)
    assert (asked.answer, asked.note, asked.answered_by) == (
        Answer.STOP,
        "not today",
        "postledger approve",
    )


def breaker_level(env: dict[str, str], cwd: Path, upstream: str) -> str:
    import json

    shown = postledger("breaker", "--json", cwd=cwd, env=env)
    assert shown.returncode == 0, shown.stderr
    (breaker,) = [b for b in json.loads(shown.stdout)["breakers"] if b["upstream"] == upstream]
    if breaker["level"] == "open":  # the answer to copy, for the month that tripped it
        assert f"postledger approve --month {MONTH} " in breaker["what_to_do"], breaker
    return str(breaker["level"])


@pytest.mark.processes  # runs postledger in other processes
@pytest.mark.parametrize("faulty", ["create:reset#3+4"], indirect=True)
def test_the_breaker_and_the_answer_survive_a_restart(
    faulty: Sim, ledger_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Every step is its own process: nothing but the ledger carries the state across, not
    even the Prefect server (the second run goes to another one, as a deployment's would)."""
    upstream = faulty.url.removeprefix("http://")
    env = child_env(POSTLEDGER_APPROVAL_TIMEOUT="2")
    posts = str(posts_file(tmp_path, 12))

    first = postledger("run", "--month", MONTH, "--posts", posts, cwd=tmp_path, env=env)
    assert first.returncode == 1, first.stdout
    assert "nobody answered" in first.stdout
    # The pause said, in full, where and how to answer: this run's private server serves no
    # UI. Its retried and failed sends were told in postledger's words, with no traceback.
    said = first.stdout + first.stderr
    assert f"in another terminal with `postledger approve --month {MONTH}" in said, said
    assert "Prefect UI" not in said
    assert "Traceback" not in said and "NoneType: None" not in said, said
    assert re.search(rf"{MONTH}-b\d{{4}}: request retries exhausted: POST /v1/tasks", said)
    assert breaker_level(env, tmp_path, upstream) == "open"

    answered = postledger(
        "approve", "--month", MONTH, "--note", "after restart", cwd=tmp_path, env=env
    )
    assert answered.returncode == 0, answered.stderr
    assert breaker_level(env, tmp_path, upstream) == "probe"

    second = postledger(
        "run",
        "--month",
        MONTH,
        "--posts",
        posts,
        cwd=tmp_path,
        env={**env, **on_worker_server(request)},
    )
    assert second.returncode == 0, second.stdout + second.stderr

    ledger = Ledger(ledger_url)
    assert {p.status for p in ledger.posts(MONTH)} == {PostStatus.COMPLETED}
    changes = level_changes(ledger, faulty)
    assert [(a, b) for a, b, _ in changes] == TRIPPED_THEN_CONTINUED
    assert "after restart" in ledger.approvals.history(upstream)[-2].why
    assert peak_in_flight(faulty.charges(), changes[2][2], changes[3][2]) == 1
    ledger.close()


@pytest.fixture
def slow_faulty(monkeypatch: pytest.MonkeyPatch) -> Iterator[Sim]:
    """Two transport failures in a row, then tasks of 4 s: the probe, released, ends that long
    after the test holds the simulator again (two calls on loopback), so every task made after
    the close is held."""
    yield from start_sim(monkeypatch, latency=4.0, faults="create:reset#3+4")


@pytest.mark.processes  # runs postledger in other processes
@pytest.mark.parametrize(
    "server",
    [
        "embedded",
        # One real server per pytest session, shared with the deployment and UI tests.
        pytest.param("prefect-server", marks=pytest.mark.xdist_group("prefect_server")),
    ],
)
def test_after_a_continue_the_full_window_is_back_at_once(
    slow_faulty: Sim, ledger_url: str, tmp_path: Path, server: str, request: pytest.FixtureRequest
) -> None:
    """A paused run answered from another terminal (`postledger approve`), the probe succeeds,
    and the full window of two is back at once: on `postledger run`'s own server, and on a
    real `prefect server start` (PostgreSQL under CI).

    The code it guards: `level_after` (postledger/guards/breaker.py), applied by
    `apply_signal` (breaker_state.py) as the probe settles, puts the breaker back to normal,
    where `window` gives the whole `max_in_flight`; `Dispatch.start_what_may_start`
    (flows/dispatch.py) reads the level afresh each turn (`window(self.breaker_level(), ...)`)
    and starts as many batches as the window has room for, in that one turn; and Prefect hands
    both their `ai-batch` slots (the probe's is free before the flow hears of its end,
    flows/batch_runs.py). "At once" is checked without a clock: the simulator holds every task
    made after the close, so no batch ends to make room, and two must be in flight all the same
    (`hold_the_window_after_the_close`). A window left at one after a continue, or given back
    only once a batch has ended, fails: "after the continue only one batch was in flight for
    60 s: the window did not come back". How long the hand-off takes is a benchmark figure
    (bench/README.md), printed with -s, not asserted."""
    env = child_env(POSTLEDGER_APPROVAL_POLL="0.2")
    if server == "prefect-server":
        prefect: PrefectServer = request.getfixturevalue("prefect_server")
        env.update(prefect.client_env(tmp_path / "prefect-client"))
    posts = str(posts_file(tmp_path, 8))
    ledger = Ledger(ledger_url)
    command = [sys.executable, "-m", "cli", "run", "--month", MONTH, "--posts", posts]
    with (
        (tmp_path / "run.out").open("w+") as out,
        running(
            command, env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, text=True
        ) as run,
    ):

        def alive() -> None:
            if run.poll() is not None:
                out.seek(0)
                pytest.fail(f"the run ended while its batches were held:\n{out.read()}")

        deadline = time.monotonic() + 240
        while ledger.approvals.waiting(MONTH) is None:
            alive()
            assert time.monotonic() < deadline, out.name
            time.sleep(0.2)
        assert slow_faulty.stats()["in_flight"] == 0  # paused: nothing in flight
        slow_faulty.hold(True)
        try:
            answered = postledger("approve", "--month", MONTH, cwd=tmp_path, env=env)
            assert answered.returncode == 0, answered.stdout + answered.stderr
            after = "after the continue"
            (probe,) = hold_the_window_after_the_close(slow_faulty, ledger, alive, after)
            two = [charge["task_id"] for charge in held(slow_faulty)]
        finally:
            slow_faulty.hold(False)
        run.wait(timeout=240)
        out.seek(0)
        assert run.returncode == 0, out.read()
    changes = level_changes(ledger, slow_faulty)
    assert [(a, b) for a, b, _ in changes] == TRIPPED_THEN_CONTINUED
    closed = changes[3][2]
    charges = slow_faulty.charges()
    made = [charge["task_id"] for charge in charges]
    # The two held were the first two tasks made after the probe: the hold was back in time.
    assert made[made.index(probe) + 1 :][:2] == two, (probe, two, charges)
    assert peak_in_flight(charges, closed, None) == 2 and slow_faulty.stats()["max_in_flight"] == 2
    at = {charge["task_id"]: datetime.fromisoformat(charge["at"]) for charge in charges}
    print("HANDOFF", server, (at[two[1]] - closed).total_seconds())  # shown with -s
    ledger.close()
