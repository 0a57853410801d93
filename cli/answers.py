"""`postledger retry` and `postledger approve`: a person's decisions, recorded in the ledger.

Where an answer goes is the core's (`postledger.guards.answer_routing`); here the ledger is read
for it, the answer written, a paused run resumed, and each outcome said in words
(`cli/answer_words.py`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, NoReturn, assert_never

import typer

from cli import answer_words
from cli.shared import MonthOption, checked_month, err, load_settings, out, unknown_month

if TYPE_CHECKING:
    from postledger.guards.answer_routing import AnswerRecovery, Route, Said
    from postledger.ledger import Ledger
    from postledger.record.models import ApprovalRecord
    from postledger.recovery.steps import RecoveryPlan
    from postledger.settings import Settings

BY = "postledger approve"


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

    month = checked_month(month)
    try:
        kinds = {FailureKind(k) for k in kind} if kind else None
    except ValueError:
        known = ", ".join(k.value for k in FailureKind)
        err.print(f"[red]error:[/] unknown kind in {kind}; known kinds: {known}")
        raise typer.Exit(2) from None
    settings = load_settings()
    ledger = Ledger(settings.resolved_database_url(), busy_timeout=settings.sqlite_busy_timeout)
    count = ledger.retry_failed(month, kinds)
    ledger.close()
    out.print(f"{count} failed posts of {month} will be sent again by the next run.")


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
    from postledger.guards.answer_routing import StopWithYes, read_answer
    from postledger.ledger import Ledger

    month = checked_month(month)
    said = read_answer(poll=poll, resubmit=resubmit, stop=stop)
    if isinstance(said, StopWithYes):
        _refuse(answer_words.stop_with_yes(month))
    settings = load_settings()
    known = _month_seen(settings, month)
    ledger = Ledger(settings.resolved_database_url(), busy_timeout=settings.sqlite_busy_timeout)
    try:
        _answer(ledger, settings, month, said, note=note, month_known=known)
    finally:
        ledger.close()


def _month_seen(settings: Settings, month: str) -> bool:
    """Whether the ledger has seen `month`: posts synced, or a question asked (a breaker trips
    for every month of a run). A folder with no ledger gets none made for it: nothing waits."""
    from postledger.progress.status import open_read_only

    looked = open_read_only(settings)
    if looked is None:
        err.print("Nothing waits for an answer: there is no ledger here yet.")
        raise typer.Exit(1)
    known = looked.knows_month(month) or bool(looked.approvals.approvals(month))
    looked.close()
    return known


@dataclass(frozen=True)
class _Waiting:
    """What the ledger showed of the month when the answer was routed."""

    month: str
    upstream: str  # the question's, else the configured one
    question: ApprovalRecord | None  # the month's open question
    plan: RecoveryPlan  # its interrupted batches


def _answer(
    ledger: Ledger, settings: Settings, month: str, said: Said, *, note: str, month_known: bool
) -> None:
    """Read what waits, route the answer (the core decides), record it, resume a paused run."""
    from postledger.guards.answer_routing import Found, route_answer
    from postledger.recovery.steps import recovery_plan

    question = ledger.approvals.waiting(month)
    upstream = question.upstream if question else settings.breaker_name()
    with ledger.plain() as reader:
        plan = recovery_plan(reader, month, settings)
    found = Found(
        question=question,
        month_known=month_known,
        breaker=ledger.approvals.breaker(upstream).level,
        batches_need_yes=plan.needs_yes,
    )
    waiting = _Waiting(month, upstream, question, plan)
    run_input = _record(ledger, waiting, route_answer(said, found), note)
    if question is not None and question.flow_run_id:
        _resume(ledger, month, question, run_input)


def _record(ledger: Ledger, waiting: _Waiting, route: Route, note: str) -> dict[str, object]:
    """The answer written where the route says, and the paused run's input that says it; an
    answer that goes nowhere ends the command instead, with nothing recorded."""
    from postledger.guards.answer_routing import (
        AnswerBreaker,
        AnswerBudget,
        AnswerRecovery,
        NoBatchNeedsAYes,
        NothingWaits,
        NotThisQuestion,
        UnknownMonth,
    )

    month, upstream = waiting.month, waiting.upstream
    match route:
        case UnknownMonth():
            err.print(f"Nothing waits for an answer: {unknown_month(month)}")
            raise typer.Exit(1)
        case NotThisQuestion():
            _refuse(answer_words.not_this_question(route, month, upstream))
        case NoBatchNeedsAYes():
            _refuse(answer_words.no_batch_needs_a_yes(month, upstream))
        case NothingWaits():
            err.print(answer_words.nothing_waits(route, month, upstream, waiting.plan.in_flight))
            raise typer.Exit(1)
        case AnswerRecovery():
            return _record_recovery(ledger, waiting, route, note)
        case AnswerBudget(question_id=question_id, answer=answer):
            ledger.approvals.close(question_id, answer, note=note, by=BY)
            out.print(f"recorded: {answer} past {month}'s budget.")
            return {"decision": answer.value, "note": note}
        case AnswerBreaker(answer=answer):
            breaker = ledger.approvals.answer(month, upstream, answer, note=note, by=BY)
            out.print(
                f"recorded: {answer} for {month}; the breaker of {upstream} is {breaker.level}."
            )
            return {"decision": answer.value, "note": note}
        case _:
            assert_never(route)


def _record_recovery(
    ledger: Ledger, waiting: _Waiting, route: AnswerRecovery, note: str
) -> dict[str, object]:
    """A yes (or no) to interrupted batches: to the open question, or with none, for the next
    run. With no run waiting, the answer covers the batches shown now, as they are now: never
    those the live run has in flight (they are in no step of the plan)."""
    from postledger.recovery.steps import what_a_yes_covers

    month, question, plan = waiting.month, waiting.question, waiting.plan
    shown = (question.batch_ids if question else None) or [s.batch_id for s in plan.steps]
    record = ledger.approvals.answer_recovery(
        month,
        waiting.upstream,
        poll=route.poll,
        resubmit=route.resubmit,
        note=note,
        by=BY,
        batch_ids=shown,
        question_id=question.id if question else None,
        shown_seq=question.shown_seq if question else plan.as_of,
    )
    said = f"poll {'yes' if record.poll else 'no'}, resubmit {'yes' if record.resubmit else 'no'}"
    covers = what_a_yes_covers(
        month,
        shown if question else plan.asked_about,
        [] if question else plan.in_flight,
    )
    out.print(f"recorded for {month}'s interrupted batches: {said}. {covers}")
    return {"poll": bool(record.poll), "resubmit": bool(record.resubmit), "note": note}


def _resume(
    ledger: Ledger, month: str, question: ApprovalRecord, run_input: dict[str, object]
) -> None:
    """The paused run resumed with the answer just recorded; one that cannot be resumed finds
    the answer in the ledger when a run next starts."""
    from flows.resume import NotResumed, resume_run

    try:
        resume_run(
            question,
            run_input,
            asked_again=lambda: ledger.approvals.asked_since(month, question.id),
        )
    except NotResumed as exc:
        err.print(
            f"[yellow]The paused run was not resumed:[/] {exc}. The answer counts for the next run."
        )
    else:
        out.print(f"resumed flow run {question.flow_run_id}.")


def _refuse(message: str) -> NoReturn:
    """An answer that does not fit: nothing is recorded, and the message says what would."""
    err.print(message, soft_wrap=True, markup=False, highlight=False)
    raise typer.Exit(2)
