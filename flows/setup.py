"""What `postledger setup` prepares on the Prefect side. Every step is idempotent: running it
again changes nothing that exists (a person may have tuned a limit or a pool on purpose)."""

from __future__ import annotations

from prefect import get_client
from prefect.client.schemas.actions import WorkPoolCreate
from prefect.exceptions import ObjectAlreadyExists

from blocks import register_block_types
from flows.calling import PAUSED_EVENT, ensure_pause_notification
from flows.limits import ensure_tag_limit

DEFAULT_WORK_POOL = "postledger"  # the pool prefect.yaml deploys to


def ensure_work_pool(name: str = DEFAULT_WORK_POOL) -> bool:
    """Create a `process` work pool; True if it was made now, False if it was there."""
    from prefect.workers.process import ProcessWorker

    pool = WorkPoolCreate(
        name=name,
        type="process",
        base_job_template=ProcessWorker.get_default_base_job_template(),
        description="Runs postledger's monthly flow in a local process.",
    )
    with get_client(sync_client=True) as client:
        try:
            client.create_work_pool(pool)
        except ObjectAlreadyExists:
            return False
    return True


def prepare_prefect(tag_limit: int, work_pool: str, notify: str | None = None) -> list[str]:
    """Register the block types, the `ai-batch` tag limit, the work pool and, with `notify`
    (a notification block's name), the automation that calls a person when a run pauses; say
    what was done."""
    register_block_types()
    done = ["block types postledger-upstream, postledger-ledger registered"]
    limit = ensure_tag_limit(tag_limit)
    note = "" if limit == tag_limit else f" (left as it was; asked for {tag_limit})"
    done.append(f"tag limit tag:ai-batch = {limit}{note}")
    made = ensure_work_pool(work_pool)
    done.append(f"work pool {work_pool} (process) {'created' if made else 'already there'}")
    if notify:
        done.append(ensure_pause_notification(notify))
    else:
        done.append(
            f"no notification block named (--notify): a paused run posts the event "
            f"{PAUSED_EVENT} only, which any automation can subscribe to"
        )
    return done
