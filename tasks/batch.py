"""One batch's whole life as one `process-batch` task run, tagged `ai-batch`: the tag's slot
covers create, wait, check and save (R8), and the task run's final state says what happened to
the batch (`tasks/outcome.py`). The trip itself is the core's (`postledger.trip.run_batch`);
its upstream calls are nested one-call task runs with Prefect's request retries (R10, R16).
This task has no Prefect retries: business retries are the ledger's."""

from __future__ import annotations

from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import State

from postledger.ledger import open_ledger
from postledger.settings import Settings
from postledger.trip import Trip, run_batch
from tasks.outcome import final_state
from tasks.port import PrefectPort

BATCH_TAG = "ai-batch"


def trip_in_this_run(settings: Settings, ledger_url: str, holder: str | None) -> Trip:
    """What a trip needs in the flow run it runs in: the run's settings, its ledger, its log."""
    return Trip(
        open_ledger(ledger_url, busy_timeout=settings.sqlite_busy_timeout),
        settings,
        PrefectPort(settings, ledger_url, holder),
        get_run_logger(),
        holder=holder,
    )


@task(
    name="process-batch",
    task_run_name="{batch_id}",
    tags=[BATCH_TAG],
    cache_policy=NO_CACHE,
    persist_result=False,
)
async def process_batch(
    batch_id: str,
    settings: Settings,
    ledger_url: str,
    resume: bool = False,
    holder: str | None = None,
) -> State[Any]:
    """Send the batch and see it through. With `resume`, the batch was sent by an earlier,
    interrupted run and its upstream task id is saved: follow that task, send nothing (R23).
    `holder`: the run's claim on the month, the fence of every write of the trip (R34)."""
    trip = trip_in_this_run(settings, ledger_url, holder)
    return final_state(await run_batch(trip, batch_id, resume=resume))
