"""OpenAI's rate-limit headers, as the chat completions adapter reads them. (Chat completions
over HTTP: tests/flow/test_faults.py and tests/flow/test_openai_chat.py.)"""

from __future__ import annotations


def test_rate_limit_headers_as_openai_writes_them() -> None:
    from httpx import Headers

    from postledger.upstreams.http import parse_reset, retry_after_of

    assert parse_reset("1s") == 1 and parse_reset("6m0s") == 360 and parse_reset("20ms") == 0.02
    assert parse_reset("1h2m3.5s") == 3723.5 and parse_reset("soon") is None
    assert retry_after_of(Headers({"retry-after": "3", "x-ratelimit-reset-requests": "9s"})) == 3
    assert retry_after_of(Headers({"retry-after-ms": "1500"})) == 1.5
    assert (
        retry_after_of(
            Headers({"x-ratelimit-reset-requests": "2s", "x-ratelimit-reset-tokens": "1m0s"})
        )
        == 60
    )
    assert retry_after_of(Headers({})) is None
