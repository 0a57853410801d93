"""The ledger's confirmed spend is the simulator's bill, to the micro-unit, on every kind, with
the prompt cache in play and not: each answer's usage is read by class of token (fresh input,
read from the cache, written to it, output) and priced at its class's rate, with a Batch API's
discount taken off, as the simulator bills it (`simulator.billing`, its own table).

Long instructions (over the simulator's 1 024-token minimum) are the stable prefix each batch
starts with: OpenAI's faces cache them on their own, Anthropic's because postledger marks them
with `cache_control`. Short ones are never cached."""

from __future__ import annotations

from pathlib import Path

import pytest

from postledger.ledger import Ledger
from postledger.record.models import SpendState
from tests.support.months import MONTH
from tests.support.months import posts_file as write_posts
from tests.support.simulators import UPSTREAM_KINDS, Sim

pytestmark = pytest.mark.usefixtures("fast_retries")

# ~1 500 of the simulator's tokens (4 characters each): past every provider's minimum.
LONG = "Classify each post by its topic and tone. " + " ".join(
    f"Rule {n}: a post that names feature {n} belongs to category {n % 7}." for n in range(90)
)
SHORT = "Classify each post by its topic and tone."


@pytest.mark.on_postgres  # the spend booked and summed
@pytest.mark.parametrize("cached", [True, False], ids=["long-instructions", "short"])
@pytest.mark.parametrize("kind", UPSTREAM_KINDS)
def test_confirmed_spend_is_the_simulators_bill_to_the_micro_unit(
    prefect_harness: None,
    sim: Sim,
    ledger: Ledger,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
    cached: bool,
) -> None:
    from flows.monthly import monthly_posts

    assert len(LONG) > 4 * 1_024 + 400 and len(SHORT) < 4 * 1_024
    monkeypatch.setenv("POSTLEDGER_PROMPT", LONG if cached else SHORT)
    path = write_posts(tmp_path / f"{MONTH}.jsonl", 100, ids="s{:03d}", text="Notes vanish {}.")
    monthly_posts(month=MONTH, posts_path=str(path))

    rows = ledger.spend(MONTH)
    assert len(rows) == 4 and {r.state for r in rows} == {SpendState.CONFIRMED}  # a row a batch
    assert sum(r.cost or 0 for r in rows) == sim.bill()
    charges = sim.charges()
    for tokens in ("input_tokens", "cached_input_tokens", "cache_write_tokens", "output_tokens"):
        assert sum(getattr(r, tokens) or 0 for r in rows) == sum(c[tokens] for c in charges)
    read = sum(r.cached_input_tokens or 0 for r in rows)
    written = sum(r.cache_write_tokens or 0 for r in rows)
    if not cached:
        assert read == written == 0
    else:
        assert read > 0  # a later batch read the instructions from the cache
        assert (written > 0) is kind.startswith("anthropic")  # OpenAI bills no cache write
    # Each estimate, made before its call, did not fall short of what was charged.
    assert all((r.estimated_cost or 0) >= (r.cost or 0) for r in rows)
