"""Through a real LiteLLM proxy in front of the simulator: postledger's requests turn the
gateway's own retries off, so a create that failed after the model ran is charged once (and
the ledger knows it may have been); a quota error the gateway wraps as a `throttling_error` is
still a quota error.

LiteLLM is not a dependency of postledger: these tests run where a `litellm` executable is
found (POSTLEDGER_TEST_LITELLM, else `litellm` on the PATH), and are skipped elsewhere. CI
installs it in an environment of its own (`.ci/run`, which says why that version). To run them:
`python3 -m venv /tmp/litellm-venv && /tmp/litellm-venv/bin/pip install 'litellm[proxy]==1.108.7'`,
then
`POSTLEDGER_TEST_LITELLM=/tmp/litellm-venv/bin/litellm uv run pytest tests/flow/test_gateway.py`.
The proxy runs on loopback with telemetry off and every remote look-up it would make at start
replaced by its bundled copy.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from postledger.failures.classify import failure_of
from postledger.failures.policy import Reach
from postledger.record.models import FailureKind
from postledger.upstreams.calls import CreateRequest
from postledger.upstreams.errors import RejectedError, TransportError, UpstreamError
from postledger.upstreams.http import Timeouts, gateway_retries_of
from postledger.upstreams.openai_chat import OpenAIChatClient
from processes.children import wait_answering
from tests.support.ledgers import asked
from tests.support.processes import OWNER_VAR, free_port, running
from tests.support.simulators import simulator_process

MODEL = "gateway-analyst"  # the proxy's name for the simulator's sim-analyst-1
POSTS = [("p-1", "The bus was late again."), ("p-2", "Lovely concert last night.")]
STARTUP_TIMEOUT = 180.0  # seconds: LiteLLM takes ~15 s to start on an idle machine


def litellm_executable() -> str | None:
    return os.environ.get("POSTLEDGER_TEST_LITELLM") or shutil.which("litellm")


pytestmark = [
    pytest.mark.processes,
    pytest.mark.xdist_group("litellm"),
    # Skipped here, before any fixture: the session's Prefect server is not started for them.
    pytest.mark.skipif(
        litellm_executable() is None,
        reason="LiteLLM is not installed (it is no dependency of postledger): set "
        "POSTLEDGER_TEST_LITELLM to a litellm executable, or put litellm on the PATH",
    ),
]


@dataclass(frozen=True)
class Gateway:
    url: str  # the proxy
    key: str  # the key the proxy accepts
    sim: str  # the simulator behind it

    def charges(self) -> int:
        return len(httpx.get(f"{self.sim}/_sim/charges").json()["charges"])

    def fault(self, fault: str) -> None:
        """This create fault on the next create only (the counts start again)."""
        plan = {"rules": [{"on": "create", "fault": fault, "nth": [1]}]}
        httpx.post(f"{self.sim}/_sim/faults", json=plan).raise_for_status()


def _proxy_env(home: Path, master_key: str) -> dict[str, str]:
    """Only what the proxy needs: no keys or proxies of ours, and nothing sent out (and the
    test's mark, by which a session's end finds what it left)."""
    keep = ("PATH", "LANG", "LC_ALL", OWNER_VAR)
    env = {name: os.environ[name] for name in keep if name in os.environ}
    env.update(
        HOME=str(home),
        LITELLM_MASTER_KEY=master_key,
        LITELLM_TELEMETRY="False",
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        LITELLM_LOCAL_BLOG_POSTS="True",
        LITELLM_LOCAL_POLICY_TEMPLATES="True",
        LITELLM_LOCAL_AUTOROUTER_PRESETS="True",
        DO_NOT_TRACK="1",
        NO_PROXY="*",
    )
    return env


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    executable = litellm_executable()
    assert executable is not None  # (else the module is skipped)
    folder = tmp_path_factory.mktemp("litellm")
    # Made at run time, never written down: LiteLLM takes only keys with its "sk" prefix.
    master_key = "-".join(("sk", secrets.token_hex(32)))
    with simulator_process(latency=0.1, faults="create:http_500_after_create#1") as sim:
        # LiteLLM's own default retries are left as they are (on): our header turns them off.
        config = {
            "model_list": [
                {
                    "model_name": MODEL,
                    "litellm_params": {
                        "model": "openai/sim-analyst-1",
                        "api_base": f"{sim}/v1",
                        "api_key": "sim-key",
                    },
                }
            ],
            "litellm_settings": {"telemetry": False},
        }
        config_file = folder / "config.yaml"  # JSON is YAML
        config_file.write_text(json.dumps(config, indent=2), encoding="utf-8")
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        log = folder / "litellm.log"
        with (
            log.open("wb") as output,
            running(
                [executable, "--config", str(config_file), "--host", "127.0.0.1"]
                + ["--port", str(port), "--num_workers", "1"],
                cwd=folder,  # no .env of ours is read
                env=_proxy_env(folder, master_key),
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
            ) as process,
        ):
            problem = wait_answering(
                process, f"{url}/health/liveliness", timeout=STARTUP_TIMEOUT, interval=0.25
            )
            if problem:
                tail = log.read_text(encoding="utf-8", errors="replace")[-3000:]
                pytest.fail(f"the LiteLLM proxy {problem}; it said:\n{tail}")
            yield Gateway(url, master_key, sim)


def _send_through(gateway: Gateway) -> UpstreamError:
    """One batch as one chat completion through the proxy, with postledger's client."""

    async def send() -> UpstreamError:
        client = OpenAIChatClient(
            gateway.url, api_key=SecretStr(gateway.key), timeouts=Timeouts(read=60)
        )
        async with client:
            try:
                created = await client.create(
                    CreateRequest("2026-10-b0001", MODEL, asked("Analyse."), POSTS, "key-1")
                )
            except UpstreamError as exc:
                return exc
        raise AssertionError(f"the create went through: {created}")

    return asyncio.run(send())


