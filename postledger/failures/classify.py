"""Classifying a failed upstream call (R10–R14): what kind, and whether it may have been paid."""

from __future__ import annotations

import re

from postledger.failures.policy import Failure, Reach
from postledger.record.models import FailureKind
from postledger.upstreams.errors import (
    AmbiguousCreate,
    EndpointNotFound,
    RejectedError,
    TaskFailed,
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
# The answers whose message may say that the balance or quota is spent, whatever their type or
# code (a gateway wraps the provider's quota error: LiteLLM answers a 429 `throttling_error`
# with OpenAI's "You exceeded your current quota" message).
_QUOTA_BY_MESSAGE_STATUS = frozenset({400, 403, 429})
_QUOTA_MESSAGE = re.compile(
    r"exceeded your current quota"
    r"|insufficient[ _]quota"
    r"|billing[ _]hard[ _]limit"
    r"|credit balance (?:is )?too low"
    r"|quota[ _]exceeded",
    re.IGNORECASE,
)
# "Quota exceeded for ... requests per minute" (Google) is a rate window: waiting helps.
_RATE_WINDOW = re.compile(r"per (?:second|minute|hour)", re.IGNORECASE)


def says_quota(error: RejectedError) -> bool:
    """Whether the refusal says the balance or quota is spent: by its type, its code, or (a
    400, 403 or 429) its message."""
    body = error.body
    if {error.error_type, body.type, body.code} & _QUOTA_TYPES:
        return True
    if error.http_status not in _QUOTA_BY_MESSAGE_STATUS:
        return False
    return bool(_QUOTA_MESSAGE.search(body.message)) and not _RATE_WINDOW.search(body.message)


def classify(error: UpstreamError) -> FailureKind:
    if isinstance(error, TransportError | AmbiguousCreate):
        return FailureKind.TRANSPORT
    if isinstance(error, TaskUnknownError):
        return FailureKind.TASK_UNKNOWN
    if isinstance(error, EndpointNotFound):
        return FailureKind.REJECTED
    if isinstance(error, RejectedError):
        if says_quota(error):
            return FailureKind.QUOTA
        return _BY_STATUS.get(error.http_status or 0, FailureKind.REJECTED)
    return FailureKind.UPSTREAM_FAILED


def failure_of(error: UpstreamError) -> Failure:
    kind = classify(error)
    if isinstance(error, TransportError):
        reach = Reach.MAYBE if error.maybe_sent else Reach.NEVER
        return Failure(kind, f"request retries exhausted: {error}", reach)
    if isinstance(error, EndpointNotFound):
        return Failure(kind, str(error), Reach.NEVER, misconfigured=True)
    if isinstance(error, RejectedError) and not isinstance(error, TaskUnknownError):
        return Failure(kind, str(error), Reach.NEVER, retry_after=error.retry_after)
    if isinstance(error, TaskFailed) and not error.billed:
        return Failure(kind, str(error), Reach.MAYBE, unbilled=True)
    return Failure(kind, str(error), Reach.MAYBE)
