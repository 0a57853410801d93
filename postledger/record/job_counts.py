"""The last counts an upstream job reported while it ran (a Batch API's `request_counts`), in
one shape for every provider, as the ledger keeps them on the job's submission.

They are the upstream's own tally, kept only to be shown (`postledger status`, the progress
artifact, the live bar): not one of those requests' results is saved until the job ends and its
lines are read, so they decide nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass(frozen=True)
class JobCounts:
    """A job's requests as its upstream counted them. `done`: ended, answered or not;
    `failed`: of those, the ones that ended without an answer; `processing`: not ended yet.
    `counted_as_they_end`: False where the upstream counts a request only once the whole job
    has ended (Anthropic), so that `done` stays 0 until then."""

    total: int
    done: int
    failed: int
    processing: int
    counted_as_they_end: bool = True

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of_json(cls, kept: Mapping[str, Any] | None) -> JobCounts | None:
        """The counts as the ledger kept them; None for nothing kept, or a shape this version
        does not know (they are only shown: never worth failing a look over)."""
        if not isinstance(kept, Mapping):
            return None
        try:
            values = {f.name: kept[f.name] for f in fields(cls) if f.name in kept}
            counts = cls(**values)
        except TypeError:
            return None
        numbers = (counts.total, counts.done, counts.failed, counts.processing)
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in numbers):
            return None
        return counts
