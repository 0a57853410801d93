"""The simulator of the paid AI service (one of this process's, reused test after test), its
evidence endpoints and fault plans, the settings that point at it, and quick timings."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Generator, Iterator
from typing import Any

import httpx
import pytest

UPSTREAM_KINDS = (
    "task_api",
    "openai_chat",
    "openai_batch",
    "anthropic_messages",
    "anthropic_batch",
)


def fault_cases(kinds: tuple[str, ...], *faults: str | tuple[Any, ...]) -> list[Any]:
    """Parameters for `@pytest.mark.parametrize(("kind", "faulty", ...), ...)`: each fault
    plan (or tuple of a plan and the test's other values) for each of `kinds`."""
    rows = [fault if isinstance(fault, tuple) else (fault,) for fault in faults]
    return [pytest.param(kind, *row, id=f"{kind}-{row[0]}") for kind in kinds for row in rows]


# The tests' calls to their simulators on loopback, through one client: each new httpx client
# (`httpx.get` makes one per call) loads the whole CA bundle into a TLS context, ~30 ms of CPU
# that plain HTTP never uses, and a test asks its simulator several times.
_LOOPBACK = httpx.Client()


class Sim:
    """A running simulator and its evidence endpoints."""

    def __init__(self, url: str) -> None:
        self.url = url

    @property
    def upstream(self) -> str:
        """The name its breaker has in the ledger (its host and port)."""
        return self.url.removeprefix("http://")

    def charges(self) -> list[dict[str, Any]]:
        charges: list[dict[str, Any]] = _LOOPBACK.get(f"{self.url}/_sim/charges").json()["charges"]
        return charges

    def bill(self) -> int:
        """What every charge costs, in micro-units: the simulator's own sum of each charge's
        rounded cost (`GET /_sim/bill`)."""
        return int(_LOOPBACK.get(f"{self.url}/_sim/bill").json()["cost"])

    def stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = _LOOPBACK.get(f"{self.url}/_sim/stats").json()
        return stats

    def creates(self) -> int:
        return int(self.stats()["requests"].get("create", 0))

    def charged_per_post(self) -> Counter[str]:
        return Counter(pid for charge in self.charges() for pid in charge["post_ids"])

    def fired(self) -> list[dict[str, Any]]:
        """The faults that fired, in order, each with what it hit (`simulator.faults`)."""
        fired: list[dict[str, Any]] = _LOOPBACK.get(f"{self.url}/_sim/faults").json()["fired"]
        return fired

    def set_faults(self, rules: list[dict[str, Any]], seed: int = 0) -> None:
        """A new fault plan in force (its counts start again); `[]`: no more faults."""
        plan = {"seed": seed, "rules": rules}
        _LOOPBACK.post(f"{self.url}/_sim/faults", json=plan).raise_for_status()

    def clear_faults(self) -> None:
        self.set_faults([])

    def make_message_batch(self, custom_ids: list[str], key: str = "fake-key-anyone") -> str:
        """A Message Batch of these requests (one short post each) made straight on the
        simulator, as someone else on the same account would; its id."""
        from postledger.analysis import load_analysis
        from postledger.upstreams.anthropic_protocol import messages_body

        params = messages_body("sim-analyst-1", load_analysis(None), [("p1", "a post")], 1024)
        answer = _LOOPBACK.post(
            f"{self.url}/v1/messages/batches",
            json={"requests": [{"custom_id": c, "params": params} for c in custom_ids]},
            headers={"x-api-key": key, "anthropic-version": "2023-06-01"},
        )
        assert answer.status_code == 200, answer.text
        made: str = answer.json()["id"]
        return made

    def hold(self, held: bool) -> None:
        """No task ends while held; released, each ends one latency later."""
        _LOOPBACK.post(f"{self.url}/_sim/hold", json={"held": held}).raise_for_status()


class _Simulators:
    """The simulator processes of this pytest process, each reused test after test: a start
    costs a second of CPU, a reset (`POST /_sim/reset`) next to nothing. What a reset cannot
    change (the API key, the create delay) picks the process; a scenario file gets a new one."""

    def __init__(self) -> None:
        self._idle: dict[tuple[str | None, float], list[str]] = {}
        self._running = contextlib.ExitStack()

    @contextlib.contextmanager
    def lease(
        self,
        *,
        latency: float = 1.0,
        seed: int = 0,
        faults: str | None = None,
        honour_keys: bool = True,
        api_key: str | None = None,
        create_delay: float = 0.0,
        scenario: str | None = None,
    ) -> Iterator[str]:
        from simulator import child

        if scenario is not None:
            options = {"latency": latency, "seed": seed, "faults": faults, "scenario": scenario}
            with child.simulator_process(
                **options,
                honour_keys=honour_keys,
                api_key=api_key,
                create_delay=create_delay,
            ) as url:
                yield url
            return
        kind = (api_key, create_delay)
        url = self._take(kind)
        try:
            reset = {"latency": latency, "seed": seed, "honour_keys": honour_keys, "faults": faults}
            answer = _LOOPBACK.post(f"{url}/_sim/reset", json=reset, timeout=30)
            if answer.status_code == 422:
                raise RuntimeError(f"the simulator did not start (it said {answer.text!r})")
            answer.raise_for_status()
            yield url
        finally:
            self._idle.setdefault(kind, []).append(url)

    def _take(self, kind: tuple[str | None, float]) -> str:
        from simulator import child

        while self._idle.get(kind):
            url = self._idle[kind].pop()
            with contextlib.suppress(httpx.HTTPError):
                if _LOOPBACK.get(f"{url}/_sim/stats", timeout=5).is_success:
                    return url  # (one that died is left to the session's end)
        api_key, create_delay = kind
        return self._running.enter_context(
            child.simulator_process(api_key=api_key, create_delay=create_delay)
        )

    def close(self) -> None:
        self._idle.clear()
        self._running.close()


SIMULATORS = _Simulators()


def simulator_process(**options: Any) -> contextlib.AbstractContextManager[str]:
    """A simulator as if just started with `options` (those of
    `simulator.child.simulator_process`); yields its base URL. One of this process's
    simulators, reset (see `_Simulators`), in a process group of its own."""
    return SIMULATORS.lease(**options)


def start_sim(
    monkeypatch: Any, kind: str = "task_api", **options: Any
) -> Generator[Sim, None, None]:
    """The simulator, and the settings that point at it (a generator, for fixtures to `yield
    from`). `kind` is the upstream's protocol: the task API, or the simulator's OpenAI face
    (`openai_chat`, `openai_batch`: the base URL with its /v1, as the openai SDK takes it) or
    its Anthropic face (`anthropic_messages`: the root, as the anthropic SDK takes it).
    As it honours idempotency keys (unless told not to), the upstream is configured as
    honouring them, as a user would."""
    from postledger.settings import UpstreamKind
    from postledger.upstreams import base_url_of

    with simulator_process(**options) as url:
        monkeypatch.setenv("POSTLEDGER_UPSTREAM_URL", base_url_of(UpstreamKind(kind), url))
        monkeypatch.setenv("POSTLEDGER_UPSTREAM_KIND", kind)
        honours = str(options.get("honour_keys", True)).lower()
        monkeypatch.setenv("POSTLEDGER_UPSTREAM_IDEMPOTENT", honours)
        yield Sim(url)


def fast_timings(monkeypatch: Any, **settings: str) -> None:
    """Short request back-off and rate-limit wait for tests, plus any other `POSTLEDGER_*`
    setting given by its field name (`poll_wait="0.5"`)."""
    values = {"request_backoff": "0.05", "rate_limit_wait": "1", **settings}
    for name, value in values.items():
        monkeypatch.setenv(f"POSTLEDGER_{name.upper()}", value)
