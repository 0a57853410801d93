"""Each Batch API's `request_counts`, as a running job reports them, in the ledger's one shape
(`JobCounts`), so that what is shown reads the same whatever the provider.

- OpenAI: `total`, `completed` (answered), `failed`; they rise while the batch runs.
- Anthropic: `processing`, `succeeded`, `errored`, `canceled`, `expired`; every request stays
  `processing` until the whole Message Batch has ended (Anthropic's API reference: the others
  are "zero until processing of the entire Message Batch has ended").
"""

from __future__ import annotations

from collections.abc import Mapping

from postledger.record.job_counts import JobCounts
from postledger.settings import UpstreamKind

_ANTHROPIC_FAILED = ("errored", "canceled", "expired")


def openai_counts(raw: Mapping[str, int]) -> JobCounts | None:
    total = raw.get("total")
    if total is None:
        return None
    failed = raw.get("failed", 0)
    done = raw.get("completed", 0) + failed
    return JobCounts(total=total, done=done, failed=failed, processing=max(total - done, 0))


def anthropic_counts(raw: Mapping[str, int]) -> JobCounts | None:
    if "processing" not in raw and "succeeded" not in raw:
        return None
    failed = sum(raw.get(name, 0) for name in _ANTHROPIC_FAILED)
    done = raw.get("succeeded", 0) + failed
    processing = raw.get("processing", 0)
    return JobCounts(
        total=done + processing,
        done=done,
        failed=failed,
        processing=processing,
        counted_as_they_end=False,
    )


_OF_KIND = {
    UpstreamKind.OPENAI_BATCH: openai_counts,
    UpstreamKind.ANTHROPIC_BATCH: anthropic_counts,
}


def job_counts(kind: UpstreamKind, raw: Mapping[str, int] | None) -> JobCounts | None:
    """The counts a running job of `kind` reported, normalized; None when it reported none
    (or the kind has no jobs)."""
    normalize = _OF_KIND.get(kind)
    if raw is None or normalize is None:
        return None
    return normalize({k: v for k, v in raw.items() if isinstance(v, int) and v >= 0})
