"""A yes about interrupted batches covers the batches it was shown, as they were when shown
(R22-R24, R44): `postledger approve` with no paused run shows neither nor covers the batches a
live run of the month has in flight, and a batch that changed after the answer was given is
asked about again, never sent again on the strength of the earlier yes.

Each test runs a run's recovery as `flows/monthly.py` does (`a_run_recovers`), on a real ledger
(SQLite, and PostgreSQL in the suite's second pass); the run's pause is a stub that records the
question and answers it (or not) at once."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import Session

import flows.recover
from flows.recover import RecoveryAnswer, answer_given_before, ask_about_interrupted, carry_out
from postledger.batches.posts import Post
from postledger.failures.policy import Decision
from postledger.ledger import Ledger
from postledger.record import rows
from postledger.record.models import (
    ApprovalRecord,
    BatchStatus,
    MonthRunRecord,
    Question,
    utcnow,
)
from postledger.recovery.steps import recovery_plan
from postledger.settings import Settings
from tests.support import commands
from tests.support.ledgers import asked

# The answers are the ledger's as much as the recovery is the shell's: the PostgreSQL pass runs
# every test here, every case of each (tests/conftest.py, `_runs_on_postgres`).
pytestmark = pytest.mark.on_postgres

MONTH = "2026-10"
DEAD, LIVE = "dead-run", "live-run"


class Said(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


class Run:
    """A run's recovery, as `flows/monthly.py`'s `process_month` sequences it: the answer given
    before it, carried out; then, if none, one question after the safe work."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, ledger: Ledger) -> None:
        self.ledger = ledger
        self.settings = Settings()
        self.questions: list[str] = []
        self.said = Said()
        self.reply: RecoveryAnswer | None = None
        logger = logging.getLogger(f"postledger-test-recovery-{id(self)}")
        logger.addHandler(self.said)
        logger.propagate = False
        monkeypatch.setattr(flows.recover, "get_run_logger", lambda: logger)
        monkeypatch.setattr(flows.recover, "pause_for_answer", self._pause)

    def _pause(
        self,
        ledger: Ledger,
        month: str,
        question: str,
        form: Any,
        settings: Settings,
        *,
        kind: Question,
        batch_ids: list[str] | None = None,
        on_asked: Any = None,
    ) -> tuple[ApprovalRecord, RecoveryAnswer | None]:
        asked = ledger.approvals.ask(
            month,
            settings.breaker_name(),
            question,
            flow_run_id=None,
            prefect_api_url=None,
            kind=kind,
            batch_ids=batch_ids,
        )
        if on_asked is not None:
            on_asked()
        self.questions.append(question)
        return asked, self.reply

    def recovers(self) -> list[str]:
        """The batches the run polls."""
        ledger, settings = self.ledger, self.settings
        with ledger.plain() as reader:
            plan = recovery_plan(reader, MONTH, settings)
        answer = answer_given_before(ledger, MONTH, plan, settings, poll=None, resubmit=None)
        polls = carry_out(ledger, plan, answer, settings).polls if answer else []
        if answer is None and plan.needs_yes:
            answer = ask_about_interrupted(ledger, MONTH, plan, settings)
            if answer is not None:
                polls = carry_out(ledger, plan, answer, settings).polls
        return polls

    @property
    def log(self) -> str:
        return "\n".join(self.said.lines)


def _claim(ledger: Ledger, holder: str, *, host: str, pid: int, age: float = 0.0) -> None:
    """The month held by `holder` (a run of another process: its claim written as that run
    writes it), last seen `age` seconds ago."""
    with Session(ledger.engine) as session:
        record = session.get(MonthRunRecord, MONTH) or MonthRunRecord(
            month=MONTH, holder=holder, host=host, pid=pid
        )
        record.holder, record.host, record.pid = holder, host, pid
        record.heartbeat_at = utcnow() - timedelta(seconds=age)
        session.add(record)
        session.commit()


