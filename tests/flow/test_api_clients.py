"""The task runs of a flow run build their Prefect clients without what the server does not use
(`flows/api_clients.py`), asked of a real `prefect server start` (CSRF protection off, as
Prefect ships it) over plain HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prefect.settings import (
    PREFECT_API_SSL_CERT_FILE,
    PREFECT_API_URL,
    PREFECT_CLIENT_CSRF_SUPPORT_ENABLED,
    get_current_settings,
    temporary_settings,
)

from flows.api_clients import lighter_task_run_clients
from tests.support.prefect_server import PrefectServer

pytestmark = pytest.mark.xdist_group("prefect_server")


@pytest.fixture
def as_a_worker_would(prefect_server: PrefectServer) -> Iterator[None]:
    """This process's Prefect settings as a worker's flow run has them: the server's URL, and
    Prefect's defaults for the two client settings."""
    with temporary_settings(
        updates={PREFECT_API_URL: prefect_server.api_url},
        restore_defaults={PREFECT_CLIENT_CSRF_SUPPORT_ENABLED, PREFECT_API_SSL_CERT_FILE},
    ):
        assert get_current_settings().client.csrf_support_enabled
        yield


def test_a_server_without_csrf_protection_is_not_asked_for_tokens_again(
    as_a_worker_would: None,
) -> None:
    with lighter_task_run_clients():
        settings = get_current_settings()
        assert settings.client.csrf_support_enabled is False
        cert_file = settings.api.ssl_cert_file
        assert cert_file and Path(cert_file).read_text().count("BEGIN CERTIFICATE") == 1
    # Only within: the flow run's own settings are untouched afterwards.
    assert get_current_settings().client.csrf_support_enabled is True
    assert get_current_settings().api.ssl_cert_file != cert_file


def test_an_https_server_keeps_the_ca_bundle_and_is_asked_nothing(
    as_a_worker_would: None, tmp_path: Path
) -> None:
    bundle = tmp_path / "corporate-ca.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n")
    https = {
        PREFECT_API_URL: "https://prefect.example.invalid/api",
        PREFECT_API_SSL_CERT_FILE: str(bundle),
        # Off already: nothing is asked of this unreachable server.
        PREFECT_CLIENT_CSRF_SUPPORT_ENABLED: False,
    }
    with temporary_settings(updates=https), lighter_task_run_clients():
        assert get_current_settings().api.ssl_cert_file == str(bundle)
