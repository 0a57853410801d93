"""Asking a person, through the form of a paused flow run (R19).

The flow pauses itself — never a batch task, which would keep its `ai-batch` slot for the whole
pause — after every batch already sent has come back. The question and its answer are recorded
in the ledger, so `postledger approve` can find the paused run from any terminal, and an answer
given while no run waits still counts for the next one.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Literal, TypeVar

from prefect import get_run_logger
from prefect.context import FlowRunContext
from prefect.exceptions import FlowPauseTimeout
from prefect.flow_runs import pause_flow_run
from prefect.input import RunInput
from prefect.settings import get_current_settings
from pydantic import Field

from flows.calling import call_for_a_person
from flows.local_server import LOCAL_SERVER_FLAG
from postledger.ledger import (
    Answer,
    ApprovalRecord,
    BatchStatus,
    FailureKind,
    Ledger,
    PostStatus,
    Question,
)
from postledger.progress import OPENED_BECAUSE, advice, duration, money, spend_words
from postledger.settings import Settings


class BreakerAnswer(RunInput):
    """The Resume form of a run paused by an open breaker."""

    # No default: a person must choose (the form shows no preselected answer).
    decision: Literal["continue", "stop"] = Field(
        description="continue: send again (what it may cost is above); stop: end the run"
    )
    note: str = ""


FormT = TypeVar("FormT", bound=RunInput)


def pause_for_answer(
    ledger: Ledger,
    month: str,
    question: str,
    form: type[FormT],
    settings: Settings,
    *,
    kind: Question,
    batch_ids: list[str] | None = None,
    on_asked: Callable[[], None] | None = None,
) -> tuple[ApprovalRecord, FormT | None]:
    """Record the question (with this run's id and Prefect API, for `postledger approve`), then
    pause with `form` until a person answers. None as the reply: nobody answered in time.
    `on_asked`: called once the question is recorded, before the pause (the progress artifact
    then says what is asked)."""
    context = FlowRunContext.get()
    asked = ledger.approvals.ask(
        month,
        settings.breaker_name(),
        question,
        flow_run_id=str(context.flow_run.id) if context and context.flow_run else None,
        prefect_api_url=get_current_settings().api.url,
        kind=kind,
        batch_ids=batch_ids,
    )
    if on_asked is not None:
        on_asked()
    call_for_a_person(
        month,
        kind,
        flow_run_id=context.flow_run.id if context and context.flow_run else None,
        timeout_seconds=settings.approval_timeout,
    )
    try:
        # poll_interval is typed int but only ever slept on: a float works.
        reply = pause_flow_run(  # type: ignore[call-overload]
            wait_for_input=form.with_initial_data(
                description=f"{question}\n\nEach post is asked the analysis "
                f"{settings.analysis_in_use().said()}."
            ),
            timeout=settings.approval_timeout,
            poll_interval=settings.approval_poll,
        )
    except FlowPauseTimeout:
        return asked, None
    return asked, reply


def how_to_answer(command: str) -> str:
    """Where a person answers: the Prefect UI's Resume, or the command. `postledger run`'s
    private server serves no UI: there, only the command, in another terminal."""
    if os.environ.get(LOCAL_SERVER_FLAG):
        return f"in another terminal, `{command}`"
    return f"Resume in the Prefect UI, or `{command}`"


def no_answer(settings: Settings) -> str:
    return f"no answer within {duration(settings.approval_timeout)}"


def spent_so_far(ledger: Ledger, month: str, settings: Settings) -> str:
    """The month's spend in currency units, for a question's text."""
    words = spend_words(ledger.spend_totals(month), simulated=settings.simulated())
    return f"**{month} so far**: {words}."


def next_batch_cost(ledger: Ledger, month: str, settings: Settings) -> str:
    """What the next batch to send is estimated to cost, in words ("" without a price)."""
    upcoming = ledger.next_batch_estimate(month, ledger.pricing(settings))
    if upcoming is None:
        return ""
    batch_id, cost = upcoming
    return f"about {money(cost)} (`{batch_id}`)"


def ask_to_continue(
    ledger: Ledger, month: str, settings: Settings, on_asked: Callable[[], None] | None = None
) -> Answer:
    """Pause until a person answers (or the timeout passes); record the answer. On continue
    the breaker is in `probe` when this returns."""
    upstream = settings.breaker_name()
    get_run_logger().warning(
        "%s: the breaker of %s is open; nothing more is sent until a person answers: %s",
        month,
        upstream,
        how_to_answer(f"postledger approve --month {month} [--stop]"),
    )
    question = breaker_question(ledger, month, upstream, settings)
    asked, reply = pause_for_answer(
        ledger,
        month,
        question,
        BreakerAnswer,
        settings,
        kind=Question.BREAKER,
        on_asked=on_asked,
    )
    answer = Answer(reply.decision) if reply else Answer.TIMED_OUT
    ledger.approvals.answer(
        month,
        upstream,
        answer,
        note=reply.note if reply else "",
        by="the paused run's form" if reply else no_answer(settings),
        question_id=asked.id,
    )
    return answer


def ask_about_budget(
    ledger: Ledger,
    month: str,
    settings: Settings,
    why: str,
    on_asked: Callable[[], None] | None = None,
    *,
    before_sending: bool = False,
) -> Answer:
    """The next batch could cross the month's budget (or, `before_sending`, the month's
    forecast does, before this run sends anything): pause until a person says go on (for
    the rest of this month) or stop."""
    get_run_logger().warning(
        "%s: %s. Nothing more is sent until a person answers: %s",
        month,
        why,
        how_to_answer(f"postledger approve --month {month} [--stop]"),
    )
    counts = ledger.counts(month)
    cost = next_batch_cost(ledger, month, settings)
    question = "\n".join(
        [
            f"## {month}: the budget would be crossed",
            "",
            f"{why}. "
            + (
                "This run has sent nothing yet."
                if before_sending
                else "Every batch already sent has come back and is saved."
            ),
            "",
            f"{counts[PostStatus.COMPLETED]} posts completed, {counts[PostStatus.FAILED]} "
            "failed; the rest are not sent yet.",
            "",
            spent_so_far(ledger, month, settings),
            "",
            "**continue**: go on past the budget for the rest of this month"
            + (f"; the next batch costs {cost}" if cost else "")
            + ". **stop**: the run ends, nothing more is charged, the rest stays `pending` for "
            f"a later run. {no_answer(settings).capitalize()} counts as stop.",
        ]
    )
    asked, reply = pause_for_answer(
        ledger,
        month,
        question,
        BreakerAnswer,
        settings,
        kind=Question.BUDGET,
        on_asked=on_asked,
    )
    answer = Answer(reply.decision) if reply else Answer.TIMED_OUT
    if asked.id is not None:
        by = "the paused run's form" if reply else no_answer(settings)
        answer = (
            ledger.approvals.close(asked.id, answer, note=reply.note if reply else "", by=by).answer
            or answer
        )
    return answer


def breaker_question(ledger: Ledger, month: str, upstream: str, settings: Settings) -> str:
    """The markdown shown above the Resume form: why, where the month stands, what each
    answer does."""
    counts = ledger.counts(month)
    left = sum(n for s, n in counts.items() if s not in (PostStatus.COMPLETED, PostStatus.FAILED))
    failures = [
        b
        for b in ledger.batches(month, BatchStatus.FAILED, BatchStatus.QUEUED)
        if b.failure_kind is FailureKind.TRANSPORT or (b.sends and b.status is BatchStatus.QUEUED)
    ][-5:]
    history = ledger.approvals.history(upstream, limit=5)
    lines = [
        f"## The circuit breaker of `{upstream}` is open",
        "",
        f"{OPENED_BECAUSE} Nothing new has been sent since; every batch already sent has come "
        "back and is saved.",
        "",
        "**Latest breaker events**",
        "",
        *[
            f"- {e.at:%Y-%m-%d %H:%M:%S} UTC: {e.from_level} → {e.to_level}: {e.why}"
            for e in history
        ],
    ]
    if failures:
        lines += ["", "**Latest failed sends of this month**", ""]
        lines += [f"- `{b.batch_id}`: {b.failure_reason or 'sent again later'}" for b in failures]
    cost = next_batch_cost(ledger, month, settings)
    lines += [
        "",
        f"**{month}**: {counts[PostStatus.COMPLETED]} completed, "
        f"{counts[PostStatus.FAILED]} failed, {left} left.",
        "",
        spent_so_far(ledger, month, settings),
        "",
        "**continue**: the breaker goes to *probe*: one batch at a time"
        + (f" (the first costs {cost})" if cost else "")
        + f", back to {settings.max_in_flight} after a success; another transport failure "
        "opens it again. **stop**: the run ends, nothing more is sent, and the breaker stays "
        f"open for every run until a person continues. {no_answer(settings).capitalize()} "
        "counts as stop.",
        "",
        f"Now: {advice(ledger.approvals.breaker(upstream).level, month)}.",
    ]
    return "\n".join(lines)