def _a_month(ledger: Ledger, *, interrupted: int, in_flight: int) -> tuple[list[str], list[str]]:
    """`interrupted` batches sent by a run that is gone (no task id saved: each needs a yes to
    be sent again), then `in_flight` batches sent by a live run of another host that holds the
    month now. Two posts a batch, two more batches planned and never sent."""
    count = 2 * (interrupted + in_flight + 2)
    ledger.sync_posts(
        MONTH,
        [Post(f"p{i}", f"post {i}", i + 1) for i in range(count)],
        model="m",
        analysis=asked(),
    )
    batches = [b.batch_id for b in ledger.plan(MONTH, max_posts=2, max_chars=1000).batches]
    gone, live = batches[:interrupted], batches[interrupted : interrupted + in_flight]
    ledger.leases.claim(MONTH, DEAD)
    for batch_id in gone:
        ledger.mark_running(batch_id, holder=DEAD)
    ledger.leases.release(MONTH, DEAD)
    if live:
        _claim(ledger, LIVE, host="another-host", pid=1)
        for batch_id in live:
            ledger.mark_running(batch_id, holder=LIVE)
    return gone, live


def _the_live_run_ends_uncertain(ledger: Ledger, batch_ids: list[str]) -> None:
    """Its creates' answers were lost (no task id): uncertain, then it ends (its claim gone)."""
    for batch_id in batch_ids:
        ledger.apply(batch_id, Decision(BatchStatus.RUNNING, "no answer to the create"))
    ledger.leases.release(MONTH, LIVE)


def _status(ledger: Ledger, batch_id: str) -> tuple[BatchStatus, int]:
    batch = ledger.batch(batch_id)
    return batch.status, batch.sends


def _recovery_answers(ledger: Ledger) -> list[ApprovalRecord]:
    return [a for a in ledger.approvals.approvals(MONTH) if a.kind is Question.RECOVERY]


def _approve_with_no_run_waiting(ledger: Ledger, *, resubmit: bool) -> ApprovalRecord:
    """What `postledger approve --month M [--poll] --resubmit` records with no paused run: a
    yes for the batches the month's recovery plan shows now."""
    with ledger.plain() as reader:
        plan = recovery_plan(reader, MONTH, Settings())
    return ledger.approvals.answer_recovery(
        MONTH,
        Settings().breaker_name(),
        poll=True,
        resubmit=resubmit,
        note="",
        by="postledger approve",
        batch_ids=[s.batch_id for s in plan.steps],
        shown_seq=plan.as_of,
    )


# --- (a) a live run's batch in flight is neither shown nor covered ------------------------------


