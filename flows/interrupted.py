"""Batches an earlier run sent and never saw end: their orphans adopted, the plan for the rest,
the yes given before, and (once, after everything safe is done) the question (R21–R24, R47)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from prefect import get_run_logger

from flows.artifacts import MonthArtifacts
from flows.month_steps import MonthRun, run_batches
from flows.recover import Recovered, answer_given_before, ask_about_interrupted, carry_out
from postledger.ledger import ApprovalRecord
from postledger.preflight import Adoption, RecoveryPlan, recovery_plan
from postledger.trip import can_list
from tasks.upstream_calls import adopt_orphaned_tasks


@dataclass(frozen=True)
class Interrupted:
    """What the run knows of the month's interrupted batches before it sends anything."""

    plan: RecoveryPlan
    answer: ApprovalRecord | None  # a yes given before the run (flags, `postledger approve`)
    unsearched: list[str]  # batches whose orphaned job could not be looked for
    recovered: Recovered  # what that yes let the run poll or send again

    @property
    def needs_asking(self) -> bool:
        return self.answer is None and self.plan.needs_yes


def take_stock_of_interrupted(
    run: MonthRun, *, poll: bool | None, resubmit: bool | None
) -> Interrupted:
    """Orphans adopted first (looking is free), then the plan, and what a yes given before
    covers carried out."""
    unsearched = adopt_orphans(run)
    with run.ledger.plain() as reader:
        plan = recovery_plan(reader, run.month, run.settings)
    answer = answer_given_before(
        run.ledger, run.month, plan, run.settings, poll=poll, resubmit=resubmit
    )
    recovered = Recovered()
    if answer is not None:
        recovered = carry_out(
            run.ledger, plan, answer, run.settings, unsearched=unsearched, holder=run.holder
        )
    return Interrupted(plan, answer, unsearched, recovered)


def ask_then_send_interrupted(
    run: MonthRun, interrupted: Interrupted, artifacts: MonthArtifacts
) -> str | None:
    """Asked once, after everything safe is done (R22–R24, R47); what the answer lets go is
    sent. Why the run had to stop, if it did."""
    answer = ask_about_interrupted(
        run.ledger,
        run.month,
        interrupted.plan,
        run.settings,
        on_asked=lambda: artifacts.update(force=True),
    )
    if answer is None:
        return None
    recovered = carry_out(
        run.ledger,
        interrupted.plan,
        answer,
        run.settings,
        unsearched=interrupted.unsearched,
        holder=run.holder,
    )
    return run_batches(run, recovered, artifacts)


def adopt_orphans(run: MonthRun) -> list[str]:
    """Upstream tasks that interrupted batches made are found in the upstream's listing and
    adopted, before anyone is asked to resubmit: looking is free (R49). Returns the batches
    whose look gave no answer: they may have been made, so nothing sends them again in this
    run."""
    if not can_list(run.settings):
        return []
    logger = get_run_logger()
    # Prefect types an async task's result as its coroutine; a submitted one is resolved.
    adopting = adopt_orphaned_tasks.submit(run.month, run.settings, run.ledger_url, run.holder)
    adoption = cast("Adoption", adopting.result())
    if adoption.adopted:
        logger.warning("adopted the upstream tasks of interrupted batches: %s", adoption.adopted)
    if adoption.unsearched:
        logger.warning(
            "no answer yet on whether the upstream made the jobs of interrupted batches %s "
            "(%s): they may have been made (and paid for), so they wait for a later look",
            adoption.unsearched,
            "; ".join(dict.fromkeys(adoption.why_unsearched)),
        )
    return adoption.unsearched
