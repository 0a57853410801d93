"""The budget's per-batch estimate learns per model from the ledger's confirmed sends (SQLite
here, PostgreSQL in the suite's second pass): each send books what it asked, and a model that
answers longer than the assumed 60 tokens a post is estimated at what it answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from postledger.batches.posts import Post
from postledger.defaults import Price
from postledger.guards.charges import BudgetHeld
from postledger.guards.estimates import ASSUMED, HEADROOM, Pricing
from postledger.guards.spend import cost_of
from postledger.guards.usage import Usage
from postledger.ledger import Ledger
from postledger.record.models import SpendState
from postledger.settings import Settings, UpstreamKind
from tests.support.ledgers import asked, settle_next_batch, started

MONTH, NEXT = "2026-10", "2026-11"
PRICE = Price(input=150_000, output=600_000)
POSTS_A_BATCH = 5
TEXT = "why is the app slow after the update? " * 3  # 114 characters


def sync(ledger: Ledger, month: str, n: int) -> None:
    posts = [Post(f"{month[-2:]}p{i:03d}", TEXT, i + 1) for i in range(n)]
    ledger.sync_posts(month, posts, model="m", analysis=asked())
    ledger.plan(month, max_posts=POSTS_A_BATCH, max_chars=10_000)


def settings_for(model: str) -> Settings:
    return Settings(
        model=model,
        prices={model: PRICE},
        upstream_kind=UpstreamKind.OPENAI_BATCH,
        prompt="p",
    )


def verbose_usage(pricing: Pricing) -> dict[str, int]:
    """A send's usage from a model that answers 150 tokens a post and reads 3 characters a
    token: well past what the assumed constants expect."""
    chars = pricing.asked_chars([TEXT] * POSTS_A_BATCH)
    return {"prompt_tokens": chars // 3, "completion_tokens": 150 * POSTS_A_BATCH}


def test_each_send_books_what_it_asked_and_the_estimate_learns_from_it(ledger_url: str) -> None:
    ledger = Ledger(ledger_url)
    settings = settings_for("verbose-1")
    sync(ledger, MONTH, 4 * POSTS_A_BATCH)
    first = ledger.pricing(settings)
    assert first.rates == ASSUMED and first.model == "verbose-1"
    assert first.kind == "openai_batch" and first.price is not None
    assert first.price.discount() == 50  # the kind's discount, on the price that is booked
    usage = verbose_usage(first)
    for _ in range(3):
        settle_next_batch(ledger, MONTH, usage, pricing=first)

    rows = ledger.spend(MONTH)
    assert [r.state for r in rows] == [SpendState.CONFIRMED] * 3
    for row in rows:
        assert (row.model, row.kind) == ("verbose-1", "openai_batch")
        assert row.asked_posts == POSTS_A_BATCH
        assert row.asked_chars == len(first.prompt) + POSTS_A_BATCH * len(TEXT)
        # At the assumed 60 tokens a post, each of these estimates fell short of its cost.
        assert row.estimated_cost is not None and row.cost is not None
        assert row.estimated_cost < row.cost

    learned = ledger.pricing(settings)
    assert learned.rates.learned_from == 3
    assert learned.rates.output_per_post == 150 * HEADROOM
    cost = cost_of(first.price, Usage(usage["prompt_tokens"], usage["completion_tokens"]))
    estimated = learned.estimate([TEXT] * POSTS_A_BATCH)
    assert estimated is not None and cost <= estimated <= cost * 3 // 2

    # The next send is booked at the learned estimate, and its cost is within it.
    settle_next_batch(ledger, MONTH, usage, pricing=learned)
    last = ledger.spend(MONTH)[-1]
    assert last.estimated_cost == estimated and last.cost == cost

    # Another model learns nothing from these: its tokens are its own.
    assert ledger.pricing(settings_for("terse-1")).rates == ASSUMED
    ledger.close()


def test_a_learned_estimate_holds_the_batch_the_constants_would_have_let_past_the_budget(
    ledger_url: str,
) -> None:
    """With the constants, the budget would let a verbose model's batch start and then be
    crossed by its cost; learned, the same budget holds it before anything is paid."""
    ledger = Ledger(ledger_url)
    settings = settings_for("verbose-1")
    sync(ledger, MONTH, 3 * POSTS_A_BATCH)
    assumed = ledger.pricing(settings)
    usage = verbose_usage(assumed)
    for _ in range(3):
        settle_next_batch(ledger, MONTH, usage, pricing=assumed)
    assert assumed.price is not None
    cost = cost_of(assumed.price, Usage(usage["prompt_tokens"], usage["completion_tokens"]))

    sync(ledger, NEXT, POSTS_A_BATCH)
    (batch_id,) = ledger.next_to_start(NEXT, 1)
    budget = cost  # room for one batch at its real cost, and not a micro-unit more
    at_constants = assumed.estimate([TEXT] * POSTS_A_BATCH)
    assert at_constants is not None and at_constants < budget - 1  # the constants would send it

    held = ledger.mark_running(batch_id, pricing=ledger.pricing(settings), max_cost=budget - 1)
    assert isinstance(held, BudgetHeld)
    assert ledger.spend(NEXT) == []  # nothing booked, nothing paid
    started(ledger.mark_running(batch_id, pricing=ledger.pricing(settings), max_cost=10**9))
    ledger.close()


def test_what_a_resubmission_may_cost_is_estimated_at_the_learned_rates(ledger_url: str) -> None:
    """The recovery plan's estimate (what a person approving a resubmission that may be
    charged twice is shown) is made as a run would book the resubmission."""
    from postledger.recovery.steps import RecoveryAction, recovery_plan

    ledger = Ledger(ledger_url)
    settings = settings_for("verbose-1")
    sync(ledger, MONTH, 4 * POSTS_A_BATCH)
    assumed = ledger.pricing(settings)
    for _ in range(3):
        settle_next_batch(ledger, MONTH, verbose_usage(assumed), pricing=assumed)
    (batch_id,) = ledger.next_to_start(MONTH, 1)
    started(ledger.mark_running(batch_id, pricing=ledger.pricing(settings)))  # no id saved

    with ledger.plain() as reader:
        (step,) = recovery_plan(reader, MONTH, settings).steps
    assert (step.batch_id, step.action) == (batch_id, RecoveryAction.RESUBMIT)
    learned = ledger.pricing(settings).estimate([TEXT] * POSTS_A_BATCH)
    at_constants = assumed.estimate([TEXT] * POSTS_A_BATCH)
    assert at_constants is not None and learned is not None and learned > 2 * at_constants
    assert step.estimated_cost == learned
    ledger.close()


def test_a_trip_whose_ledger_cannot_be_read_estimates_at_the_assumed_rates(
    tmp_path: Path,
) -> None:
    """The rates may first be asked for after a paid call (a gateway's retries booked with its
    id): a ledger that cannot be read then must not cost what the call taught us."""
    import logging

    from postledger.trip import Trip

    path = tmp_path / "ledger.db"
    ledger = Ledger(f"sqlite:///{path}")
    settings = settings_for("verbose-1")
    no_calls: Any = None  # the trip calls no upstream here
    trip = Trip(ledger, settings, no_calls, logging.getLogger("test"))
    ledger.engine.dispose()
    path.write_bytes(b"this is not a database" * 512)  # every read of it now fails
    assert trip.pricing.rates == ASSUMED
    assert trip.pricing.price == settings.price()
    ledger.close()
