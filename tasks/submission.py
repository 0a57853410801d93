"""A submission's whole life as one `process-submission` task run, tagged `ai-batch`: on a Batch
API one upstream job carries many ledger batches (one request line each), and the tag's slot
covers that job's whole life, from the first batch marked running to the last line settled
(docs/rules.md, "a slot on a Batch API"). The trip itself is the core's
(`postledger.trip.run_submission`); the task run's final state counts its batches' ends."""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import State

from postledger.settings import Settings
from postledger.trip import run_submission
from tasks.batch import BATCH_TAG, trip_in_this_run
from tasks.outcome import submission_state


@task(
    name="process-submission",
    task_run_name="{submission_id}",
    tags=[BATCH_TAG],
    cache_policy=NO_CACHE,
    persist_result=False,
)
async def process_submission(
    submission_id: str,
    batch_ids: list[str],
    settings: Settings,
    ledger_url: str,
    holder: str | None = None,
    job_id: str | None = None,
    resend: bool = False,
) -> State[Any]:
    """Send the batches, in order, as one upstream job and settle each from its line. With
    `job_id`, they were sent by an earlier, interrupted run in that job, whose id is saved:
    follow it, send nothing (R23). With `resend`, they were sent by an interrupted run in
    this submission and a person said send them again: its job is looked for first, and only
    if none was made are they sent, under the same key (R24). `holder`: the run's claim on the
    month (R34)."""
    trip = trip_in_this_run(settings, ledger_url, holder)
    ended = await run_submission(trip, submission_id, batch_ids, job_id=job_id, resend=resend)
    return submission_state(ended)