def test_a_create_that_failed_after_it_was_charged_is_not_retried_by_the_gateway(
    gateway: Gateway,
) -> None:
    gateway.fault("http_500_after_create")
    before = gateway.charges()
    error = _send_through(gateway)
    assert isinstance(error, TransportError), error
    assert error.maybe_sent and error.http_status == 500
    assert gateway.key not in str(error)
    assert failure_of(error).reach is Reach.MAYBE  # may have been charged: never resent blindly
    assert gateway.charges() - before == 1  # the gateway did not send it again
    assert error.gateway_retries == 0


def test_without_the_header_the_gateway_retries_and_pays_twice(gateway: Gateway) -> None:
    """The control: what the first test would see if our header did nothing."""
    gateway.fault("http_500_after_create")
    before = gateway.charges()
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": "Analyse."},
            {"role": "user", "content": json.dumps({"posts": [{"id": "p-1", "text": "hi"}]})},
        ],
    }
    response = httpx.post(
        f"{gateway.url}/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {gateway.key}"},
        timeout=60,
    )
    charged = gateway.charges() - before
    assert charged > 1, f"LiteLLM did not retry by default ({response.status_code})"
    if response.is_success:  # it reports the retries it made, which postledger reads
        assert gateway_retries_of(response.headers) == charged - 1


def test_a_quota_error_the_gateway_wraps_is_still_quota(gateway: Gateway) -> None:
    gateway.fault("quota_429")
    before = gateway.charges()
    error = _send_through(gateway)
    assert isinstance(error, RejectedError) and error.http_status == 429, error
    assert error.body.type == "throttling_error"  # LiteLLM's word for it, not OpenAI's
    failure = failure_of(error)
    assert failure.kind is FailureKind.QUOTA and failure.reach is Reach.NEVER
    assert gateway.charges() == before


def test_a_month_through_the_gateway_records_a_charge_it_may_have_made_once(
    gateway: Gateway,
    prefect_harness: None,
    ledger_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The whole flow behind the proxy: the create that failed after the model ran is charged
    once upstream, and the ledger has it as one possible charge of a batch left uncertain —
    not failed, not resent."""
    from flows.monthly import monthly_posts
    from postledger.ledger import Ledger
    from postledger.record.models import BatchStatus, SpendState

    for name, value in {
        "UPSTREAM_KIND": "openai_chat",
        "UPSTREAM_URL": gateway.url,
        "API_KEY": gateway.key,
        "MODEL": MODEL,
        "MAX_IN_FLIGHT": "1",
        "CHAT_TIMEOUT": "60",
    }.items():
        monkeypatch.setenv(f"POSTLEDGER_{name}", value)
    gateway.fault("http_500_after_create")
    before = gateway.charges()
    posts = tmp_path / "2026-10.jsonl"
    posts.write_text(
        "".join(f'{{"id": "g{i:02d}", "text": "The bus was late, day {i}."}}\n' for i in range(30)),
        encoding="utf-8",
    )
    monthly_posts(month="2026-10", posts_path=str(posts))

    assert gateway.charges() - before == 2  # the failed-after-charge create, then the next
    ledger = Ledger(ledger_url)
    first, second = ledger.batches("2026-10")
    assert (first.status, first.gateway_retries) == (BatchStatus.RUNNING, 0)
    assert second.status is BatchStatus.COMPLETED
    states = {row.batch_id: row.state for row in ledger.spend("2026-10")}
    assert states == {first.batch_id: SpendState.POSSIBLE, second.batch_id: SpendState.CONFIRMED}
    assert {p.attempts for p in ledger.posts_of(first.batch_id)} == {1}
    ledger.close()
