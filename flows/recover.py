"""Batches an earlier run sent but never saw answered (R22-R24): nothing is polled or sent again
until a person said yes — up front (`postledger run --poll --resubmit`), ahead of the run
(`postledger approve` with no run waiting), or in the form of this run, paused once after the
safe work is done (R47). No answer leaves them waiting, charged nothing.

A yes covers the batches it was shown, as they were then (R44): a batch that changed after it
was given (in flight then, sent again, its task found since) is asked about again. A yes given
before the run that does not cover every batch is not used up front: the run asks about all of
them, and carries the earlier yes out for the batches it covers only if nobody answers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from prefect import get_run_logger
from prefect.input import RunInput

from flows.approval import how_to_answer, no_answer, pause_for_answer, spent_so_far
from postledger.ledger import ApprovalRecord, Ledger, Question
from postledger.preflight import Coverage, RecoveryAction, RecoveryPlan, coverage
from postledger.progress import money
from postledger.settings import Settings


class RecoveryAnswer(RunInput):
    """The Resume form of a run paused about interrupted batches."""

    poll: bool = True  # poll the tasks the upstream made: never a new charge
    resubmit: bool = False  # send again the batches with no task id: may be charged twice
    note: str = ""


def answer_given_before(
    ledger: Ledger,
    month: str,
    plan: RecoveryPlan,
    settings: Settings,
    *,
    poll: bool | None,
    resubmit: bool | None,
) -> ApprovalRecord | None:
    """The person's answer if it was given before this run asked: as run parameters, or
    recorded by `postledger approve`. None: the run has to ask — also when the answer recorded
    does not cover every batch that needs a yes (the run's pause is the one place to ask, and
    asks once about them all)."""
    if not plan.needs_yes:
        return None
    batch_ids = [s.batch_id for s in plan.steps]
    if poll is not None or resubmit is not None:
        return ledger.approvals.answer_recovery(
            month,
            settings.breaker_name(),
            poll=bool(poll),
            resubmit=bool(resubmit),
            note="",
            by="run parameters (postledger run --poll/--resubmit)",
            batch_ids=batch_ids,
            shown_seq=plan.as_of,
        )
    standing = ledger.approvals.standing_recovery(month)
    if standing is None:
        return None
    covers = covered_by(ledger, plan, standing)
    if covers.whole:
        return standing
    get_run_logger().warning(
        "%s: %s; this run asks about its interrupted batches once the safe work is done "
        "(with no answer, the earlier one is carried out for the %d batches it covers)",
        month,
        not_covered(standing, covers),
        len(covers.covered),
    )
    return None


def covered_by(ledger: Ledger, plan: RecoveryPlan, answer: ApprovalRecord) -> Coverage:
    """Which of the plan's batches the answer covers: shown with it, and unchanged since."""
    with ledger.plain() as reader:
        return coverage(reader, answer.month, plan, answer.batch_ids, answer.shown_seq)


def not_covered(answer: ApprovalRecord, covers: Coverage) -> str:
    """Why the answer leaves batches out, in words."""
    one = len(covers.not_covered) == 1
    return (
        f"the answer given earlier ({answer.answered_by}) does not cover "
        f"{', '.join(covers.not_covered)}: {'it' if one else 'they'} changed after it was given "
        f"({'it was' if one else 'they were'} in flight then, sent again since, or something "
        "new was learned of " + ("it)" if one else "them)")
    )


@dataclass(frozen=True)
class Recovered:
    """What a yes lets the run do with interrupted batches: poll these (their task ids are
    saved), and send these again in the submission that first carried them (on a Batch API,
    so that its job is looked for by its metadata first, and never made twice)."""

    polls: list[str] = field(default_factory=list)
    resends: list[str] = field(default_factory=list)


def carry_out(
    ledger: Ledger,
    plan: RecoveryPlan,
    answer: ApprovalRecord,
    settings: Settings,
    *,
    unsearched: Sequence[str] = (),
    holder: str | None = None,
) -> Recovered:
    """Do what the answer allows for the batches it covers. A resubmission of a batch sent
    alone goes back to the queue with its same idempotency key and request; one that a
    submission carried is sent again by that submission, under its same key. `unsearched`:
    batches whose orphaned job could not be looked for (the listing gave no answer): they may
    have been made and paid for, so they are not sent again in this run, whatever the yes.
    `holder`: the run's claim on the month, the fence of what it writes."""
    logger = get_run_logger()
    covers = covered_by(ledger, plan, answer)
    covered = set(covers.covered)
    polls = [s.batch_id for s in plan.of(RecoveryAction.POLL) if s.batch_id in covered]
    resends = [s.batch_id for s in plan.of(RecoveryAction.RESUBMIT) if s.batch_id in covered]
    if answer.id is not None:
        ledger.approvals.mark_used(answer.id)
    if not answer.poll:
        polls = []
    if not answer.resubmit:
        resends = []
    if waiting := [batch_id for batch_id in resends if batch_id in set(unsearched)]:
        logger.warning(
            "%s: not sent again, though a person said yes: the upstream's list of jobs could "
            "not be read, and their job may have been made (and paid for). They wait for a "
            "look that answers",
            ", ".join(waiting),
        )
        resends = [batch_id for batch_id in resends if batch_id not in set(waiting)]
    in_submissions = [b for b in resends if ledger.batch(b).submission_id is not None]
    for batch_id in resends:
        if batch_id not in in_submissions:
            ledger.resend_later(
                batch_id,
                f"resubmission confirmed by a person ({answer.answered_by})",
                max_attempts=settings.max_attempts,
                holder=holder,
            )
    if covers.not_covered:
        logger.warning(
            "%s: nothing is done with them without a new yes", not_covered(answer, covers)
        )
    left = len(plan.asked_about) - len(polls) - len(resends)
    if left:
        logger.warning("%d interrupted batches wait for a person's yes", left)
    return Recovered(polls, in_submissions)


