"""A submission in the ledger, in the month's write transaction: one upstream job on a Batch
API that carries many ledger batches. It is written before the upstream is called, naming its
batches, its key and the metadata sent (a crash leaves a record to look the job up by); its
job id is kept on it and, as their upstream task id, on each of its batches the moment it is
known, so recovery polls the job instead of paying again (R23)."""

from __future__ import annotations

from sqlmodel import Session

from postledger.batches.sending import take_task_id
from postledger.record.models import BatchStatus, EntityKind, SubmissionRecord
from postledger.record.reads import LedgerError, load_batch, waits_for_job
from postledger.record.states import Transitions


def record(session: Session, moves: Transitions, submission: SubmissionRecord) -> None:
    """The submission written, and each of its batches (marked running) named as sent by it."""
    if session.get(SubmissionRecord, submission.submission_id) is not None:
        raise LedgerError(f"submission {submission.submission_id} is recorded already")
    session.add(submission)
    for batch_id in submission.batch_ids:
        batch = load_batch(session, batch_id)
        if batch.status is not BatchStatus.RUNNING:
            raise LedgerError(f"batch {batch_id} is {batch.status.value}, not running")
        batch.submission_id = submission.submission_id
        session.add(batch)
        moves.noted(EntityKind.BATCH, batch_id, batch.status, f"sent in {submission.submission_id}")


def take_job_id(
    session: Session,
    moves: Transitions,
    submission: SubmissionRecord,
    job_id: str,
    file_id: str | None,
    adopted: str | None,
) -> list[str]:
    """The job id kept on the submission and on each of its batches still running without a
    task id; returns those batches. `adopted`: found upstream later, never saved by the run
    that made it."""
    if adopted is not None and submission.upstream_job_id is not None:
        raise LedgerError(f"submission {submission.submission_id} has its job id already")
    submission.upstream_job_id = job_id
    submission.file_id = file_id or submission.file_id
    session.add(submission)
    taken = []
    for batch_id in submission.batch_ids:
        batch = load_batch(session, batch_id)
        if waits_for_job(batch, submission):
            take_task_id(session, moves, batch, job_id, adopted)
            taken.append(batch_id)
    return taken
