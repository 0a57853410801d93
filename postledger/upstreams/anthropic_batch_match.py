"""Which listed Message Batch is a submission's, when its id was never saved.

A Message Batch carries no metadata and its create takes no idempotency key, so a batch made
by a run that died before saving its id is recognised by what it was made of. Each request's
`custom_id` is the ledger batch id, then `_`, then a token of the submission's key
(`2026-10-b0001_3f9c0a17d2b84e65`: 64 bits of a digest of a random 128-bit key). A listed
Message Batch is the submission's when all of these hold:

1. it was created within the window of the submission's intent: not before the submission
   was written down (less `CLOCK_SLACK`, as the provider's clock is not ours) and not after
   the search;
2. it holds as many requests as the submission has batches (its `request_counts`, summed);
3. it has ended, and its results' `custom_id`s are exactly the submission's batch ids, each
   with the key's token: no more, no fewer.

The window and the count keep the search short (only a batch that passes both has its results
read); the third check is what makes a false match impossible: nothing but a create of this
submission carries its key's token (another submission, another ledger on the same account, a
person's own batch all carry other ids), and the same submission's batches are the same
requests. A candidate still running cannot be checked yet: the search gives no verdict, and
the batches wait for a later look (they are never sent again meanwhile).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from postledger.upstreams.calls import JobWanted

CLOCK_SLACK = timedelta(minutes=10)
_TOKEN_CHARS = 16
_SEPARATOR = "_"  # a ledger batch id holds none (`2026-10-b0001`)


def line_id(batch_id: str, idempotency_key: str) -> str:
    """The `custom_id` of a ledger batch's request in its submission's Message Batch."""
    token = hashlib.sha256(idempotency_key.encode()).hexdigest()[:_TOKEN_CHARS]
    return f"{batch_id}{_SEPARATOR}{token}"


def batch_of_line(custom_id: str) -> str:
    """The ledger batch a result line answers for (a line made before the token: its id)."""
    return custom_id.split(_SEPARATOR, 1)[0]


class Listed(StrEnum):
    """What one listed Message Batch is to the search."""

    OLDER = "older"  # made before the window: so is every batch listed after it
    OUTSIDE = "outside"  # not this submission's: another time or another size
    CANDIDATE = "candidate"  # in the window, of the size: its results decide
    # No creation time or counts Anthropic would give: the listing is not the answer, so it
    # proves nothing missing (no verdict, never "not found").
    UNREADABLE = "unreadable"


@dataclass(frozen=True)
class Window:
    """When the submission's Message Batch, if it was made, was created."""

    earliest: datetime
    latest: datetime

    @classmethod
    def of(cls, wanted: JobWanted, searched_at: datetime) -> Window:
        return cls(wanted.written_at - CLOCK_SLACK, searched_at + CLOCK_SLACK)


def listed_as(batch: dict[str, Any], wanted: JobWanted, window: Window) -> Listed:
    """Where a listed Message Batch stands, from its listing alone. One whose creation time
    or counts cannot be read is neither adopted nor ruled out on a guess."""
    created, total = created_at(batch), request_total(batch)
    if created is None or total is None:
        return Listed.UNREADABLE
    if created < window.earliest:
        return Listed.OLDER
    if created > window.latest or total != len(wanted.batch_ids):
        return Listed.OUTSIDE
    return Listed.CANDIDATE


def results_are_its(custom_ids: Iterable[str], wanted: JobWanted) -> bool:
    """Whether an ended Message Batch's results are exactly the submission's requests."""
    ids = list(custom_ids)
    expected = {line_id(batch_id, wanted.idempotency_key) for batch_id in wanted.batch_ids}
    return len(ids) == len(expected) and set(ids) == expected


def created_at(batch: dict[str, Any]) -> datetime | None:
    """A listed batch's `created_at` (RFC 3339), timezone-aware; None if it has none."""
    value = batch.get("created_at")
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def request_total(batch: dict[str, Any]) -> int | None:
    """How many requests a listed batch holds: its `request_counts` summed."""
    counts = batch.get("request_counts")
    if not isinstance(counts, dict):
        return None
    values = [v for v in counts.values() if isinstance(v, int) and not isinstance(v, bool)]
    return sum(values) if values else None
