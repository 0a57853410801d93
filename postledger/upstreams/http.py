"""What every upstream client shares (httpx).

It makes exactly one HTTP request per call and turns what happened into a typed result or a
typed error; deciding what to do about an error is the business layer's job, not this one's.
The API key travels only in the Authorization header: never in a log line, an exception
message or the ledger (R53).

Every request carries `x-litellm-num-retries: 0`: a gateway that retries failed calls on its
own (the LiteLLM proxy does by default) would otherwise send a paid request again behind our
back. A gateway's report of retries it made anyway (`x-litellm-attempted-retries`) is read
into `Created.gateway_retries` and into the raised error's `gateway_retries` (R42).
"""

from __future__ import annotations

import functools
import re
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, ClassVar, Self

import httpx
from pydantic import SecretStr

from postledger.settings import Settings, UpstreamKind
from postledger.upstreams.calls import (
    Created,
    CreateRequest,
    Found,
    JobLook,
    JobRequest,
    JobWanted,
    Look,
    NoVerdict,
    NoVerdictReason,
    Unknown,
)
from postledger.upstreams.errors import (
    EndpointNotFound,
    ErrorBody,
    RejectedError,
    TaskUnknownError,
    TransportError,
    UpstreamError,
)
from postledger.upstreams.job_files import ResultLines

TRANSIENT_STATUS = frozenset({500, 502, 503, 504})

# Sent on every request: a LiteLLM proxy in front of the upstream must not retry on its own
# (a retry after the model ran is a second charge the ledger never sees). Servers that do not
# know the header ignore it.
GATEWAY_NO_RETRIES = {"x-litellm-num-retries": "0"}


# Where a gateway reports the retries it made on its own for this response.
GATEWAY_RETRIES_HEADER = "x-litellm-attempted-retries"


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP-date); None when the
    header is missing or unusable, so the caller falls back to its own default."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def parse_reset(value: str | None) -> float | None:
    """Seconds from an `x-ratelimit-reset-*` header, as OpenAI writes them: `1s`, `6m0s`,
    `20ms`, `1h2m3.5s`. None when missing or unusable."""
    if not value or not (value := value.strip()):
        return None
    parts = _DURATION_PART.findall(value)
    if not parts or "".join(n + u for n, u in parts) != value:
        return None
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


# A gateway (LiteLLM) forwards the provider's headers under this prefix.
GATEWAY_FORWARDED = "llm_provider-"


def retry_after_of(headers: httpx.Headers) -> float | None:
    """The wait an upstream asked for: `Retry-After` (seconds or HTTP-date), else
    `retry-after-ms`, else the longest of the `x-ratelimit-reset-*` (OpenAI) and
    `anthropic-ratelimit-*-reset` headers; then the same
    headers as a gateway forwards them from the provider (`llm_provider-retry-after`, ...)."""
    for prefix in ("", GATEWAY_FORWARDED):
        waited = _wait_of(headers, prefix)
        if waited is not None:
            return waited
    return None


def _wait_of(headers: httpx.Headers, prefix: str) -> float | None:
    waited = parse_retry_after(headers.get(f"{prefix}retry-after"))
    if waited is not None:
        return waited
    milliseconds = headers.get(f"{prefix}retry-after-ms", "").strip()
    if milliseconds.replace(".", "", 1).isdigit():
        return float(milliseconds) / 1000
    resets = [
        parse_reset(headers.get(f"{prefix}{name}"))
        for name in ("x-ratelimit-reset-requests", "x-ratelimit-reset-tokens")
    ]
    resets += [parse_reset_time(headers.get(f"{prefix}{name}")) for name in ANTHROPIC_RESETS]
    known = [seconds for seconds in resets if seconds is not None]
    return max(known) if known else None


# Anthropic's rate-limit headers: when each limit is back to full, as an RFC 3339 time.
ANTHROPIC_RESETS = tuple(
    f"anthropic-ratelimit-{limit}-reset"
    for limit in ("requests", "tokens", "input-tokens", "output-tokens")
)


