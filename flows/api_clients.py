"""Lighter Prefect API clients for the task runs of a flow run, whatever server it talks to.

Why: Prefect builds a new API client for every task run that runs in a thread of its own (one
per batch here), and each new client pays, on the hand-off from one batch to the next, for two
things the server may not need:
- a verified TLS context loaded with certifi's whole CA bundle (~30 ms of CPU), although an
  `http://` API URL never uses TLS;
- a `GET /csrf-token` before its first write (one more round trip, before the slot is taken),
  which a server without CSRF protection (Prefect's default) answers with 422, after which
  that one client stops asking.
Both are learnt here once per flow run instead of once per batch. For an `http://` API the
clients verify against a CA file of one certificate (verification stays on; there is nothing
to verify), whatever CA file was configured: none is ever read for that URL. (A server that
redirected its API to `https://` would then fail verification: give the `https://` URL.) CSRF
support switched off by the user stays off. `postledger run`'s local server sets both itself
(flows/local_server.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from prefect import get_client
from prefect.client.base import ServerType
from prefect.exceptions import PrefectHTTPStatusError
from prefect.settings import (
    PREFECT_API_SSL_CERT_FILE,
    PREFECT_CLIENT_CSRF_SUPPORT_ENABLED,
    get_current_settings,
    temporary_settings,
)

from flows.local_server import one_certificate


@contextmanager
def lighter_task_run_clients() -> Iterator[None]:
    """Within: the task runs this flow run starts build their clients without what its server
    does not use. Call it in the flow run's body (its client is the one asked)."""
    settings = get_current_settings()
    updates: dict[Any, Any] = {}
    api_url = settings.api.url or ""
    if api_url.startswith("http://"):
        updates[PREFECT_API_SSL_CERT_FILE] = str(one_certificate(settings.home))
    if settings.client.csrf_support_enabled and api_url and not _server_checks_csrf():
        updates[PREFECT_CLIENT_CSRF_SUPPORT_ENABLED] = False
    with temporary_settings(updates=updates):
        yield


def _server_checks_csrf() -> bool:
    """Whether the Prefect server wants CSRF tokens, asked the way Prefect's client asks."""
    with get_client(sync_client=True) as client:
        if client.server_type is ServerType.CLOUD:
            return False  # Prefect's client never asks Prefect Cloud for a token
        try:
            client.request("GET", "/csrf-token", params={"client": str(uuid.uuid4())})
        except PrefectHTTPStatusError as exc:
            disabled = exc.response.status_code == 422 and (
                "CSRF protection is disabled." in exc.response.text
            )
            old_server = exc.response.status_code == 404
            return not (disabled or old_server)
        return True
