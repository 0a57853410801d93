"""What `postledger approve` says when an answer goes nowhere: why, and how to answer what
waits. Each is for one outcome of `postledger.guards.answer_routing.route_answer`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from postledger.record.kinds import Question

if TYPE_CHECKING:
    from postledger.guards.answer_routing import NothingWaits, NotThisQuestion


def stop_with_yes(month: str) -> str:
    return (
        "--stop says no and cannot go with --poll or --resubmit: give `postledger approve "
        f"--month {month} --stop` alone to refuse, or --poll and/or --resubmit to say yes."
    )


def not_this_question(route: NotThisQuestion, month: str, upstream: str) -> str:
    """--poll and --resubmit answer interrupted batches only; a plain approve answers the
    breaker or the budget only."""
    about = {
        Question.BREAKER: f"the open circuit breaker of {upstream}",
        Question.BUDGET: "its budget",
        Question.RECOVERY: "interrupted batches",
    }[route.asked]
    given = "interrupted batches" if route.said.yes_to_batches else "the breaker or the budget"
    return (
        f"The run of {month} waits for an answer about {about}, not about {given}: "
        f"{how_to_answer(route.asked, month)}. Nothing was recorded."
    )


def no_batch_needs_a_yes(month: str, upstream: str) -> str:
    """With no question waiting, a yes to interrupted batches when none needs one must not be
    taken for a yes to the open breaker."""
    return (
        f"No interrupted batch of {month} needs a yes; what waits is the open circuit breaker "
        f"of {upstream}: {how_to_answer(Question.BREAKER, month)}. Nothing was recorded."
    )


def nothing_waits(route: NothingWaits, month: str, upstream: str, in_flight: Sequence[str]) -> str:
    from postledger.recovery.steps import in_flight_words

    return (
        f"Nothing waits for an answer: no run of {month} is paused, the breaker of "
        f"{upstream} is {route.breaker}"
        + (
            ", and no interrupted batch needs a yes."
            if not route.batches_need_yes
            else "; interrupted batches need --poll and/or --resubmit."
        )
        + (f" {in_flight_words(month, in_flight)}" if in_flight else "")
    )


def how_to_answer(kind: Question, month: str) -> str:
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
