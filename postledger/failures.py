"""Classifying a failed upstream call into a failure kind (R10–R14)."""

from __future__ import annotations

from postledger.models import FailureKind
from postledger.upstream import (
    RejectedError,
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
_QUOTA_TYPES = frozenset({"insufficient_quota", "billing_hard_limit_reached"})


def classify(error: UpstreamError) -> FailureKind:
    if isinstance(error, TransportError):
        return FailureKind.TRANSPORT
    if isinstance(error, TaskUnknownError):
        return FailureKind.TASK_UNKNOWN
    if isinstance(error, RejectedError):
        if error.error_type in _QUOTA_TYPES:
            return FailureKind.QUOTA
        return _BY_STATUS.get(error.http_status or 0, FailureKind.UPSTREAM_FAILED)
    return FailureKind.UPSTREAM_FAILED
