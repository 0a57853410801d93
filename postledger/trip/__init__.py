"""A batch's trip, and a submission's: mark, create, keep the id, follow until the upstream's
verdict, save the output, decide (docs/architecture.md). Plain code over an upstream port
(`port.py`): the Prefect shell runs each of the port's calls as a task run with Prefect's
request retries; the money model runs the same trips straight over a model upstream."""

from postledger.trip.batch import run_batch
from postledger.trip.keeping import Trip
from postledger.trip.outcome import (
    BatchOutcome,
    HeldByBreaker,
    LedgerFailed,
    OverBudget,
    Settled,
    StopsRun,
    SubmissionEnded,
)
from postledger.trip.port import REAL_CLOCK, Clock, UpstreamFacts, UpstreamPort
from postledger.trip.submission import new_submission_id, run_submission

__all__ = [
    "REAL_CLOCK",
    "BatchOutcome",
    "Clock",
    "HeldByBreaker",
    "LedgerFailed",
    "OverBudget",
    "Settled",
    "StopsRun",
    "SubmissionEnded",
    "Trip",
    "UpstreamFacts",
    "UpstreamPort",
    "new_submission_id",
    "run_batch",
    "run_submission",
]