def parse_reset_time(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds until an RFC 3339 time (`2026-12-01T20:00:30Z`); None when missing or
    unusable (a time without its zone included)."""
    if not value or not (value := value.strip()):
        return None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def gateway_retries_of(headers: httpx.Headers) -> int:
    """The retries a gateway reported making on its own (`x-litellm-attempted-retries`); 0
    when the header is missing or not a whole number."""
    value = headers.get(GATEWAY_RETRIES_HEADER, "").strip()
    return int(value) if value.isdigit() else 0


@dataclass(frozen=True)
class Timeouts:
    connect: float = 5.0
    read: float = 30.0


DEFAULT_TIMEOUTS = Timeouts()


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One verified TLS context per process: loading the CA bundle costs tens of ms, and a
    client is made per batch call."""
    return ssl.create_default_context()


class HttpUpstream:
    """What every upstream client shares: one httpx client, one request per call, the
    transport faults and refusals turned into typed errors, and the key only in a header.

    Subclasses say what the upstream is like (`postledger.upstreams.Upstream`), and what the
    provider is (its kind, its URL's form, its job limits, its deadline, how it is built from
    the settings): a new provider is a module with one such class, and one registry line."""

    kind: ClassVar[UpstreamKind]
    version_path: ClassVar[str] = ""  # what a base URL adds to the server's root ("/v1")
    # The most requests and bytes one upstream job may carry (a Batch API), per the provider.
    job_limits: ClassVar[tuple[int, int]] = (1, 0)
    needs_key: ClassVar[bool] = True  # a server not on this machine wants a key

    has_task_ids = True  # the upstream keeps a task that can be polled by its id
    can_list = False  # the upstream can list its recent tasks, to find one made for a batch
    sends_metadata = False  # its work carries the metadata of the batch or submission
    long_polls = False  # a poll may ask the upstream to hold the answer until the task ends
    carries_many = False  # one upstream job may carry many ledger batches (a Batch API)
    # Tasks that take hours (the Batch API): the interval between polls grows to this.
    max_poll_interval: float | None = None
    # The answers that mean "try again": a server-side fault or an overload.
    transient_statuses: frozenset[int] = TRANSIENT_STATUS
    # The 5xx answers to a create that may hide a task that was made (and is charged).
    statuses_that_may_charge: frozenset[int] = TRANSIENT_STATUS
    # What the base URL must look like, said when a call answers 404.
    base_url_hint = "the task API server's root, without /v1"

    def __init__(
        self,
        base_url: str,
        *,
        api_key: SecretStr | None = None,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
        honours_keys: bool = True,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """`transport`: for tests of this client's parsing only (an `httpx.MockTransport`)."""
        self.base_url = base_url.rstrip("/")
        self.honours_keys = honours_keys
        self._api_key = api_key
        headers = {"User-Agent": "postledger", **GATEWAY_NO_RETRIES, **self.auth_headers(api_key)}
        self._timeouts = timeouts
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            verify=_tls_context(),
            timeout=httpx.Timeout(timeouts.read, connect=timeouts.connect),
            transport=transport,
        )

    @classmethod
    def from_settings(
        cls, settings: Settings, transport: httpx.AsyncBaseTransport | None = None
    ) -> Self:
        """The client the settings configure (`upstream_url` must be set)."""
        assert settings.upstream_url is not None
        return cls(
            settings.upstream_url,
            api_key=settings.api_key,
            timeouts=cls.timeouts_of(settings),
            honours_keys=cls.keys_honoured(settings),
            transport=transport,
            **cls.options_of(settings),
        )

    @classmethod
    def timeouts_of(cls, settings: Settings) -> Timeouts:
        return Timeouts(connect=settings.connect_timeout, read=settings.read_timeout)

    @classmethod
    def options_of(cls, settings: Settings) -> dict[str, Any]:
        """The provider's own constructor options, from the settings."""
        return {}

    @classmethod
    def keys_honoured(cls, settings: Settings) -> bool:
        """Whether a create sent again under the same idempotency key can never pay twice."""
        return False

    @classmethod
    def deadline(cls, settings: Settings) -> float:
        """Seconds to wait for one upstream task before it is left uncertain."""
        return settings.task_deadline

    @classmethod
    def request_bytes(
        cls, settings: Settings, batch_id: str, posts: Sequence[tuple[str, str]]
    ) -> int:
        """The bytes one ledger batch's request takes in an upstream job (a Batch API's)."""
        return 0

    def auth_headers(self, api_key: SecretStr | None) -> dict[str, str]:
        """The headers that carry the key (and whatever else the protocol requires)."""
        if api_key is None:
            return {}
        return {"Authorization": f"Bearer {api_key.get_secret_value()}"}

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def create(self, request: CreateRequest) -> Created:
        """Create (and pay for) the upstream work of one batch: each provider's own."""
        raise NotImplementedError(f"{type(self).__name__} must say how it creates")

    # --- reads: one look at paid work, never a verdict unless the upstream gave one ------

    async def look(self, task_id: str, *, wait: float = 0.0) -> Look:
        """One look at one upstream task: still running, the upstream's verdict, or no
        verdict. A transport fault is raised (`TransportError`), for the request layer to
        retry; everything else is returned as what it is."""
        raise NotImplementedError(f"{type(self).__name__} keeps no task to look at")

    async def find_task(self, *, batch_id: str, idempotency_key: str) -> Found | NoVerdict:
        """The upstream task made for this batch and key, if the upstream can tell."""
        return Found(None)

    # --- a submission: one upstream job that carries many ledger batches (Batch APIs) -----

    async def submit(self, job: JobRequest) -> Created:
        """Create (and pay for) the upstream job of a submission."""
        raise NotImplementedError(f"{type(self).__name__} takes one ledger batch per call")

    async def find_job(self, wanted: JobWanted) -> Found | NoVerdict:
        """The upstream job made for this submission, if the upstream can tell."""
        return Found(None)

    async def look_job(self, job_id: str, batch_ids: Sequence[str]) -> JobLook:
        """One look at a job; once it ended, each ledger batch's own line as its result."""
        raise NotImplementedError(f"{type(self).__name__} takes one ledger batch per call")

    async def _read(self, url: str, **kwargs: Any) -> httpx.Response | Unknown | NoVerdict:
        """One read of paid work by its id: the answer, `Unknown` on a 404 (the upstream
        does not know that id), or no verdict when the read was refused. A transport fault
        is raised for the request layer."""
        try:
            return await self._send("GET", url, reads_task=True, **kwargs)
        except TaskUnknownError as exc:
            return Unknown(str(exc))
        except RejectedError as exc:
            return refused(exc)

    async def _download(self, url: str, into: ResultLines) -> None | Unknown | NoVerdict:
        """`_read` of a results file, streamed to disk a block at a time (`into`), never
        held whole. A body cut on the way is a transport fault, as a read's is."""
        try:
            response = await self._send("GET", url, reads_task=True, stream=True)
        except TaskUnknownError as exc:
            return Unknown(str(exc))
        except RejectedError as exc:
            return refused(exc)
        try:
            await into.take(response.aiter_bytes())
        except httpx.TransportError as exc:
            raise TransportError(
                f"GET {url}: the results were cut short ({type(exc).__name__})", maybe_sent=True
            ) from None
        finally:
            await response.aclose()
        return None

    async def _page(
        self, url: str, params: dict[str, Any], what: str
    ) -> tuple[list[dict[str, Any]], bool] | NoVerdict:
        """One page of a listing of paid work (`data`, `has_more`), or no verdict: a listing
        that cannot be read proves nothing missing. Listing pays nothing, so its transport
        faults are safe to retry."""
        try:
            response = await self._send("GET", url, params=params)
        except TransportError as exc:
            raise costs_nothing(exc) from None
        except RejectedError as exc:  # a 404 too: a wrong base URL (it stops the run)
            return refused(exc)
        page = answer_of(response, what)
        if isinstance(page, NoVerdict):
            return page
        data = page.get("data")
        if not isinstance(data, list):
            return not_the_answer(f"{what} has no data")
        return [item for item in data if isinstance(item, dict)], page.get("has_more") is True

    async def _send(
        self,
        method: str,
        url: str,
        *,
        reads_task: bool = False,
        stream: bool = False,
        **kwargs: Any,
    ) -> httpx.Response:
        """One request. `reads_task`: the call reads one task by its id, so a 404 means the
        upstream does not know that task (`TaskUnknownError`); on any other call a 404 means
        the configured URL is wrong (`EndpointNotFound`). `stream`: a 2xx answer's body is
        left unread, for the caller to read and close."""
        try:
            request = self._http.build_request(method, url, **kwargs)
            response = await self._http.send(request, stream=stream)
            if stream and not response.is_success:
                await response.aread()  # an error's body: small, and read to be told
        except httpx.ConnectError as exc:
            raise TransportError(
                f"could not connect to {self.base_url} ({type(exc).__name__})", maybe_sent=False
            ) from None
        except httpx.ConnectTimeout:
            raise TransportError(
                f"connecting to {self.base_url} timed out", maybe_sent=False
            ) from None
        except httpx.TransportError as exc:
            raise TransportError(
                f"{method} {url}: no answer ({type(exc).__name__})", maybe_sent=True
            ) from None
        status = response.status_code
        retried = gateway_retries_of(response.headers)
        also = _gateway_note(retried)
        if status in self.transient_statuses:
            raise TransportError(
                self._redact(f"{method} {url}: HTTP {status}{also}"),
                maybe_sent=status in self.statuses_that_may_charge,
                status=status,
                gateway_retries=retried,
            )
        if status >= 400:
            body = _error_of(response)
            cls: type[RejectedError] = RejectedError
            message = f"{method} {url}: HTTP {status}: {body.message}{also}"
            if status == 404 and reads_task:
                cls = TaskUnknownError
            elif status == 404:
                cls = EndpointNotFound
                message = self._not_found(method, response, body) + also
            raise cls(
                self._redact(message),
                status=status,
                error_type=body.kind,
                retry_after=retry_after_of(response.headers),
                body=body,
                gateway_retries=retried,
            )
        return response

    def _not_found(self, method: str, response: httpx.Response, body: ErrorBody) -> str:
        where = response.request.url.copy_with(query=None)
        if body.code == "model_not_found" or (
            body.type == "not_found_error" and body.message.startswith("model:")
        ):
            return (
                f"{method} {where} answered 404: the upstream does not know the model "
                f"({body.message}); check POSTLEDGER_MODEL"
            )
        said = f" ({body.message})" if body.message else ""
        return (
            f"{method} {where} answered 404 Not Found{said}: the upstream URL looks wrong; "
            f"check POSTLEDGER_UPSTREAM_URL, which must be {self.base_url_hint}"
        )

    def _redact(self, text: str) -> str:
        if self._api_key is not None and self._api_key.get_secret_value():
            text = text.replace(self._api_key.get_secret_value(), "***")
        return text


def accepted_body(response: httpx.Response) -> dict[str, Any]:
    """The body of a 2xx answer to a call that makes paid work. One that cannot be read is a
    lost answer, not a failure: the work may have been made and charged, so it is raised as a
    transport error that may have reached the upstream, never sent again without a key."""
    try:
        return json_body(response)
    except UpstreamError as exc:
        raise lost_answer(response, str(exc)) from None


def lost_answer(response: httpx.Response, what: str) -> TransportError:
    return TransportError(
        f"{what}: the work may have been made (and charged) upstream",
        maybe_sent=True,
        status=response.status_code,
        gateway_retries=gateway_retries_of(response.headers),
    )


def json_body(response: httpx.Response) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError:
        raise UpstreamError(f"HTTP {response.status_code} with a body that is not JSON") from None
    if not isinstance(data, dict):
        raise UpstreamError(f"HTTP {response.status_code} with a JSON {type(data).__name__}")
    return data


def _error_of(response: httpx.Response) -> ErrorBody:
    """Type, code and message of an error body `{"error": {"message", "type", "param",
    "code"}}`. The code is the finer word when there is one: OpenAI answers a 429 with the
    type `requests` and the code `rate_limit_exceeded`, or type and code
    `insufficient_quota`. A gateway may write the code as a number (`"429"`, or 429)."""
    try:
        error = response.json().get("error", {})
        if isinstance(error, str):  # some servers answer {"error": "text"}
            return ErrorBody(message=error[:500])
        return ErrorBody(
            type=_word(error.get("type")),
            code=_word(error.get("code")),
            message=str(error.get("message") or "")[:500],
        )
    except (ValueError, AttributeError):
        return ErrorBody(message=response.text[:200])


def _word(value: Any) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str | int):
        return str(value).strip() or None
    return None


