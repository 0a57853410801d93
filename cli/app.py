"""`postledger`: run a month, look at it, prepare the machine, make sample data, simulate.

Commands that need Prefect import it when they run, so `status` and `sim` start fast and the
core stays importable without it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from postledger.batches.posts import InputError, parse_month
from postledger.defaults import MAX_IN_FLIGHT
from postledger.record.plain import read_only

if TYPE_CHECKING:
    from postledger.record.models import Question
    from postledger.settings import Settings

app = typer.Typer(
    help="Send a month of posts to a paid AI service in batches, with a ledger that never loses "
    "track of what was sent, paid for, or finished.",
    no_args_is_help=True,
    add_completion=False,
    # Click's plain help: flags shown as flags (not `<bool>`), paragraphs rewrapped to the
    # terminal instead of broken where the docstring's lines end.
    rich_markup_mode=None,
)
sim_app = typer.Typer(
    help="The bundled upstream simulator (a stand-in for the paid AI).", rich_markup_mode=None
)
app.add_typer(sim_app, name="sim")

out = Console()
err = Console(stderr=True)

MonthOption = Annotated[str, typer.Option("--month", "-m", help="The month, as YYYY-MM.")]


def _settings() -> Settings:
    # Imported when a command runs: `--help` and a mistyped command answer without it
    # (pydantic-settings and SQLAlchemy are most of a read command's start).
    from postledger.settings import Settings

    return Settings()


def _month(value: str) -> str:
    try:
        return parse_month(value)
    except InputError as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None


@app.command()
def run(
    month: MonthOption,
    posts: Annotated[
        Path | None, typer.Option(help="JSONL file of posts; default data/posts/YYYY-MM.jsonl")
    ] = None,
    latency: Annotated[
        float, typer.Option(help="Simulator only: seconds each upstream task takes.")
    ] = 1.0,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show Prefect's logs.")] = False,
    poll: Annotated[
        bool,
        typer.Option(
            "--poll", help="Yes, up front: poll the known tasks of interrupted batches (free)."
        ),
    ] = False,
    resubmit: Annotated[
        bool,
        typer.Option(
            "--resubmit",
            help="Yes, up front: send again interrupted batches with no task id; they may be "
            "charged twice (see `postledger plan`).",
        ),
    ] = False,
) -> None:
    """Run the monthly flow for MONTH now, in this process (Prefect's local mode).

    With no POSTLEDGER_UPSTREAM_URL set, the bundled simulator is started on a free loopback
    port: no real AI is called and nothing is paid. Batches an earlier run sent but never saw
    answered are polled or resubmitted only with a yes: --poll / --resubmit given here, or
    asked for in the paused run's form once everything safe is done.
    """
    from cli.runner import run_month

    month = _month(month)
    if not verbose:
        os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    answers = {"poll": poll, "resubmit": resubmit} if poll or resubmit else {}
    code = run_month(month, posts, sim_latency=latency, console=out, verbose=verbose, **answers)
    raise typer.Exit(code)


@app.command()
def status(
    month: MonthOption,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    watch: Annotated[
        bool,
        typer.Option(
            "--watch",
            "-w",
            help="Refresh every few seconds until the month ends (or Ctrl-C); a month not "
            "started yet is waited for.",
        ),
    ] = False,
    every: Annotated[float, typer.Option(help="Seconds between refreshes with --watch.")] = 3.0,
    failed: Annotated[
        bool, typer.Option("--failed", help="List every failed post with its kind and reason.")
    ] = False,
) -> None:
    """Where MONTH stands, read from the ledger alone: it opens the ledger read-only and makes
    no network call at all."""
    # No settings object and no ORM: the ledger's URL and a few queries in plain SQL are all
    # this needs, and it answers in a fraction of a second.
    from postledger.defaults import ledger_url
    from postledger.progress.status import status
    from postledger.progress.tables import failed_posts_table, failures_table, status_table
    from postledger.record.figures import FailedPost, failed_posts
    from postledger.record.plain import database_url_from_environment

    month = _month(month)
    url = ledger_url(database_url_from_environment(), create_folder=False)

    def look() -> tuple[dict[str, Any] | None, list[FailedPost]]:
        with read_only(url) as reader:
            if reader is None:
                return None, []
            return status(reader, month), failed_posts(reader, month) if failed else []

    def show(report: dict[str, Any], failed_list: list[FailedPost]) -> None:
        if as_json:
            sys.stdout.write(json.dumps(report, indent=2) + "\n")
            return
        out.print(status_table(report))
        if (table := failures_table(report)) is not None:
            out.print(table)
        if failed:
            out.print(failed_posts_table(month, failed_list))

    if not watch:
        report, failed_list = look()
        if report is None:
            err.print(f"[yellow]{_unknown_month(month)}[/]")
            raise typer.Exit(1)
        show(report, failed_list)
        return
    import signal
    import threading
    from datetime import UTC, datetime

    # Ctrl-C sets a flag rather than raising: a KeyboardInterrupt that lands inside a driver's
    # clean-up is swallowed there ("Exception ignored in ..."), and the loop would go on.
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    while not stop.is_set():
        report, failed_list = look()
        out.clear()
        out.print(f"{datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC, every {every:g} s (Ctrl-C: stop)")
        if report is None:
            out.print(f"waiting for {month} to start: the ledger knows nothing of it yet")
        else:
            show(report, failed_list)
            if report["unfinished"] == 0 and report["waiting_for"] is None:
                out.print(f"{month} has ended: every post is completed or failed.")
                return
        stop.wait(every)


@app.command()
def report(
    month: MonthOption,
    out_dir: Annotated[Path, typer.Option("--out", help="Folder to write the files to.")] = Path(
        "reports"
    ),
    with_text: Annotated[
        bool,
        typer.Option(
            "--text", help="Put each post's text in the rows too (left out by default: long)."
        ),
    ] = False,
    parquet: Annotated[
        bool,
        typer.Option(
            "--parquet",
            help="Also write posts-MONTH.parquet, the same rows for a dataframe. Needs pyarrow: "
            "`uv sync --extra parquet` (or `pip install 'postledger[parquet]'`).",
        ),
    ] = False,
) -> None:
    """Write MONTH's results for the people who use them, read from the ledger only (the AI is
    never called).

    posts-MONTH.csv and posts-MONTH.jsonl hold one row per post: its id, the other fields of
    its input line (author, source, …; a name the report uses itself gets the prefix input_),
    its status, category, sentiment and summary, why it failed, its paid attempts, and what it
    cost: cost_currency_units is its share of the month's confirmed spend (each batch's cost
    shared over its posts by characters, so the column adds up to the confirmed spend
    exactly), wasted_currency_units its share of spend paid for unusable output. Amounts are in
    the currency of the price table. summary-MONTH.md: the month in a page, with the completed
    posts counted by category and by sentiment."""
    # Plain SQL and no ORM, as `status`: one snapshot of the ledger, opened read-only.
    from postledger.defaults import ledger_url
    from postledger.progress.parquet import MissingPyarrow
    from postledger.progress.report import write_report
    from postledger.progress.status import status
    from postledger.record.plain import database_url_from_environment

    month = _month(month)
    url = ledger_url(database_url_from_environment(), create_folder=False)
    with read_only(url) as reader:
        summary = status(reader, month) if reader is not None else None
        if reader is None or summary is None:
            err.print(f"[yellow]The ledger knows nothing of {month} yet.[/]")
            raise typer.Exit(1)
        try:
            written = write_report(reader, month, summary, out_dir, text=with_text, parquet=parquet)
        except MissingPyarrow as missing:
            # One line, whatever the terminal's width; "[parquet]" is text, not markup.
            err.print(f"[red]error:[/] {escape(str(missing))}", soft_wrap=True, highlight=False)
            raise typer.Exit(1) from None
    for path in written:
        out.print(f"wrote {path}")


@app.command()
def retry(
    month: MonthOption,
    kind: Annotated[
        list[str] | None,
        typer.Option("--kind", "-k", help="Only failed posts of this kind (repeatable)."),
    ] = None,
) -> None:
    """A person's decision: plan MONTH's failed posts again (all, or of --kind); the next
    `postledger run` sends them. Sending again may be charged again."""
    from postledger.ledger import Ledger
    from postledger.record.models import FailureKind

    month = _month(month)
    try:
        kinds = {FailureKind(k) for k in kind} if kind else None
    except ValueError:
        known = ", ".join(k.value for k in FailureKind)
        err.print(f"[red]error:[/] unknown kind in {kind}; known kinds: {known}")
        raise typer.Exit(2) from None
    settings = _settings()
    ledger = Ledger(settings.resolved_database_url(), busy_timeout=settings.sqlite_busy_timeout)
    count = ledger.retry_failed(month, kinds)
    ledger.close()
    out.print(f"{count} failed posts of {month} will be sent again by the next run.")


@app.command()
def approve(
    month: MonthOption,
    note: Annotated[str, typer.Option(help="Why: kept in the ledger with the answer.")] = "",
    stop: Annotated[
        bool,
        typer.Option(
            "--stop",
            help="Refuse whatever waits: the run ends, an open breaker stays open, interrupted "
            "batches are neither polled nor sent again.",
        ),
    ] = False,
    poll: Annotated[
        bool, typer.Option("--poll", help="Interrupted batches: yes, poll their known tasks.")
    ] = False,
    resubmit: Annotated[
        bool,
        typer.Option(
            "--resubmit",
            help="Interrupted batches: yes, send again those with no task id (may be charged "
            "twice; `postledger plan` shows how much).",
        ),
    ] = False,
) -> None:
    """Answer MONTH's paused run, as its Resume form in the Prefect UI would.

    An open circuit breaker or the month's budget: continue (past the budget; or the breaker
    goes to probe, one batch at a time first) or --stop. Interrupted batches: --poll and/or
    --resubmit say yes; what is not said is no; --stop says no to both. An answer that does not
    fit the question that waits is refused, and nothing is recorded. The answer is recorded
    in the ledger first; then the paused run, if one waits, is resumed with it. With no paused
    run, the answer counts for the next run."""
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    from postledger.ledger import Ledger
    from postledger.progress.status import open_read_only
    from postledger.record.models import Answer, BreakerLevel, Question
    from postledger.recovery.steps import in_flight_words, recovery_plan, what_a_yes_covers

    month = _month(month)
    if stop and (poll or resubmit):
        _refuse(
            "--stop says no and cannot go with --poll or --resubmit: give `postledger approve "
            f"--month {month} --stop` alone to refuse, or --poll and/or --resubmit to say yes."
        )
    settings = _settings()
    looked = open_read_only(settings)  # a folder with no ledger gets none made for it
    if looked is None:
        err.print("Nothing waits for an answer: there is no ledger here yet.")
        raise typer.Exit(1)
    # Seen: posts synced, or a question asked (a breaker trips for every month of a run).
    known = looked.knows_month(month) or bool(looked.approvals.approvals(month))
    looked.close()
    ledger = Ledger(settings.resolved_database_url(), busy_timeout=settings.sqlite_busy_timeout)
    question = ledger.approvals.waiting(month)
    if question is None and not known:
        ledger.close()
        err.print(f"Nothing waits for an answer: {_unknown_month(month)}")
        raise typer.Exit(1)
    upstream = question.upstream if question else settings.breaker_name()
    with ledger.plain() as reader:
        plan = recovery_plan(reader, month, settings)
    breaker_open = ledger.approvals.breaker(upstream).level is BreakerLevel.OPEN
    wrong: str | None = None
    if question is not None:
        wrong = _wrong_question(question.kind, month, upstream, yes=poll or resubmit, stop=stop)
    elif (poll or resubmit) and not plan.needs_yes and breaker_open:
        wrong = _no_batch_needs_a_yes(month, upstream)
    if wrong is not None:
        ledger.close()
        _refuse(wrong)
    run_input: dict[str, object]
    if (question and question.kind is Question.RECOVERY) or (
        question is None and (poll or resubmit) and plan.needs_yes
    ):
        # With no run waiting, the answer covers the batches shown now, as they are now: never
        # those the live run has in flight (they are in no step of the plan).
        shown = (question.batch_ids if question else None) or [s.batch_id for s in plan.steps]
        record = ledger.approvals.answer_recovery(
            month,
            upstream,
            poll=poll and not stop,
            resubmit=resubmit and not stop,
            note=note,
            by="postledger approve",
            batch_ids=shown,
            question_id=question.id if question else None,
            shown_seq=question.shown_seq if question else plan.as_of,
        )
        said = (
            f"poll {'yes' if record.poll else 'no'}, resubmit {'yes' if record.resubmit else 'no'}"
        )
        covers = what_a_yes_covers(
            month,
            shown if question else plan.asked_about,
            [] if question else plan.in_flight,
        )
        out.print(f"recorded for {month}'s interrupted batches: {said}. {covers}")
        run_input = {"poll": bool(record.poll), "resubmit": bool(record.resubmit), "note": note}
    elif question is not None and question.kind is Question.BUDGET and question.id is not None:
        answer = Answer.STOP if stop else Answer.CONTINUE
        ledger.approvals.close(question.id, answer, note=note, by="postledger approve")
        out.print(f"recorded: {answer} past {month}'s budget.")
        run_input = {"decision": answer.value, "note": note}
    else:
        if question is None and ledger.approvals.breaker(upstream).level is not BreakerLevel.OPEN:
            err.print(
                f"Nothing waits for an answer: no run of {month} is paused, the breaker of "
                f"{upstream} is {ledger.approvals.breaker(upstream).level}"
                + (
                    ", and no interrupted batch needs a yes."
                    if not plan.needs_yes
                    else "; interrupted batches need --poll and/or --resubmit."
                )
                + (f" {in_flight_words(month, plan.in_flight)}" if plan.in_flight else "")
            )
            raise typer.Exit(1)
        answer = Answer.STOP if stop else Answer.CONTINUE
        breaker = ledger.approvals.answer(
            month, upstream, answer, note=note, by="postledger approve"
        )
        out.print(f"recorded: {answer} for {month}; the breaker of {upstream} is {breaker.level}.")
        run_input = {"decision": answer.value, "note": note}
    if question is not None and question.flow_run_id:
        from flows.resume import NotResumed, resume_run

        try:
            resume_run(
                question,
                run_input,
                asked_again=lambda: ledger.approvals.asked_since(month, question.id),
            )
        except NotResumed as exc:
            err.print(
                f"[yellow]The paused run was not resumed:[/] {exc}. The answer counts for the "
                "next run."
            )
        else:
            out.print(f"resumed flow run {question.flow_run_id}.")
    ledger.close()


def _unknown_month(month: str) -> str:
    return (
        f"the ledger knows nothing of {month}: no run of it has started here. (Another month? "
        f"`postledger status --month {month}` says what the ledger has.) To start it: "
        f"postledger run --month {month}"
    )


def _refuse(message: str) -> NoReturn:
    """An answer that does not fit: nothing is recorded, and the message says what would."""
    err.print(message, soft_wrap=True, markup=False, highlight=False)
    raise typer.Exit(2)


def _wrong_question(
    kind: Question, month: str, upstream: str, *, yes: bool, stop: bool
) -> str | None:
    """Why this answer is not one to the question that waits, or None if it is one: --poll and
    --resubmit answer interrupted batches only; a plain approve answers the breaker or the
    budget only; --stop refuses any of them."""
    from postledger.record.models import Question

    fits = kind is Question.RECOVERY if yes else (stop or kind is not Question.RECOVERY)
    if fits:
        return None
    about = {
        Question.BREAKER: f"the open circuit breaker of {upstream}",
        Question.BUDGET: "its budget",
        Question.RECOVERY: "interrupted batches",
    }[kind]
    given = "interrupted batches" if yes else "the breaker or the budget"
    return (
        f"The run of {month} waits for an answer about {about}, not about {given}: "
        f"{_how_to_answer(kind, month)}. Nothing was recorded."
    )


def _no_batch_needs_a_yes(month: str, upstream: str) -> str:
    """With no question waiting, a yes to interrupted batches when none needs one must not be
    taken for a yes to the open breaker."""
    from postledger.record.models import Question

    return (
        f"No interrupted batch of {month} needs a yes; what waits is the open circuit breaker "
        f"of {upstream}: {_how_to_answer(Question.BREAKER, month)}. Nothing was recorded."
    )


def _how_to_answer(kind: Question, month: str) -> str:
    from postledger.record.models import Question

    command = f"`postledger approve --month {month}"
    if kind is Question.RECOVERY:
        return (
            f"answer it with {command} --poll` to poll their known tasks (free), "
            f"{command} --resubmit` to send again those with no task id (they may be charged "
            f"twice; `postledger plan --month {month}` shows how much), both flags for both, "
            f"or {command} --stop` for neither"
        )
    if kind is Question.BUDGET:
        return f"answer it with {command}` to go on past the budget, or {command} --stop`"
    return (
        f"answer it with {command}` to let the breaker probe (one batch at a time first), "
        f"or {command} --stop` to leave it open"
    )


@app.command("plan")
def plan_command(
    month: MonthOption,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """What the next run would do with MONTH's interrupted batches, and the cost at risk.
    Reads the ledger only (never calls the AI)."""
    # Plain SQL and no ORM, as `status`: it answers in a fraction of a second.
    from postledger.progress.tables import recovery_table
    from postledger.record.rows import knows_month
    from postledger.recovery.steps import in_flight_words, recovery_plan

    month = _month(month)
    settings = _settings()
    with read_only(settings.resolved_database_url(create_folder=False)) as reader:
        if reader is None or not knows_month(reader, month):
            err.print(f"[yellow]{_unknown_month(month)}[/]")
            raise typer.Exit(1)
        plan = recovery_plan(reader, month, settings)
    if as_json:
        sys.stdout.write(json.dumps({"month": month, **plan.summary()}, indent=2) + "\n")
    else:
        out.print(recovery_table(month, plan))
        if plan.in_flight:
            out.print(in_flight_words(month, plan.in_flight))


@app.command()
def breaker(
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """The circuit breakers (one per upstream), their history and what to do. Reads the ledger
    only (never calls the AI)."""
    from postledger.progress.status import breaker_report
    from postledger.progress.tables import breaker_tables

    settings = _settings()
    with read_only(settings.resolved_database_url(create_folder=False)) as reader:
        report = breaker_report(reader, settings.breaker_name())
    if as_json:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        for table in breaker_tables(report):
            out.print(table)


@app.command()
def setup(
    tag_limit: Annotated[
        int, typer.Option(help="Batches in flight across all runs.")
    ] = MAX_IN_FLIGHT,
    work_pool: Annotated[
        str, typer.Option(help="The process work pool prefect.yaml deploys to.")
    ] = "postledger",
    ledger_block: Annotated[
        str | None,
        typer.Option(help="Migrate the ledger this postledger-ledger block names instead."),
    ] = None,
    notify: Annotated[
        str | None,
        typer.Option(
            help="A notification block (type/name, e.g. slack-webhook/ops): a run that pauses "
            "for a person sends its question through it (a Prefect automation)."
        ),
    ] = None,
) -> None:
    """Prepare the ledger and Prefect (idempotent): migrate the ledger to the current schema,
    register the block types, create the `ai-batch` tag limit, the work pool and, with
    --notify, the automation that calls a person when a run pauses."""
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    from contextlib import AbstractContextManager, nullcontext

    from flows.local_server import local_prefect_server
    from postledger.ledger import Ledger
    from postledger.record.db import safe_url

    # The embedded default: the local server `postledger run` starts. Prefect reads
    # PREFECT_API_URL when it is first imported, so nothing imports it before the server is up.
    server: AbstractContextManager[object] = (
        nullcontext() if os.environ.get("PREFECT_API_URL") else local_prefect_server()
    )
    with server:
        from blocks import register_block_types, settings_from_blocks
        from flows.setup import prepare_prefect

        if ledger_block:
            register_block_types()  # so that the block can be loaded on a server never set up
        settings = settings_from_blocks(ledger=ledger_block) if ledger_block else _settings()
        url = settings.resolved_database_url()
        ledger = Ledger(url, busy_timeout=settings.sqlite_busy_timeout)  # opening migrates
        out.print(f"ledger ready: {safe_url(url)} (schema {ledger.schema_revision()})")
        ledger.close()
        try:
            lines = prepare_prefect(tag_limit, work_pool, notify)
        except ValueError as exc:  # a notification block that is not there
            err.print(f"[red]error:[/] {escape(str(exc))}")
            raise typer.Exit(2) from None
    for line in lines:
        out.print(line)


@app.command()
def sample(
    month: MonthOption,
    count: Annotated[int, typer.Option(help="How many posts.")] = 300,
    seed: Annotated[int, typer.Option(help="Same seed, same file.")] = 7,
    out_path: Annotated[
        Path | None, typer.Option("--out", help="Default: data/posts/YYYY-MM.jsonl")
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace the file if it exists already.")
    ] = False,
) -> None:
    """Write a deterministic, realistic sample month of posts."""
    from simulator.sample import generate_posts, write_posts

    month = _month(month)
    path = out_path or _settings().data_dir / f"{month}.jsonl"
    if path.exists() and not force:
        # A month's posts file may be real data: never replaced without being asked.
        err.print(
            f"[red]error:[/] {path} exists already. Give another --out, or add --force to "
            "replace it."
        )
        raise typer.Exit(1)
    write_posts(path, generate_posts(month, count, seed))
    out.print(f"wrote {count} posts to {path}")


@sim_app.command("serve")
def sim_serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port; 0 picks a free one.")] = 8780,
    latency: Annotated[float, typer.Option(help="Seconds each task takes.")] = 1.0,
    seed: Annotated[int, typer.Option(help="Seed of task ids (and faults).")] = 0,
    create_delay: Annotated[
        float, typer.Option(help="Hold each create's answer this long after charging it.")
    ] = 0.0,
    faults: Annotated[
        str | None,
        typer.Option(help="Faults to inject, e.g. 'create:http_503@0.05,output:bad_field#3'."),
    ] = None,
    scenario: Annotated[
        Path | None, typer.Option(help="A JSON fault plan: {seed, rules: [...]}.")
    ] = None,
    ignore_idempotency_keys: Annotated[
        bool,
        typer.Option(
            "--ignore-idempotency-keys",
            help="Act like an upstream without idempotency: every create is a new, paid task.",
        ),
    ] = False,
) -> None:
    """Serve the simulated task API until Ctrl-C. POSTLEDGER_SIM_API_KEY, if set, is required
    as the Bearer token. Faults (see simulator/faults.py) can also be changed at run time
    with POST /_sim/faults."""
    from pydantic import ValidationError

    from simulator.faults import load_plan
    from simulator.server import serve

    try:
        plan = load_plan(faults, scenario, seed)
    except (ValidationError, ValueError, OSError) as exc:
        err.print(f"[red]error:[/] bad fault plan: {exc}")
        raise typer.Exit(2) from None

    serve(
        host,
        port,
        latency=latency,
        seed=seed,
        api_key=os.environ.get("POSTLEDGER_SIM_API_KEY"),
        create_delay=create_delay,
        faults=plan,
        honour_keys=not ignore_idempotency_keys,
    )


def main() -> None:
    """The `postledger` command. A ledger that cannot be used as it is (an older schema, a
    database that does not answer, a write that failed) is said in one line with what to do,
    never as a traceback; anything else unexpected keeps its traceback."""
    try:
        app(prog_name="postledger")
    except Exception as exc:
        problem = _ledger_problem(exc)
        if problem is None:
            raise
        err.print(f"error: {problem}", soft_wrap=True, markup=False, highlight=False)
        raise SystemExit(1) from None


def _ledger_problem(exc: Exception) -> str | None:
    # Imported here: only a failing command pays for them.
    from sqlalchemy.exc import OperationalError

    from postledger.record.db import LedgerUnavailable
    from postledger.record.migrate import SchemaMismatch
    from postledger.record.plain import LedgerUnreadable, unusable

    if isinstance(exc, SchemaMismatch | LedgerUnavailable | LedgerUnreadable):
        return str(exc)
    if isinstance(exc, OperationalError):
        return unusable(str(exc.orig).strip().splitlines()[0] if exc.orig else "no answer")
    return None
