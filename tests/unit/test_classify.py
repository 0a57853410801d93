"""Failure classification: every upstream error, status and code to a failure kind, and whether
the failed call may have been paid (`postledger/failures/classify.py`), plus the wait a
rate-limited answer asks for (`postledger/upstreams/http.py`, pure header parsing).

Rules proved: R10 (a transport fault is a transport failure; only a connection never made is
certainly unsent), R11 (a rate limit, and the usable wait it gives), R14 (credentials, balance,
permission and a wrong URL each get their own kind; a wrong URL is a misconfiguration),
R23/R24 (a call that may have reached the upstream is never classified as certainly unsent),
R26 (a task id the upstream no longer knows is its own kind).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from postledger.failures.classify import classify, failure_of, says_quota
from postledger.failures.policy import Reach
from postledger.record.models import FailureKind
from postledger.upstreams.errors import (
    AmbiguousCreate,
    EndpointNotFound,
    ErrorBody,
    RejectedError,
    TaskUnknownError,
    TransportError,
    UpstreamError,
)
from postledger.upstreams.http import (
    gateway_retries_of,
    parse_reset,
    parse_retry_after,
    retry_after_of,
)

# Examples are cheap; no deadline and no example database: the machine is shared, and
# nothing is written outside the test run.
QUICK = settings(
    max_examples=100, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)

QUOTA_WORDS = ("insufficient_quota", "billing_hard_limit_reached", "quota_exceeded")


def refusal(
    status: int,
    code: str | None = None,
    message: str = "",
    *,
    type_: str | None = None,
    retry_after: float | None = None,
    gateway_retries: int = 0,
) -> RejectedError:
    """A 4xx answer as the HTTP layer raises it: the error type is the code, else the type."""
    return RejectedError(
        f"POST /v1/tasks: HTTP {status}: {message}",
        status=status,
        error_type=code or type_,
        retry_after=retry_after,
        body=ErrorBody(type=type_, code=code, message=message),
        gateway_retries=gateway_retries,
    )


# --- refusals, by status ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, FailureKind.REJECTED),
        (401, FailureKind.AUTH),
        (402, FailureKind.QUOTA),
        (403, FailureKind.PERMISSION),
        (404, FailureKind.REJECTED),
        (405, FailureKind.REJECTED),
        (409, FailureKind.REJECTED),
        (413, FailureKind.REJECTED),
        (422, FailureKind.REJECTED),
        (429, FailureKind.RATE_LIMITED),
    ],
)
def test_a_refusal_is_classified_by_its_status_and_was_never_charged(
    status: int, kind: FailureKind
) -> None:
    failure = failure_of(refusal(status, message="refused"))
    assert failure.kind is kind
    assert failure.reach is Reach.NEVER
    assert not failure.misconfigured


@pytest.mark.parametrize(
    ("status", "kind"),
    [(401, FailureKind.AUTH), (402, FailureKind.QUOTA), (403, FailureKind.PERMISSION)],
)
def test_credential_balance_and_permission_refusals_each_keep_their_own_kind(
    status: int, kind: FailureKind
) -> None:
    assert classify(refusal(status, "some_code", "no")) is kind


def test_a_gateways_own_retries_do_not_change_what_a_refusal_is() -> None:
    assert failure_of(refusal(429, gateway_retries=3)).kind is FailureKind.RATE_LIMITED
    assert failure_of(refusal(401, gateway_retries=2)).kind is FailureKind.AUTH


# --- rate limits and their wait (R11) -----------------------------------------------------------


def test_a_rate_limit_with_a_usable_retry_after_carries_the_wait() -> None:
    failure = failure_of(refusal(429, "rate_limit_exceeded", "slow down", retry_after=12.5))
    assert failure.kind is FailureKind.RATE_LIMITED
    assert failure.retry_after == 12.5
    assert failure.reach is Reach.NEVER


def test_a_rate_limit_without_a_usable_retry_after_carries_no_wait() -> None:
    failure = failure_of(refusal(429, "rate_limit_exceeded", "slow down"))
    assert failure.kind is FailureKind.RATE_LIMITED
    assert failure.retry_after is None


@pytest.mark.parametrize(
    ("code", "type_", "message"),
    [
        ("rate_limit_exceeded", "requests", "Rate limit reached for requests"),
        ("429", "throttling_error", "litellm.RateLimitError: too many requests"),
        (
            None,
            None,
            "Quota exceeded for quota metric 'Generate Content API requests per minute'",
        ),
        (None, None, "quota_exceeded: tokens per second"),
        (None, None, "You exceeded your current quota of requests per hour"),
    ],
)
def test_a_rate_window_is_a_rate_limit_even_when_it_says_quota(
    code: str | None, type_: str | None, message: str
) -> None:
    assert classify(refusal(429, code, message, type_=type_)) is FailureKind.RATE_LIMITED


# --- quota and balance, by type, code or message (R14) -------------------------------------------


@pytest.mark.parametrize("word", QUOTA_WORDS)
@pytest.mark.parametrize("status", [400, 403, 429])
def test_a_refusal_whose_code_says_quota_is_a_quota_failure(word: str, status: int) -> None:
    assert classify(refusal(status, word, "whatever it says")) is FailureKind.QUOTA


@pytest.mark.parametrize("word", QUOTA_WORDS)
def test_a_refusal_whose_type_says_quota_is_a_quota_failure_whatever_its_code(word: str) -> None:
    error = refusal(429, "429", "too many", type_=word)
    assert classify(error) is FailureKind.QUOTA


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (429, "litellm.RateLimitError: You exceeded your current quota, check your plan"),
        (429, "Insufficient quota for this organisation"),
        (429, "insufficient_quota"),
        (400, "Your credit balance is too low to access the API"),
        (400, "credit balance too low"),
        (403, "Billing hard limit has been reached"),
        (403, "billing_hard_limit reached"),
        (429, "QUOTA EXCEEDED"),
    ],
)
def test_a_400_403_or_429_whose_message_says_the_balance_is_spent_is_a_quota_failure(
    status: int, message: str
) -> None:
    error = refusal(status, "429" if status == 429 else None, message, type_="throttling_error")
    assert says_quota(error)
    assert classify(error) is FailureKind.QUOTA
    assert failure_of(error).reach is Reach.NEVER


@pytest.mark.parametrize(
    ("status", "kind"),
    [(401, FailureKind.AUTH), (404, FailureKind.REJECTED), (422, FailureKind.REJECTED)],
)
def test_a_quota_message_is_only_read_on_a_400_403_or_429(status: int, kind: FailureKind) -> None:
    error = refusal(status, None, "You exceeded your current quota")
    assert not says_quota(error)
    assert classify(error) is kind


def test_a_402_is_a_quota_failure_whatever_its_message() -> None:
    assert classify(refusal(402, None, "payment required")) is FailureKind.QUOTA


# --- transport faults (R10, R24) -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "reach"),
    [
        (TransportError("could not connect", maybe_sent=False), Reach.NEVER),
        (TransportError("connecting timed out", maybe_sent=False), Reach.NEVER),
        (TransportError("HTTP 503", maybe_sent=False, status=503), Reach.NEVER),
        (TransportError("no answer (ReadTimeout)", maybe_sent=True), Reach.MAYBE),
        (TransportError("no answer (RemoteProtocolError)", maybe_sent=True), Reach.MAYBE),
        (TransportError("HTTP 500", maybe_sent=True, status=500), Reach.MAYBE),
        (TransportError("HTTP 502", maybe_sent=True, status=502), Reach.MAYBE),
        (TransportError("HTTP 504", maybe_sent=True, status=504, gateway_retries=2), Reach.MAYBE),
    ],
)
def test_a_transport_fault_is_certainly_unsent_only_when_it_never_reached_the_upstream(
    error: TransportError, reach: Reach
) -> None:
    failure = failure_of(error)
    assert failure.kind is FailureKind.TRANSPORT
    assert failure.reach is reach
    assert failure.reason.startswith("request retries exhausted")
    assert not failure.misconfigured


def test_an_ambiguous_create_is_a_transport_failure_that_may_have_been_charged() -> None:
    failure = failure_of(AmbiguousCreate("the create may have been made"))
    assert failure.kind is FailureKind.TRANSPORT
    assert failure.reach is Reach.MAYBE


# --- tasks, URLs and other upstream failures (R14, R26) ------------------------------------------


def test_a_task_id_the_upstream_no_longer_knows_is_task_unknown_and_was_paid() -> None:
    error = TaskUnknownError(
        "GET /v1/tasks/t-1: HTTP 404", status=404, error_type="not_found", retry_after=5.0
    )
    failure = failure_of(error)
    assert failure.kind is FailureKind.TASK_UNKNOWN
    assert failure.reach is Reach.MAYBE  # the task was made, and charged: nothing given back
    assert failure.retry_after is None
    assert not failure.misconfigured


@pytest.mark.parametrize("code", [None, "model_not_found", "insufficient_quota"])
def test_an_endpoint_not_found_is_a_misconfiguration_that_charged_nothing(
    code: str | None,
) -> None:
    error = EndpointNotFound(
        "POST /v1/tasks answered 404 Not Found: check POSTLEDGER_UPSTREAM_URL",
        status=404,
        error_type=code,
        body=ErrorBody(code=code, message="not found"),
    )
    failure = failure_of(error)
    assert failure.kind is FailureKind.REJECTED
    assert failure.misconfigured
    assert failure.reach is Reach.NEVER
    assert "POSTLEDGER_UPSTREAM_URL" in failure.reason


def test_any_other_upstream_failure_is_upstream_failed_and_may_have_been_charged() -> None:
    failure = failure_of(UpstreamError("the upstream task ended failed: model crashed"))
    assert failure.kind is FailureKind.UPSTREAM_FAILED
    assert failure.reach is Reach.MAYBE


# --- properties -----------------------------------------------------------------------------------

words = st.one_of(st.none(), st.sampled_from([*QUOTA_WORDS, "429", "requests", "x"]), st.text())


@QUICK
@given(
    status=st.integers(min_value=400, max_value=499),
    code=words,
    type_=words,
    message=st.text(max_size=80),
    retry_after=st.one_of(st.none(), st.floats(min_value=0, max_value=1e6)),
)
def test_a_refusal_is_never_classified_as_paid_or_as_a_transport_fault(
    status: int, code: str | None, type_: str | None, message: str, retry_after: float | None
) -> None:
    failure = failure_of(refusal(status, code, message, type_=type_, retry_after=retry_after))
    assert failure.reach is Reach.NEVER
    assert failure.retry_after == retry_after
    assert failure.kind in {
        FailureKind.REJECTED,
        FailureKind.AUTH,
        FailureKind.QUOTA,
        FailureKind.PERMISSION,
        FailureKind.RATE_LIMITED,
    }
    if {code, type_} & set(QUOTA_WORDS):
        assert failure.kind is FailureKind.QUOTA


@QUICK
@given(maybe_sent=st.booleans(), status=st.one_of(st.none(), st.sampled_from([500, 502, 503])))
def test_a_transport_fault_may_have_been_charged_exactly_when_it_may_have_been_sent(
    maybe_sent: bool, status: int | None
) -> None:
    failure = failure_of(TransportError("fault", maybe_sent=maybe_sent, status=status))
    assert (failure.reach is Reach.MAYBE) is maybe_sent


# --- the wait a rate-limited answer asks for (R11) ------------------------------------------------

NOW = datetime(2026, 10, 1, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("120", 120.0),
        (" 7 ", 7.0),
        ("0", 0.0),
        (format_datetime(NOW + timedelta(seconds=90), usegmt=True), 90.0),
        (format_datetime(NOW - timedelta(seconds=90), usegmt=True), 0.0),
        (None, None),
        ("", None),
        ("soon", None),
        ("-5", None),
        ("1.5", None),
        ("Wed, 21 Oct 2015 07:28:00 -0000", None),  # no zone: no usable time
    ],
)
def test_a_retry_after_is_usable_as_seconds_or_a_dated_time_and_nothing_else(
    value: str | None, seconds: float | None
) -> None:
    assert parse_retry_after(value, NOW) == seconds


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("1s", 1.0),
        ("6m0s", 360.0),
        ("20ms", 0.02),
        ("1h2m3.5s", 3723.5),
        ("", None),
        (None, None),
        ("5", None),
        ("1s later", None),
        ("abc", None),
    ],
)
def test_a_rate_limit_reset_header_is_read_as_openai_writes_it(
    value: str | None, seconds: float | None
) -> None:
    assert parse_reset(value) == seconds


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "3"}, 3.0),
        ({"retry-after": "3", "retry-after-ms": "9000"}, 3.0),
        ({"retry-after": "soon", "retry-after-ms": "1500"}, 1.5),
        ({"retry-after-ms": "250.5"}, 0.2505),
        ({"x-ratelimit-reset-requests": "2s", "x-ratelimit-reset-tokens": "1m"}, 60.0),
        ({"x-ratelimit-reset-tokens": "bad", "x-ratelimit-reset-requests": "4s"}, 4.0),
        ({"llm_provider-retry-after": "4"}, 4.0),
        ({"llm_provider-x-ratelimit-reset-tokens": "6m0s"}, 360.0),
        ({"retry-after": "2", "llm_provider-retry-after": "40"}, 2.0),
        ({}, None),
        ({"retry-after": "later", "retry-after-ms": "x"}, None),
    ],
)
def test_the_wait_asked_for_comes_from_the_first_usable_header(
    headers: dict[str, str], seconds: float | None
) -> None:
    assert retry_after_of(httpx.Headers(headers)) == seconds


@pytest.mark.parametrize(
    ("headers", "retries"),
    [
        ({"x-litellm-attempted-retries": "2"}, 2),
        ({"x-litellm-attempted-retries": " 1 "}, 1),
        ({"x-litellm-attempted-retries": "two"}, 0),
        ({"x-litellm-attempted-retries": "-1"}, 0),
        ({}, 0),
    ],
)
def test_a_gateways_reported_retries_are_read_as_a_whole_number_or_none(
    headers: dict[str, str], retries: int
) -> None:
    assert gateway_retries_of(httpx.Headers(headers)) == retries