def ask_about_interrupted(
    ledger: Ledger,
    month: str,
    plan: RecoveryPlan,
    settings: Settings,
    on_asked: Callable[[], None] | None = None,
) -> ApprovalRecord | None:
    """Pause once and ask; None if nobody answered in time (the batches keep waiting). An
    answer given earlier that covers some of them only is carried out for those if nobody
    answers (it is then what is returned); the answer given here replaces it."""
    logger = get_run_logger()
    logger.warning(
        "%s: interrupted batches need a yes: %s",
        month,
        how_to_answer(f"postledger approve --month {month} --poll [--resubmit]"),
    )
    earlier = ledger.approvals.standing_recovery(month)
    covers = covered_by(ledger, plan, earlier) if earlier is not None else None
    batch_ids = [s.batch_id for s in plan.steps]

    def asked_now() -> None:
        # Kept with the question: an answer to it that no run takes up covers the batches as
        # this run showed them.
        ledger.approvals.shown(month, plan.as_of)
        if on_asked is not None:
            on_asked()

    question = recovery_question(
        month,
        plan,
        settings,
        spent=spent_so_far(ledger, month, settings),
        earlier=_earlier(earlier, covers) if earlier is not None and covers is not None else "",
    )
    asked, reply = pause_for_answer(
        ledger,
        month,
        question,
        RecoveryAnswer,
        settings,
        kind=Question.RECOVERY,
        batch_ids=batch_ids,
        on_asked=asked_now,
    )
    if reply is None:
        if asked.id is not None:
            ledger.approvals.lapse(asked.id, no_answer(settings))
        if earlier is not None and covers is not None and covers.covered:
            logger.warning(
                "no answer in time: the answer given earlier (%s) is carried out for %s, the "
                "batches it covers; the others keep waiting",
                earlier.answered_by,
                ", ".join(covers.covered),
            )
            return earlier
        logger.warning("no answer in time: the interrupted batches keep waiting")
        return None
    return ledger.approvals.answer_recovery(
        month,
        settings.breaker_name(),
        poll=reply.poll,
        resubmit=reply.resubmit,
        note=reply.note,
        by="the paused run's form",
        batch_ids=batch_ids,
        question_id=asked.id,
        shown_seq=plan.as_of,
    )


def _earlier(answer: ApprovalRecord, covers: Coverage) -> str:
    """The question's words about an answer given before the run asked (by `postledger
    approve`, say, while it ran)."""
    said = f"poll {'yes' if answer.poll else 'no'}, resubmit {'yes' if answer.resubmit else 'no'}"
    covered = ", ".join(f"`{b}`" for b in covers.covered) or "none of these batches"
    lines = [f"An answer given earlier ({answer.answered_by}: {said}) covers {covered}, as shown."]
    if covers.not_covered:
        changed = ", ".join(f"`{b}`" for b in covers.not_covered)
        lines.append(
            f"It does not cover {changed}: changed after it was given (in flight then, sent "
            "again since, or something new was learned of them)."
        )
    lines.append(
        "Your answer here decides for every batch below; with no answer, the earlier one is "
        "carried out for the batches it covers"
        + (" and the others keep waiting." if covers.not_covered else ".")
    )
    return " ".join(lines)


def recovery_question(
    month: str, plan: RecoveryPlan, settings: Settings, *, spent: str = "", earlier: str = ""
) -> str:
    """The markdown above the Resume form: what each batch needs, what a resubmission may cost
    (`spent`: the month's spend so far, in words), and what an answer given earlier covers of
    them (`earlier`)."""
    polls, resends = plan.of(RecoveryAction.POLL), plan.of(RecoveryAction.RESUBMIT)
    lines = [
        f"## {month}: batches an earlier run sent but never saw answered",
        "",
        "Everything that was safe is done: saved outputs were finished locally and new posts "
        "were sent. These batches need your yes:",
        "",
        f"- **poll** — {len(polls)} batches ({sum(len(s.post_ids) for s in polls)} posts) "
        "whose upstream task was made and paid for: poll those tasks for their output. Never a "
        "new charge. Default: yes.",
        f"- **resubmit** — {len(resends)} batches ({sum(len(s.post_ids) for s in resends)} "
        "posts) with no task id saved: the upstream may or may not have made them. Send them "
        "again with their same idempotency key. Default: no.",
        "",
    ]
    if plan.idempotent:
        lines.append(
            "The upstream is configured as honouring idempotency keys, so a resubmission is "
            "answered with the task it may already have made: no double charge expected "
            f"(about {plan.resubmit_tokens} input tokens if it was never made)."
        )
    else:
        lines.append(
            f"**Resubmitting may be charged twice: about {money(plan.double_charge_cost)}** "
            f"({plan.double_charge_tokens} input tokens, plus their output): the upstream does "
            "not honour idempotency keys, so a batch it made already would be made and charged "
            "again."
        )
    lines += ["", "| batch | action | posts | why |", "| --- | --- | --- | --- |"]
    lines += [
        f"| `{s.batch_id}` | {s.action} | {len(s.post_ids)} | {s.why} |" for s in polls + resends
    ]
    lines += ["", earlier] if earlier else []
    lines += ["", spent] if spent else []
    lines += [
        "",
        f"{no_answer(settings).capitalize()} leaves them waiting, charged nothing.",
    ]
    return "\n".join(lines)
