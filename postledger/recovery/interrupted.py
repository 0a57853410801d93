"""Finishing what an earlier run left, from what it saved.

R20: facts spilled while the ledger could not be written are imported first.
R21: a batch whose output is saved (`received`) is validated and finished locally.
R22-R26: a batch sent but never answered is planned (`steps.py`: poll its task, or resubmit
it) and only done once a person said yes; one whose task id was never saved is first looked
for upstream (`adopt_orphans`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from postledger.analysis import Analysis
from postledger.batches.output import check_output
from postledger.defaults import PriceBook
from postledger.failures.policy import Decision, after_output
from postledger.guards.spill import KeptAside, Spill
from postledger.ledger import Ledger
from postledger.record.models import BatchStatus, SubmissionRecord
from postledger.record.reads import waits_for_job
from postledger.settings import Limits, Settings
from postledger.upstreams.calls import Found, JobWanted, NoVerdict, NoVerdictReason
from postledger.upstreams.clock import REAL_CLOCK, Clock


def finish_from_output(
    ledger: Ledger,
    batch_id: str,
    analysis: Analysis,
    limits: Limits,
    upstream: str | None,
    *,
    holder: str | None = None,
) -> Decision:
    """Check a batch's saved output against the analysis asked, and apply what follows (R12,
    R13). With `upstream`, the
    delivery also counts as a success for its breaker. `holder`: the run's claim on the
    month, the write's fence."""
    batch = ledger.batch(batch_id)
    if batch.raw_output is None:
        raise ValueError(f"batch {batch_id} has no saved output to finish from")
    check = check_output(batch.raw_output, batch.post_ids, analysis)
    decision = after_output(batch, ledger.posts_of(batch_id), check, limits)
    ledger.apply(batch_id, decision, check, upstream=upstream, holder=holder)
    return decision


def finish_saved_outputs(
    ledger: Ledger, month: str, analysis: Analysis, limits: Limits
) -> list[str]:
    """R21: every `received` batch of the month, finished from its saved output. These
    deliveries are old news, so they do not move any breaker. Returns the batch ids."""
    finished = []
    for batch in ledger.batches(month, BatchStatus.RECEIVED):
        finish_from_output(ledger, batch.batch_id, analysis, limits, upstream=None)
        finished.append(batch.batch_id)
    return finished


def import_spill(
    ledger: Ledger, spill: Spill, prices: PriceBook | None = None
) -> tuple[int, KeptAside | None]:
    """R20, R46: take in the month's spill file, then move it aside, under the file's lock (a
    batch of another run may be appending to it). Returns the records taken in, and what was
    kept aside instead of imported: damaged lines, which the caller must report loudly."""
    taken = spill.take(lambda records: ledger.import_spill(records, prices))
    return taken or 0, spill.kept_aside


@dataclass(frozen=True)
class SpillImported:
    """What one spill file gave back: records taken in, and damaged lines kept aside."""

    path: str
    taken: int
    kept_aside: KeptAside | None


def import_spills(ledger: Ledger, month: str, settings: Settings) -> list[SpillImported]:
    """R20, R46: what an earlier run paid for but could not write comes first: the month's own
    spill file, then the one file of earlier versions, which holds every month's."""
    imported = []
    for spill in (Spill(settings.spill_file(month)), Spill(settings.resolved_spill_path())):
        taken, kept_aside = import_spill(ledger, spill, settings.price_book())
        imported.append(SpillImported(str(spill.path), taken, kept_aside))
    return imported


class FindsTasks(Protocol):
    """The upstream's listing, searched with the request layer's retries spent (a trip's
    port): a search that could not be made or read is no verdict, never an error."""

    async def find_task(self, batch_id: str, idempotency_key: str) -> Found | NoVerdict: ...

    async def find_job(self, wanted: JobWanted) -> Found | NoVerdict: ...


