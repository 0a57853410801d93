"""Classifying a failed upstream call (R10–R14): what kind, and whether it may have been paid."""

from __future__ import annotations

from postledger.models import FailureKind
from postledger.policy import Failure, Reach
from postledger.upstream import (
    AmbiguousCreate,
    RejectedError,
    TaskStillRunning,
    TaskUnknownError,
    TransportError,
    UpstreamError,
)

_BY_STATUS = {
    401: FailureKind.AUTH,
    402: FailureKind.QUOTA,
    403: FailureKind.PERMISSION,
    429: FailureKind.RATE_LIMITED,
}
# A 429 is a quota problem, not a rate limit, when its body says so: waiting will not help.
_QUOTA_TYPES = frozenset({"insufficient_quota", "billing_hard_limit_reached", "quota_exceeded"})


def classify(error: UpstreamError) -> FailureKind:
    if isinstance(error, TransportError | AmbiguousCreate | TaskStillRunning):
        return FailureKind.TRANSPORT
    if isinstance(error, TaskUnknownError):
        return FailureKind.TASK_UNKNOWN
    if isinstance(error, RejectedError):
        if error.error_type in _QUOTA_TYPES:
            return FailureKind.QUOTA
        return _BY_STATUS.get(error.http_status or 0, FailureKind.REJECTED)
    return FailureKind.UPSTREAM_FAILED


def failure_of(error: UpstreamError) -> Failure:
    kind = classify(error)
    if isinstance(error, TransportError):
        reach = Reach.MAYBE if error.maybe_sent else Reach.NEVER
        return Failure(kind, f"request retries exhausted: {error}", reach)
    if isinstance(error, RejectedError) and not isinstance(error, TaskUnknownError):
        return Failure(kind, str(error), Reach.NEVER, retry_after=error.retry_after)
    return Failure(kind, str(error), Reach.MAYBE)