def _gateway_note(retries: int) -> str:
    if not retries:
        return ""
    times = "once" if retries == 1 else f"{retries} times"
    return f" (a gateway in front of the upstream retried it {times} on its own)"


def costs_nothing(exc: TransportError) -> TransportError:
    """A fault of a call that makes nothing paid (a listing, a file upload): safe to retry."""
    if not exc.maybe_sent:
        return exc
    return TransportError(
        str(exc), maybe_sent=False, status=exc.http_status, gateway_retries=exc.gateway_retries
    )


def refused(error: RejectedError) -> NoVerdict:
    """A read the upstream refused: it says nothing about the paid work itself."""
    return NoVerdict(
        NoVerdictReason.REFUSED, str(error), refusal=error, retry_after=error.retry_after
    )


def answer_of(response: httpx.Response, what: str) -> dict[str, Any] | NoVerdict:
    """The JSON object a read was answered with, or no verdict when the body is not one (an
    HTML page from a captive portal or a misrouted gateway, JSON cut short, a list)."""
    try:
        return json_body(response)
    except UpstreamError as exc:
        return not_the_answer(f"{what}: {exc}")


def not_the_answer(detail: str) -> NoVerdict:
    return NoVerdict(NoVerdictReason.NOT_THE_ANSWER, detail)


def request_counts(data: dict[str, Any]) -> dict[str, int] | None:
    """A job's `request_counts` (OpenAI: total, completed, failed; Anthropic: processing,
    succeeded, errored, canceled, expired), as the upstream reports them while it runs."""
    counts = data.get("request_counts")
    if not isinstance(counts, dict):
        return None
    return {str(k): v for k, v in counts.items() if isinstance(v, int)}