def test_a_standing_yes_does_not_cover_a_live_runs_batch_in_flight(
    ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = Ledger(ledger_url)
    (gone,), (flying,) = _a_month(ledger, interrupted=1, in_flight=1)
    with ledger.plain() as reader:
        plan = recovery_plan(reader, MONTH, Settings())
    assert [s.batch_id for s in plan.steps] == [gone]  # not the live run's batch in flight
    assert plan.in_flight == [flying]

    answer = _approve_with_no_run_waiting(ledger, resubmit=True)
    assert answer.batch_ids == [gone]

    _the_live_run_ends_uncertain(ledger, [flying])
    run = Run(monkeypatch, ledger)
    assert run.recovers() == []
    # The batch shown is sent again on the earlier yes; the one in flight then is not: the run
    # asked about it, and with no answer it waits, charged nothing more.
    assert _status(ledger, gone) == (BatchStatus.QUEUED, 1)
    assert _status(ledger, flying) == (BatchStatus.RUNNING, 1)
    assert len(run.questions) == 1 and flying in run.questions[0]
    assert f"does not cover {flying}" in run.log
    assert "changed after it was given" in run.log
    asked = _recovery_answers(ledger)[-1]
    assert asked.batch_ids == [gone, flying] and asked.answered_by is not None
    # Nothing is left to cover the batch later: the earlier answer was used.
    assert ledger.approvals.standing_recovery(MONTH) is None
    ledger.close()


# --- (b) a batch shown and unchanged is still covered ------------------------------------------


def test_a_batch_shown_and_unchanged_is_still_covered(
    ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = Ledger(ledger_url)
    (gone,), _ = _a_month(ledger, interrupted=1, in_flight=0)
    answer = _approve_with_no_run_waiting(ledger, resubmit=True)
    # The month goes on (its other posts change, a never-sent batch is planned again): events
    # after the answer, none of them the batch's own.
    ledger.sync_posts(MONTH, [Post("p9", "new post", 99)], model="m", analysis=asked())
    ledger.replan_unsent(MONTH)

    run = Run(monkeypatch, ledger)
    assert run.recovers() == []
    assert run.questions == []  # the yes was given before: nobody is asked again
    assert _status(ledger, gone) == (BatchStatus.QUEUED, 1)
    assert "does not cover" not in run.log
    assert ledger.approvals.standing_recovery(MONTH) is None  # used once
    assert answer.id is not None
    ledger.close()


@pytest.mark.on_postgres(ids=["False", "True"])
@pytest.mark.parametrize("replied", [False, True])
def test_a_batch_that_changed_after_the_answer_is_asked_about_again(
    ledger_url: str, monkeypatch: pytest.MonkeyPatch, replied: bool
) -> None:
    ledger = Ledger(ledger_url)
    (kept, changed), _ = _a_month(ledger, interrupted=2, in_flight=0)
    _approve_with_no_run_waiting(ledger, resubmit=True)
    # After the yes, the changed batch's task is found upstream: it now needs a poll (free),
    # not a resubmission, and nobody was shown that.
    ledger.record_task_id(changed, "task_9", adopted="found upstream by its metadata")

    run = Run(monkeypatch, ledger)
    if replied:  # the form's answer is newer: it decides for every batch it shows
        run.reply = RecoveryAnswer(poll=True, resubmit=False, note="")
    polls = run.recovers()
    assert len(run.questions) == 1
    assert kept in run.questions[0] and changed in run.questions[0]
    assert f"does not cover {changed}" in run.log and "changed after it was given" in run.log
    (earlier, asked) = _recovery_answers(ledger)
    assert asked.shown_seq is not None and earlier.shown_seq is not None
    assert asked.shown_seq > earlier.shown_seq
    if replied:
        assert polls == [changed]
        assert _status(ledger, kept) == (BatchStatus.RUNNING, 1)  # resubmit: no, said last
    else:  # nobody answered: the earlier yes still holds for the batch it was shown as it is
        assert polls == []
        assert _status(ledger, kept) == (BatchStatus.QUEUED, 1)
        assert "keep waiting" in run.log
    assert _status(ledger, changed) == (BatchStatus.RUNNING, 1)
    assert ledger.approvals.standing_recovery(MONTH) is None
    ledger.close()


def test_an_answer_with_no_record_of_what_it_was_shown_covers_nothing(
    ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An answer kept before the ledger recorded when it was shown (migration 0013) cannot
    tell a batch changed since from one that did not: the run asks."""
    ledger = Ledger(ledger_url)
    (gone,), _ = _a_month(ledger, interrupted=1, in_flight=0)
    ledger.approvals.answer_recovery(
        MONTH, "u", poll=True, resubmit=True, note="", by="an older postledger", batch_ids=[gone]
    )
    run = Run(monkeypatch, ledger)
    run.recovers()
    assert len(run.questions) == 1
    assert _status(ledger, gone) == (BatchStatus.RUNNING, 1)  # nobody answered: it waits
    ledger.close()


# --- which claim makes a batch in flight -------------------------------------------------------


def _a_dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.mark.on_postgres(
    ids=[
        "claim0-True",
        "claim1-False",
        "claim2-True",
        "claim3-False",
        "claim4-False",
        "claim5-False",
    ]
)
@pytest.mark.parametrize(
    "claim, in_flight",
    [
        ({"host": "another-host", "pid": 1}, True),  # alive while its heartbeat is fresh
        ({"host": "another-host", "pid": 1, "age": 120}, False),  # three beats missed
        ({"host": "here", "pid": "parent"}, True),  # a process of this host that lives
        ({"host": "here", "pid": "dead"}, False),  # killed: its claim is taken over at once
        ({"host": "here", "pid": "this"}, False),  # the run asking: nothing of it is in flight
        ({"holder": "another-run", "host": "another-host", "pid": 1}, False),  # sender gone
    ],
)
def test_a_batch_is_in_flight_only_while_the_run_that_sent_it_holds_the_month(
    ledger_url: str, claim: dict[str, Any], in_flight: bool
) -> None:
    ledger = Ledger(ledger_url)
    _, (flying,) = _a_month(ledger, interrupted=0, in_flight=1)
    pid = {"parent": os.getppid(), "dead": _a_dead_pid(), "this": os.getpid()}.get(
        claim["pid"], claim["pid"]
    )
    host = socket.gethostname() if claim["host"] == "here" else claim["host"]
    _claim(ledger, claim.get("holder", LIVE), host=host, pid=pid, age=claim.get("age", 0.0))
    with ledger.plain() as reader:
        (batch,) = rows.interrupted(reader, MONTH)
        plan = recovery_plan(reader, MONTH, Settings())
    assert batch.in_flight is in_flight
    assert ([s.batch_id for s in plan.steps], plan.in_flight) == (
        ([], [flying]) if in_flight else ([flying], [])
    )
    ledger.close()


# --- (c) `postledger approve`, a process of its own, while a live run holds the month ---------


@pytest.mark.processes
def test_approve_with_a_live_run_covers_only_the_interrupted_batches(
    ledger_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ledger = Ledger(ledger_url)
    (gone,), (flying,) = _a_month(ledger, interrupted=1, in_flight=1)
    done = commands.postledger("approve", "--month", MONTH, "--resubmit", cwd=tmp_path)
    planned = commands.postledger("plan", "--month", MONTH, "--json", cwd=tmp_path)
    assert done.returncode == 0 and planned.returncode == 0, done.stderr + planned.stderr

    # Its run ends without an answer to the batch's create: interrupted now. The next run
    # sends it again only with a new yes; the batch shown is sent again on this one.
    _the_live_run_ends_uncertain(ledger, [flying])
    run = Run(monkeypatch, ledger)
    run.recovers()
    assert _status(ledger, flying) == (BatchStatus.RUNNING, 1)
    assert _status(ledger, gone) == (BatchStatus.QUEUED, 1)
    assert len(run.questions) == 1

    # What approve covered, said, and what `postledger plan` showed, agree.
    (answer, _) = _recovery_answers(ledger)
    assert answer.batch_ids == [gone] and answer.resubmit
    said = " ".join(done.stdout.split())
    assert f"It covers {gone} as it is now" in said, said
    assert f"{flying} is in flight" in said and "not covered" in said, said
    shown = json.loads(planned.stdout)
    assert shown["groups"]["resubmit"]["batches"] == [gone]
    assert shown["in_flight"] == [flying]
    ledger.close()


@pytest.mark.processes
def test_approve_with_only_batches_in_flight_records_nothing(
    ledger_url: str, tmp_path: Path
) -> None:
    ledger = Ledger(ledger_url)
    _, (flying,) = _a_month(ledger, interrupted=0, in_flight=1)
    done = commands.postledger("approve", "--month", MONTH, "--resubmit", cwd=tmp_path)
    assert done.returncode == 1, done.stdout
    said = " ".join(done.stderr.split())
    assert "no interrupted batch needs a yes" in said
    assert flying in said and "in flight" in said
    assert _recovery_answers(ledger) == []
    ledger.close()
