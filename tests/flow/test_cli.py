"""The `postledger` command as a person types it, in a fresh folder, as a separate process."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from postledger.batches.posts import Post
from postledger.guards.breaker import Signal
from postledger.ledger import Ledger
from postledger.record.models import Answer, BreakerLevel, Question
from tests.support import commands, processes
from tests.support.ledgers import asked
from tests.support.months import SAMPLE, write_jsonl

pytestmark = pytest.mark.processes  # every test runs postledger in a process of its own


def _setting(name: str) -> bool:
    return name.startswith("POSTLEDGER_") and not name.startswith("POSTLEDGER_TEST_")


def postledger(
    *args: str, cwd: Path, timeout: float = 300, fresh_prefect_home: bool = False
) -> subprocess.CompletedProcess[str]:
    """As in a fresh terminal: no postledger setting at all, a Prefect home of its own."""
    env = processes.child_env(PREFECT_HOME=str(cwd / ".prefect-home"), COLUMNS="200")
    env = {k: v for k, v in env.items() if not _setting(k)}
    return commands.postledger(
        *args, cwd=cwd, env=env, timeout=timeout, fresh_prefect_home=fresh_prefect_home
    )


def test_help_explains_every_command(tmp_path: Path) -> None:
    result = postledger("--help", cwd=tmp_path)
    assert result.returncode == 0
    commands = ("run", "estimate", "status", "approve", "breaker", "setup", "sample", "analysis")
    for command in (*commands, "sim"):
        assert command in result.stdout
    run = postledger("run", "--help", cwd=tmp_path)
    assert run.returncode == 0
    lines = run.stdout.splitlines()
    # A flag is shown as a flag; an option that takes a value, with it.
    assert any(line.split()[:1] == ["--poll"] for line in lines), run.stdout
    assert "<bool>" not in run.stdout and "--latency <float>" in run.stdout
    # Paragraphs are wrapped to the terminal, not broken where the docstring's lines end
    # (one of them ends with "loopback").
    assert not any(line.rstrip().endswith("loopback") for line in lines), run.stdout


def test_sample_is_deterministic_and_is_the_shipped_month(tmp_path: Path) -> None:
    out = tmp_path / "again.jsonl"
    result = postledger(
        "sample",
        "--month",
        "2026-10",
        "--count",
        "300",
        "--seed",
        "7",
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert out.read_bytes() == SAMPLE.read_bytes()


def test_sample_never_replaces_a_file_unless_forced(tmp_path: Path) -> None:
    posts = tmp_path / "2026-10.jsonl"
    posts.write_text('{"id": "mine", "text": "a real post"}\n')
    args = ("sample", "--month", "2026-10", "--count", "3", "--out", str(posts))
    refused = postledger(*args, cwd=tmp_path)
    assert refused.returncode == 1
    assert "exists already" in refused.stderr and "--force" in refused.stderr
    assert posts.read_text() == '{"id": "mine", "text": "a real post"}\n'
    forced = postledger(*args, "--force", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert len(posts.read_text().splitlines()) == 3


def test_run_then_status_in_a_fresh_folder(tmp_path: Path) -> None:
    """The README's main command: the bundled simulator, the default ledger location, and a
    Prefect home never used before (its database migrated by this first run)."""
    (tmp_path / "data" / "posts").mkdir(parents=True)
    shutil.copy(SAMPLE, tmp_path / "data" / "posts" / "2026-10.jsonl")

    # Before anything: the forecast, from the file alone, on the assumed constants.
    ahead = postledger("estimate", "--month", "2026-10", cwd=tmp_path)
    assert ahead.returncode == 0, ahead.stderr
    assert "Left to send of 2026-10: 300 posts" in ahead.stdout
    assert "assumed 4 characters a token" in one_line(ahead.stdout)
    assert not (tmp_path / ".postledger").exists()  # it reads; it makes no ledger

    run = postledger(
        "run", "--month", "2026-10", "--latency", "0.1", cwd=tmp_path, fresh_prefect_home=True
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "bundled simulator" in run.stdout and "nothing is paid" in run.stdout
    assert (tmp_path / ".postledger" / "ledger.db").is_file()
    # Where the ledger is, how to see the results, and what this run did.
    said = one_line(run.stdout)
    assert f"ledger: {(tmp_path / '.postledger' / 'ledger.db').resolve()}" in said
    assert "results: postledger report --month 2026-10" in said
    assert "this run: 300 completed, 0 failed; nothing is left" in said
    # The plain progress lines say the spend so far against the month's forecast.
    assert re.search(r"; spend 0\.\d{6} of 0\.\d{6} forecast", run.stdout), run.stdout

    status = postledger("status", "--month", "2026-10", "--json", cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    report = json.loads(status.stdout)
    assert report["month"] == "2026-10"
    assert report["counts"]["completed"] == 300
    assert report["unfinished"] == 0
    assert report["spend"]["simulated"] is True  # every batch went to the bundled simulator
    assert report["spend"]["forecast"] > 0  # as the run forecast the month before sending

    table = postledger("status", "--month", "2026-10", "--failed", cwd=tmp_path)
    assert "completed" in table.stdout and "300" in table.stdout
    assert "No post of 2026-10 has failed." in table.stdout
    against = r"spend against forecast\s*│\s*0\.\d{6} of 0\.\d{6}"
    assert re.search(against, table.stdout), table.stdout
    assert "simulated: the bundled simulator, nothing paid" in one_line(table.stdout)

    written = postledger("report", "--month", "2026-10", "--out", "out", cwd=tmp_path)
    assert written.returncode == 0, written.stderr
    summary = (tmp_path / "out" / "summary-2026-10.md").read_text()
    assert "| spend | simulated: the bundled simulator, nothing paid |" in summary


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["run", "--month", "2026-13"], "is not a month"),
        (["status", "--month", "10-2026"], "YYYY-MM"),
        (["run", "--month", "2026-10"], "no such file"),
    ],
)
def test_bad_input_is_a_clear_error_not_a_traceback(
    tmp_path: Path, args: list[str], expected: str
) -> None:
    result = postledger(*args, cwd=tmp_path)
    assert result.returncode == 2
    assert expected in result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert not (tmp_path / ".postledger" / "ledger.db").exists()


def test_bad_file_names_file_and_line(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "data" / "posts" / "2026-10.jsonl", ['{"id": "a", "text": "x"}', "{"])
    result = postledger("run", "--month", "2026-10", cwd=tmp_path)
    assert result.returncode == 2
    assert "2026-10.jsonl:2: malformed JSON" in result.stdout
    assert not (tmp_path / ".postledger" / "ledger.db").exists()


def test_status_of_an_unknown_month(tmp_path: Path) -> None:
    result = postledger("status", "--month", "2026-10", cwd=tmp_path)
    assert result.returncode == 1
    assert "knows nothing of 2026-10" in result.stderr


def test_breaker_and_approve_on_a_fresh_folder(tmp_path: Path) -> None:
    shown = postledger("breaker", "--json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    report = json.loads(shown.stdout)
    assert [(b["upstream"], b["level"]) for b in report["breakers"]] == [("simulator", "normal")]
    assert report["waiting_for_a_person"] == []
    assert not (tmp_path / ".postledger").exists()  # looking creates nothing

    answered = postledger("approve", "--month", "2026-10", cwd=tmp_path)
    assert answered.returncode == 1
    assert "Nothing waits for an answer: there is no ledger here yet" in answered.stderr
    assert not (tmp_path / ".postledger").exists()

    from postledger.ledger import Ledger

    (tmp_path / ".postledger").mkdir()  # a ledger, and a breaker that never tripped
    Ledger(f"sqlite:///{tmp_path / '.postledger' / 'ledger.db'}").close()
    answered = postledger("approve", "--month", "2026-10", "--note", "just in case", cwd=tmp_path)
    assert answered.returncode == 1
    assert "the ledger knows nothing of 2026-10" in one_line(answered.stderr)
    assert "postledger run --month 2026-10" in one_line(answered.stderr)
    planned = postledger("plan", "--month", "2026-10", cwd=tmp_path)
    assert planned.returncode == 1
    assert "the ledger knows nothing of 2026-10" in one_line(planned.stdout + planned.stderr)


def test_setup_migrates_an_older_ledger_and_is_idempotent(tmp_path: Path) -> None:
    from postledger.ledger import Ledger
    from postledger.record.db import make_engine
    from postledger.record.migrate import head_revision, upgrade

    url = f"sqlite:///{tmp_path / '.postledger' / 'ledger.db'}"
    (tmp_path / ".postledger").mkdir()
    engine = make_engine(url)
    upgrade(engine, "0001")  # a ledger from before issue 4
    engine.dispose()

    first = postledger("setup", cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    assert f"(schema {head_revision()})" in first.stdout
    assert "work pool postledger (process) created" in first.stdout
    assert "tag limit tag:ai-batch = 2" in first.stdout
    again = postledger("setup", "--tag-limit", "3", cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "work pool postledger (process) already there" in again.stdout
    assert "tag:ai-batch = 2 (left as it was; asked for 3)" in again.stdout
    ledger = Ledger(url, read_only=True)
    assert ledger.schema_revision() == head_revision()
    ledger.close()


@pytest.mark.parametrize("command", [("status", "--month", "2026-10"), ("breaker",)])
def test_a_ledger_of_an_older_schema_is_one_line_with_what_to_do(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    from postledger.record.db import make_engine
    from postledger.record.migrate import upgrade

    (tmp_path / ".postledger").mkdir()
    engine = make_engine(f"sqlite:///{tmp_path / '.postledger' / 'ledger.db'}")
    upgrade(engine, "0004")
    engine.dispose()
    said = postledger(*command, cwd=tmp_path)
    assert said.returncode == 1 and said.stdout == "", said.stdout
    assert "Traceback" not in said.stderr and len(said.stderr.strip().splitlines()) == 1
    assert "revision 0004" in said.stderr and "run `postledger setup`" in said.stderr


def test_a_ledger_database_that_does_not_answer_is_one_line_with_what_to_do(
    tmp_path: Path,
) -> None:
    env = processes.child_env(
        PREFECT_HOME=str(tmp_path / ".prefect-home"),
        # Nothing listens on port 9 (discard) here: the connection is refused at once.
        POSTLEDGER_DATABASE_URL="postgresql+psycopg://postgres@127.0.0.1:9/nowhere",
    )
    said = commands.postledger("status", "--month", "2026-10", cwd=tmp_path, env=env)
    assert said.returncode == 1 and "Traceback" not in said.stderr, said.stderr
    assert "check POSTLEDGER_DATABASE_URL" in said.stderr
    assert len(said.stderr.strip().splitlines()) == 1, said.stderr


# --- approve answers the question that waits, and only that one ------------------------------

MONTH = "2026-10"


def ledger_here(cwd: Path) -> Ledger:
    (cwd / ".postledger").mkdir(exist_ok=True)
    return Ledger(f"sqlite:///{cwd / '.postledger' / 'ledger.db'}")


def waiting_question(cwd: Path, kind: Question, *, open_breaker: bool = False) -> int:
    """A run of MONTH paused on a question of `kind` (no flow run: the answer is only recorded)."""
    ledger = ledger_here(cwd)
    if open_breaker:
        for n in (1, 2):
            ledger.approvals.signal("simulator", Signal.TRANSPORT_FAILURE, f"b{n}", month=MONTH)
    asked = ledger.approvals.ask(
        MONTH,
        "simulator",
        f"a {kind} question",
        flow_run_id=None,
        prefect_api_url=None,
        kind=kind,
        batch_ids=["b1"] if kind is Question.RECOVERY else None,
    )
    ledger.close()
    assert asked.id is not None
    return asked.id


def approvals_state(cwd: Path) -> tuple[object, ...]:
    """Everything an answer could change: the questions, the breaker and its events."""
    ledger = ledger_here(cwd)
    questions = [
        (q.id, q.kind, q.answer, q.poll, q.resubmit) for q in ledger.approvals.approvals(MONTH)
    ]
    state = (
        questions,
        ledger.approvals.breaker("simulator").level,
        len(ledger.approvals.history(limit=1000)),
    )
    ledger.close()
    return state


def one_line(text: str) -> str:
    return " ".join(text.split())


def assert_refused_and_nothing_recorded(
    cwd: Path, question_id: int, before: tuple[object, ...], *args: str
) -> str:
    result = postledger("approve", "--month", MONTH, *args, cwd=cwd)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert approvals_state(cwd) == before
    ledger = ledger_here(cwd)
    still = ledger.approvals.waiting(MONTH)
    ledger.close()
    assert still is not None and still.id == question_id and still.answer is None
    return one_line(result.stderr)


def test_approve_poll_does_not_answer_a_budget_question(tmp_path: Path) -> None:
    asked = waiting_question(tmp_path, Question.BUDGET)
    before = approvals_state(tmp_path)
    message = assert_refused_and_nothing_recorded(tmp_path, asked, before, "--poll")
    assert (
        "The run of 2026-10 waits for an answer about its budget, not about interrupted "
        "batches: answer it with `postledger approve --month 2026-10` to go on past the "
        "budget, or `postledger approve --month 2026-10 --stop`."
    ) in message


def test_approve_resubmit_does_not_answer_the_breaker_question(tmp_path: Path) -> None:
    asked = waiting_question(tmp_path, Question.BREAKER, open_breaker=True)
    before = approvals_state(tmp_path)
    assert before[1] is BreakerLevel.OPEN
    message = assert_refused_and_nothing_recorded(tmp_path, asked, before, "--resubmit")
    assert (
        "The run of 2026-10 waits for an answer about the open circuit breaker of simulator, "
        "not about interrupted batches: answer it with `postledger approve --month 2026-10` "
        "to let the breaker probe"
    ) in message
    assert "`postledger approve --month 2026-10 --stop`" in message


def test_plain_approve_does_not_answer_a_question_about_interrupted_batches(
    tmp_path: Path,
) -> None:
    asked = waiting_question(tmp_path, Question.RECOVERY)
    before = approvals_state(tmp_path)
    message = assert_refused_and_nothing_recorded(tmp_path, asked, before)
    assert (
        "The run of 2026-10 waits for an answer about interrupted batches, not about the "
        "breaker or the budget: answer it with `postledger approve --month 2026-10 --poll`"
    ) in message
    assert "`postledger approve --month 2026-10 --resubmit`" in message
    assert "`postledger approve --month 2026-10 --stop`" in message


def test_approve_stop_with_a_yes_is_refused_before_anything_is_read(tmp_path: Path) -> None:
    asked = waiting_question(tmp_path, Question.RECOVERY)
    before = approvals_state(tmp_path)
    message = assert_refused_and_nothing_recorded(tmp_path, asked, before, "--stop", "--poll")
    assert "--stop says no and cannot go with --poll or --resubmit" in message


def test_approve_poll_with_no_batch_to_poll_does_not_answer_the_open_breaker(
    tmp_path: Path,
) -> None:
    waiting_question(tmp_path, Question.BREAKER, open_breaker=True)
    ledger = ledger_here(tmp_path)
    ledger.approvals.answer(MONTH, "simulator", Answer.TIMED_OUT, note="", by="test")
    ledger.close()  # no question waits now, and the breaker is still open
    before = approvals_state(tmp_path)
    result = postledger("approve", "--month", MONTH, "--poll", cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert approvals_state(tmp_path) == before
    assert "No interrupted batch of 2026-10 needs a yes" in one_line(result.stderr)


@pytest.mark.parametrize(
    ("kind", "args", "said", "answer"),
    [
        (Question.BUDGET, (), "recorded: continue past 2026-10's budget.", Answer.CONTINUE),
        (Question.BUDGET, ("--stop",), "recorded: stop past 2026-10's budget.", Answer.STOP),
        (
            Question.BREAKER,
            (),
            "recorded: continue for 2026-10; the breaker of simulator is probe.",
            Answer.CONTINUE,
        ),
        (
            Question.RECOVERY,
            ("--poll",),
            "recorded for 2026-10's interrupted batches: poll yes, resubmit no.",
            Answer.CONTINUE,
        ),
        (
            Question.RECOVERY,
            ("--stop",),
            "recorded for 2026-10's interrupted batches: poll no, resubmit no.",
            Answer.STOP,
        ),
    ],
)
def test_approve_still_answers_the_question_it_names(
    tmp_path: Path, kind: Question, args: tuple[str, ...], said: str, answer: Answer
) -> None:
    asked = waiting_question(tmp_path, kind, open_breaker=kind is Question.BREAKER)
    result = postledger("approve", "--month", MONTH, *args, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert said in one_line(result.stdout)
    ledger = ledger_here(tmp_path)
    (record,) = [q for q in ledger.approvals.approvals(MONTH) if q.id == asked]
    assert record.answer is answer and record.answered_by == "postledger approve"
    assert ledger.approvals.waiting(MONTH) is None
    ledger.close()


def test_a_run_says_what_it_did_in_one_line() -> None:
    from cli.run_view import what_this_run_did

    done = {"completed": 12, "failed": 1, "unfinished": 0}
    none = {"completed": 0, "failed": 0}
    assert what_this_run_did(none, done) == "this run: nothing was sent, nothing was left to do"
    assert what_this_run_did(none, {"completed": 0, "failed": 0, "unfinished": 5}) == (
        "this run: nothing was finished; 5 posts are left"
    )
    assert what_this_run_did({"completed": 10, "failed": 1}, done) == (
        "this run: 10 completed, 1 failed; nothing is left"
    )


@pytest.mark.parametrize("kind", list(Question))
def test_status_shows_a_paused_month_with_its_question_and_the_answer(
    tmp_path: Path, kind: Question
) -> None:
    ledger = ledger_here(tmp_path)
    ledger.sync_posts(MONTH, [Post("p1", "a post", 1)], model="m", analysis=asked())
    ledger.close()
    waiting_question(tmp_path, kind, open_breaker=kind is Question.BREAKER)
    shown = postledger("status", "--month", MONTH, "--json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    waiting = json.loads(shown.stdout)["waiting_for"]
    assert waiting["question"] == kind.value
    assert waiting["answer_with"].startswith(f"postledger approve --month {MONTH}")
    table = one_line(postledger("status", "--month", MONTH, cwd=tmp_path).stdout)
    assert "paused" in table and f"postledger approve --month {MONTH}" in table
