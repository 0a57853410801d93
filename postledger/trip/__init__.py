"""A batch's trip, and a submission's: mark, create, keep the id, follow until the upstream's
verdict, save the output, decide (docs/architecture.md). Plain code over an upstream port
(`port.py`): the Prefect shell runs each of the port's calls (`one_call.py`) as a task run
with Prefect's request retries; the money model runs the same trips straight over a model
upstream. `window`: how many batches may be in flight at once, given the breaker. The
upstream's client (`upstream_for`), what it can do (`facts_of`) and what its calls return are
the port's, so they are named here too."""

from postledger.guards.breaker import window
from postledger.trip.batch import run_batch
from postledger.trip.keeping import Trip
from postledger.trip.one_call import (
    count_request_retry,
    create_task,
    no_verdict_of,
    submit_job,
    wait_for_job,
    wait_for_task,
)
from postledger.trip.outcome import (
    BatchOutcome,
    Crashed,
    Ended,
    HeldByBreaker,
    LedgerFailed,
    OverBudget,
    Settled,
    StopsRun,
    SubmissionEnded,
)
from postledger.trip.port import REAL_CLOCK, Clock, UpstreamFacts, UpstreamPort
from postledger.trip.submission import new_submission_id, run_submission
from postledger.upstreams import (
    Created,
    CreateRequest,
    Found,
    JobLook,
    JobRequest,
    JobWanted,
    Look,
    NoVerdict,
    TransportError,
    can_list,
    carries_many,
    facts_of,
    upstream_for,
)
from postledger.upstreams.errors import UpstreamError

__all__ = [
    "REAL_CLOCK",
    "CreateRequest",
    "Created",
    "Found",
    "JobLook",
    "JobRequest",
    "JobWanted",
    "Look",
    "NoVerdict",
    "TransportError",
    "UpstreamError",
    "can_list",
    "carries_many",
    "facts_of",
    "upstream_for",
    "BatchOutcome",
    "Clock",
    "Crashed",
    "Ended",
    "HeldByBreaker",
    "LedgerFailed",
    "OverBudget",
    "Settled",
    "StopsRun",
    "SubmissionEnded",
    "Trip",
    "UpstreamFacts",
    "UpstreamPort",
    "count_request_retry",
    "create_task",
    "new_submission_id",
    "no_verdict_of",
    "run_batch",
    "run_submission",
    "submit_job",
    "wait_for_job",
    "wait_for_task",
    "window",
]
