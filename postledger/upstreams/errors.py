"""The typed errors every upstream client raises; `postledger.failures.classify` turns them
into failure kinds. What to do about one is decided there, not by where it sits here."""

from __future__ import annotations

from dataclasses import dataclass

from postledger.errors import PostledgerError


class UpstreamError(PostledgerError):
    """A call to the upstream did not give a usable answer.

    `gateway_retries`: the retries a gateway in front of the upstream reported making on its
    own for the failing call (0 when none were reported, or there was no answer)."""

    def __init__(
        self, message: str, *, status: int | None = None, gateway_retries: int = 0
    ) -> None:
        super().__init__(message)
        self.http_status = status
        self.gateway_retries = gateway_retries


class TransportError(UpstreamError):
    """No answer, or a server-side fault (5xx): worth retrying at the request layer (R10).

    `maybe_sent` is False only when the request certainly never reached the upstream (the
    connection was not made), so a create can be retried without any risk of paying twice.
    """

    def __init__(
        self,
        message: str,
        *,
        maybe_sent: bool,
        status: int | None = None,
        gateway_retries: int = 0,
    ) -> None:
        super().__init__(message, status=status, gateway_retries=gateway_retries)
        self.maybe_sent = maybe_sent


class TaskFailed(UpstreamError):
    """The upstream says the task ended without an output. `billed` is False only when the
    upstream says the failed work was not billed (Anthropic bills no errored, expired or
    canceled request); otherwise it is taken as paid for."""

    def __init__(self, message: str, *, billed: bool = True) -> None:
        super().__init__(message)
        self.billed = billed


class AmbiguousCreate(UpstreamError):
    """A create may have reached an upstream that does not honour idempotency keys, and no
    answer came back: sending it again could pay twice, so it is not retried automatically."""


@dataclass(frozen=True)
class ErrorBody:
    """An error answer's body as OpenAI writes it, `{"error": {"message", "type", "code"}}`;
    gateways wrap a provider's error the same way (LiteLLM: type `throttling_error`, code
    `"429"`, the provider's message)."""

    type: str | None = None
    code: str | None = None
    message: str = ""

    @property
    def kind(self) -> str | None:
        """The finer word: the code when there is one, else the type."""
        return self.code or self.type


class RejectedError(UpstreamError):
    """The upstream answered and refused (4xx): retrying the same request at once will not help.

    `error_type` is the body's code, else its type (OpenAI answers a 429 with the type
    `requests` and the code `rate_limit_exceeded`); `body` keeps type, code and message apart.
    `retry_after` is the wait the upstream asked for, in seconds, when it gave a usable one.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int,
        error_type: str | None,
        retry_after: float | None = None,
        body: ErrorBody | None = None,
        gateway_retries: int = 0,
    ) -> None:
        super().__init__(message, status=status, gateway_retries=gateway_retries)
        self.error_type = error_type
        self.retry_after = retry_after
        self.body = body if body is not None else ErrorBody(code=error_type)


class TaskUnknownError(RejectedError):
    """The upstream does not know this task id (R26)."""


class EndpointNotFound(RejectedError):
    """A 404 on a call that names no task (a create, a listing): the configured URL is wrong,
    not the task. Nothing was made or charged; every call would fail the same way until the
    configuration is fixed."""