@dataclass(frozen=True)
class Adoption:
    """What a look for orphans found: the batches adopted, and those whose look gave no
    answer (the listing could not be read): nothing may be sent again for them on the
    strength of it, so they wait for a look that answers."""

    adopted: list[str] = field(default_factory=list)
    unsearched: list[str] = field(default_factory=list)
    why_unsearched: list[str] = field(default_factory=list)  # each look's lack of answer


async def adopt_orphans(
    ledger: Ledger,
    month: str,
    upstream: FindsTasks,
    *,
    holder: str | None = None,
    clock: Clock = REAL_CLOCK,
) -> Adoption:
    """Before anyone is asked to resubmit a batch whose task id was never saved (R24, R49): look
    for the upstream task made under its key (listing never pays). One found is adopted — its
    id saved, an event logged — so recovery polls it (R23) instead of paying again. A
    submission's job (many batches) is looked for once, by the submission's metadata, and
    adopted by every batch it carried. A look that gives no answer adopts nothing and leaves
    its batches waiting (`Adoption.unsearched`). `holder`: the run's claim on the month, the
    fence of what it writes."""
    adoption = Adoption()
    for submission in ledger.orphaned_submissions(month):
        found = await _search(upstream, wanted_of(submission), clock)
        if isinstance(found, NoVerdict):
            adoption.unsearched.extend(_orphans_of(ledger, submission))
            adoption.why_unsearched.append(found.detail)
        elif found.task_id is not None:
            adoption.adopted.extend(
                ledger.record_job_id(
                    submission.submission_id,
                    found.task_id,
                    holder=holder,
                    adopted=f"adopted upstream job {found.task_id}: made for submission "
                    f"{submission.submission_id} by an interrupted run that never saved its id "
                    f"(found {found.by}); it is polled, not paid again",
                )
            )
    for batch in ledger.batches(month, BatchStatus.RUNNING):
        if batch.upstream_task_id or batch.raw_output is not None or not batch.sends:
            continue
        if batch.submission_id is not None:  # its submission was looked for above
            continue
        single = await upstream.find_task(batch.batch_id, batch.idempotency_key)
        if isinstance(single, NoVerdict):
            adoption.unsearched.append(batch.batch_id)
            adoption.why_unsearched.append(single.detail)
        elif single.task_id is not None:
            ledger.record_task_id(
                batch.batch_id,
                single.task_id,
                holder=holder,
                adopted=f"adopted upstream task {single.task_id}: made for this batch and key by "
                "an interrupted run that never saved its id (found by its metadata); it is "
                "polled, not paid again",
            )
            adoption.adopted.append(batch.batch_id)
    return adoption


# How long recovery searches again for a job that may be the one but still runs (a Message
# Batch is told by its results): one made just before the crash may end within moments; one
# that runs on is left waiting, uncertain, for a later run's look.
UNCONFIRMED_WAIT = 60.0


async def _search(upstream: FindsTasks, wanted: JobWanted, clock: Clock) -> Found | NoVerdict:
    """The submission's job in the upstream's listing; a candidate still running is looked
    at again, from half a second apart and doubling, for `UNCONFIRMED_WAIT` seconds."""
    give_up, wait = clock.monotonic() + UNCONFIRMED_WAIT, 0.5
    while True:
        found = await upstream.find_job(wanted)
        unconfirmed = isinstance(found, NoVerdict) and found.reason is NoVerdictReason.UNCONFIRMED
        if not unconfirmed or clock.monotonic() + wait > give_up:
            return found
        await clock.sleep(wait)
        wait *= 2


def wanted_of(submission: SubmissionRecord) -> JobWanted:
    """What a search of the upstream's listing looks for: the submission's job, made after
    it was written down, carrying its batches under its key."""
    return JobWanted(
        submission_id=submission.submission_id,
        idempotency_key=submission.idempotency_key,
        batch_ids=tuple(submission.batch_ids),
        written_at=submission.created_at,
    )


def _orphans_of(ledger: Ledger, submission: SubmissionRecord) -> list[str]:
    """The submission's batches still running without its job's id."""
    return [
        batch_id
        for batch_id in submission.batch_ids
        if waits_for_job(ledger.batch(batch_id), submission)
    ]
