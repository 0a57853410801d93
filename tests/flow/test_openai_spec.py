"""The OpenAI adapters speak OpenAI's API as OpenAI documents it, and the simulator answers as
it documents: a whole month of each OpenAI kind goes through a proxy that checks every request,
every response and every Batch API file line against OpenAI's OpenAPI document
(`tests/support/openai_spec.py`)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from postledger.ledger import Ledger
from postledger.record.models import PostStatus
from tests.support.months import MONTH, posts_file
from tests.support.openai_spec import checked_by_openai_spec
from tests.support.simulators import Sim

pytestmark = pytest.mark.usefixtures("fast_retries")
SIMULATOR = {"latency": 0.05}  # the `faulty` fixture's

# What a month makes each kind call, at least once.
CALLED = {
    "openai_chat": {"POST /v1/chat/completions"},
    "openai_batch": {
        "POST /v1/files",
        "POST /v1/batches",
        "GET /v1/batches/{id}",
        "GET /v1/files/{id}/content",
    },
}


@pytest.mark.parametrize("kind", sorted(CALLED))
@pytest.mark.parametrize("faulty", [None], indirect=True)
def test_a_month_follows_openais_openapi_document(
    prefect_harness: None,
    faulty: Sim,
    ledger: Ledger,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
) -> None:
    from flows.monthly import monthly_posts

    posts = posts_file(tmp_path / f"{MONTH}.jsonl", 60)  # three batches of at most 25
    with checked_by_openai_spec(faulty.url) as proxy:
        monkeypatch.setenv("POSTLEDGER_UPSTREAM_URL", f"{proxy.url}/v1")
        monthly_posts(month=MONTH, posts_path=str(posts))

    assert {p.status for p in ledger.posts(MONTH)} == {PostStatus.COMPLETED}
    assert proxy.problems == [], "\n".join(proxy.problems)
    assert CALLED[kind] <= set(proxy.operations), proxy.operations
    if kind == "openai_batch":  # each ledger batch's request line, then its answer's line
        assert proxy.lines == 2 * 3


def test_the_proxy_reports_what_breaks_the_document(sim: Sim) -> None:
    """A check that could not fail would prove nothing: a chat request without messages, and
    an answer the document does not describe (a batch that does not exist), are reported."""
    with checked_by_openai_spec(sim.url) as proxy, httpx.Client(base_url=f"{proxy.url}/v1") as api:
        api.post("/chat/completions", json={"model": "sim-analyst-1"})
        api.get("/batches/batch_nothing")
    assert len(proxy.problems) >= 2, proxy.problems
    assert any(
        "POST /v1/chat/completions: request" in p and "messages" in p for p in proxy.problems
    )
    assert any(p.startswith("GET /v1/batches/{id}: response 404") for p in proxy.problems)
