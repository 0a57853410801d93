"""A send is billed at the price of the model and kind it went to, which its spend row keeps,
whatever the run that settles it is configured for (SQLite here, PostgreSQL in the suite's
second pass). A month's sends may span runs configured differently: a chat month moved to
the Batch API, another model chosen, while batches of the first were still in flight."""

from __future__ import annotations

from sqlmodel import Session, col, update

from postledger.batches.posts import Post
from postledger.defaults import Price
from postledger.guards.estimates import Pricing
from postledger.guards.spend import cost_of
from postledger.guards.usage import Usage
from postledger.ledger import Ledger
from postledger.record.models import SpendRecord, SpendState
from postledger.settings import Settings, UpstreamKind
from tests.support.ledgers import asked, started

MONTH = "2026-10"
SMALL = Price(input=150_000, output=600_000)
LARGE = Price(input=2_500_000, output=10_000_000)
USAGE = {"prompt_tokens": 1_000, "completion_tokens": 300}
ON_CHAT = Settings(
    model="small-1",
    prices={"small-1": SMALL, "large-1": LARGE},
    upstream_kind=UpstreamKind.OPENAI_CHAT,
    prompt="p",
)


def send_one(ledger: Ledger, settings: Settings) -> str:
    """The month's next batch marked running as a run on `settings` sends it."""
    (batch_id,) = ledger.next_to_start(MONTH, 1, set())
    started(ledger.mark_running(batch_id, pricing=Pricing.of(settings)))
    ledger.record_task_id(batch_id, f"task_{batch_id[-2:]}")
    return batch_id


def cost(price: Price) -> int:
    return cost_of(price, Usage(USAGE["prompt_tokens"], USAGE["completion_tokens"]))


def confirmed_cost(ledger: Ledger, batch_id: str) -> int | None:
    (row,) = [r for r in ledger.spend(MONTH) if r.batch_id == batch_id]
    assert row.state is SpendState.CONFIRMED
    return row.cost


def test_each_send_is_billed_at_its_own_model_and_kind(ledger_url: str) -> None:
    ledger = Ledger(ledger_url)
    posts = [Post(f"p{i}", f"post {i}", i + 1) for i in range(4)]
    ledger.sync_posts(MONTH, posts, model="small-1", analysis=asked())
    ledger.plan(MONTH, max_posts=1, max_chars=10_000)
    on_batch = ON_CHAT.model_copy(update={"upstream_kind": UpstreamKind.OPENAI_BATCH})
    large = on_batch.model_copy(update={"model": "large-1"})

    chat = send_one(ledger, ON_CHAT)  # then the month moves to the Batch API
    batch = send_one(ledger, on_batch)  # then to another model
    other = send_one(ledger, large)
    for batch_id in (chat, batch, other):  # settled by a run on the last configuration
        ledger.save_output(batch_id, "[]", USAGE, large.price_book())

    assert confirmed_cost(ledger, chat) == cost(SMALL)  # full price: it went to the chat API
    assert confirmed_cost(ledger, batch) == cost(SMALL) // 2  # the Batch API's half
    assert confirmed_cost(ledger, other) == cost(LARGE) // 2
    # What the settling run would have billed each at, had it priced by its own settings.
    assert cost(LARGE) // 2 not in (confirmed_cost(ledger, chat), confirmed_cost(ledger, batch))


def test_a_send_that_names_no_model_is_billed_as_the_configured_one(ledger_url: str) -> None:
    """A spend row from before rows named their model and kind (migration 0017)."""
    ledger = Ledger(ledger_url)
    ledger.sync_posts(MONTH, [Post("p0", "post 0", 1)], model="small-1", analysis=asked())
    ledger.plan(MONTH, max_posts=1, max_chars=10_000)
    batch_id = send_one(ledger, ON_CHAT)
    with Session(ledger.engine) as session:
        session.exec(
            update(SpendRecord)
            .where(col(SpendRecord.batch_id) == batch_id)
            .values(model=None, kind=None)
        )
        session.commit()

    on_batch = ON_CHAT.model_copy(update={"upstream_kind": UpstreamKind.OPENAI_BATCH})
    ledger.save_output(batch_id, "[]", USAGE, on_batch.price_book())

    assert confirmed_cost(ledger, batch_id) == cost(SMALL) // 2


def test_a_send_of_a_model_the_table_no_longer_prices_has_no_cost(ledger_url: str) -> None:
    ledger = Ledger(ledger_url)
    ledger.sync_posts(MONTH, [Post("p0", "post 0", 1)], model="small-1", analysis=asked())
    ledger.plan(MONTH, max_posts=1, max_chars=10_000)
    batch_id = send_one(ledger, ON_CHAT)
    later = ON_CHAT.model_copy(update={"model": "large-1", "prices": {"large-1": LARGE}})

    ledger.save_output(batch_id, "[]", USAGE, later.price_book())

    # Not billed at another model's price: unknown, and said so (the budget counts its estimate).
    assert confirmed_cost(ledger, batch_id) is None
