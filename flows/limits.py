"""The global ceiling on batches in flight: Prefect's task tag concurrency limit."""

from __future__ import annotations

from prefect import get_client
from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
from prefect.exceptions import ObjectNotFound

from tasks.batch import BATCH_TAG


def tag_limit_name(tag: str = BATCH_TAG) -> str:
    return f"tag:{tag}"


def ensure_tag_limit(limit: int) -> int:
    """Create the `ai-batch` tag limit if it is missing; an existing one is left as it is (a
    person may have changed it on purpose). Returns the limit in force."""
    with get_client(sync_client=True) as client:
        try:
            existing = client.read_global_concurrency_limit_by_name(tag_limit_name())
            return existing.limit
        except ObjectNotFound:
            client.create_global_concurrency_limit(
                GlobalConcurrencyLimitCreate(name=tag_limit_name(), limit=limit)
            )
            return limit
