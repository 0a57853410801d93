"""Ledgers read, set up or moved by hand: every row as text or as tuples, a ledger of an older
schema, one batch through the ledger alone, what the ledger sends, and the counts of posts by
state that every ledger must keep (checked at the end of every test that has one)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from tests.support.months import MONTH

if TYPE_CHECKING:
    from postledger.analysis import Analysis
    from postledger.defaults import Price, PriceBook
    from postledger.guards.estimates import Pricing


def asked(instructions: str = "p") -> Analysis:
    """The built-in analysis with `instructions` as its instructions: what a test that once
    passed `prompt="p"` to the ledger now passes as `analysis=`."""
    from postledger.analysis import load_analysis

    return load_analysis(None, instructions=instructions)


def priced(price: Price | None, instructions: str = "p", model: str = "m") -> Pricing:
    """What a test's sends are priced by: `price`, with `instructions`, at the assumed rates."""
    from postledger.guards.estimates import Pricing

    return Pricing(model, "task_api", price, instructions)


def billed(price: Price, model: str = "m", kind: str = "task_api") -> PriceBook:
    """What a test's sends are billed by: `price` for `model` (as `priced` names it), with
    the default Batch API discount on a Batch API kind."""
    from postledger.defaults import PriceBook
    from postledger.settings import BATCH_DISCOUNT_PERCENT

    return PriceBook({model: price}, BATCH_DISCOUNT_PERCENT, model, kind)


def recount_posts(session: Any) -> None:
    """After a test wrote posts into the ledger directly (as no code of postledger does: the
    state machine moves them), the kept counts made those of the posts, as migration 0012
    first made them."""
    from sqlalchemy import text

    session.execute(text("DELETE FROM post_counts"))
    session.execute(
        text(
            "INSERT INTO post_counts (month, status, posts) "
            "SELECT month, status, count(*) FROM posts GROUP BY month, status"
        )
    )
    session.commit()


def assert_post_counts_kept(url: str) -> None:
    """The counts of posts by state that the state machine keeps (`post_counts`) are those of
    the posts, for every month of the ledger at `url`. Checked at the end of every test that
    has a ledger: whatever it did (crashes, spills, recoveries, bisections), the counts hold.
    A ledger that is not there, cannot be read or is of an older schema is not checked."""
    from postledger.record.migrate import SchemaMismatch
    from postledger.record.plain import LedgerUnreadable, read_only

    try:
        with read_only(url) as reader:
            if reader is None:
                return
            kept = reader.rows("SELECT month, status, posts FROM post_counts WHERE posts <> 0")
            counted = reader.rows("SELECT month, status, count(*) FROM posts GROUP BY 1, 2")
    except (SchemaMismatch, LedgerUnreadable):
        return
    assert sorted(kept) == sorted(counted), f"kept {sorted(kept)}, counted {sorted(counted)}"


def ledger_text(url: str) -> str:
    """Every row of every table of a ledger, as text: to search it for what must not be there."""
    from sqlalchemy import create_engine, inspect, text

    engine = create_engine(url)
    rows = []
    with engine.connect() as connection:
        for table in inspect(connection).get_table_names():
            rows += [str(row) for row in connection.execute(text(f'SELECT * FROM "{table}"'))]
    engine.dispose()
    return "\n".join(rows)


def ledger_snapshot(ledger: Any) -> dict[str, list[tuple[object, ...]]]:
    """The rows of the posts, batches and events tables, in a fixed order."""
    from sqlalchemy import text

    with ledger.engine.connect() as conn:
        return {
            table: [
                tuple(row) for row in conn.execute(text(f"SELECT * FROM {table} ORDER BY 1, 2"))
            ]
            for table in ("posts", "batches", "events")
        }


def ledger_at_baseline(
    url: str,
    *,
    post_id: str = "p1",
    fingerprint: str = "f" * 64,
    status: str = "COMPLETED",
    result: str | None = '{"category": "praise"}',
) -> None:
    """A ledger as issues 2–3 left it (schema revision 0001), holding one post of 2026-10
    whose text is 'hello'."""
    from sqlalchemy import text

    from postledger.record.db import make_engine
    from postledger.record.migrate import upgrade

    engine = make_engine(url)
    upgrade(engine, "0001")
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO posts (month, post_id, position, text, fingerprint, status, "
                "attempts, requeues, result, created_at, updated_at) VALUES ('2026-10', :id, 0, "
                "'hello', :fp, :status, 1, 0, :result, :at, :at)"
            ),
            {
                "id": post_id,
                "fp": fingerprint,
                "status": status,
                "result": result,
                "at": "2026-10-02 10:00:00+00",
            },
        )
    engine.dispose()


def settle_next_batch(
    ledger: Any,
    month: str = MONTH,
    usage: dict[str, int] | None = None,
    pricing: Pricing | None = None,
) -> Any:
    """The month's next planned batch through the ledger as the batch task run moves it (intent,
    task id, saved output, validated and applied), with the simulator's model writing a valid
    output and no upstream called: its posts end `completed`. Returns the posts it sent. With
    `pricing`, its charge is quoted, and settled at the price."""
    from postledger.analysis import load_analysis
    from postledger.batches.output import check_output
    from postledger.failures.policy import after_output
    from postledger.settings import Limits
    from simulator.model import write_output

    (batch_id,) = ledger.next_to_start(month, 1, set())
    _, sent = started(ledger.mark_running(batch_id, pricing=pricing))
    ledger.record_task_id(batch_id, "task_1")
    raw = write_output([(p.post_id, p.text) for p in sent])
    price = pricing.price if pricing is not None else None
    prices = billed(price, pricing.model, pricing.kind) if pricing and price else None
    ledger.save_output(batch_id, raw, usage or {"input_tokens": 1, "output_tokens": 2}, prices)
    check = check_output(raw, ledger.batch(batch_id).post_ids, load_analysis(None))
    decision = after_output(ledger.batch(batch_id), ledger.posts_of(batch_id), check, Limits())
    ledger.apply(batch_id, decision, check)
    return sent


WRITES = re.compile(r"^\s*(INSERT|UPDATE|DELETE)\b", re.IGNORECASE)


@contextlib.contextmanager
def statements(ledger: Any) -> Iterator[list[tuple[str, Any]]]:
    """Every statement the ledger's engine sends while the block runs, with its parameters."""
    from sqlalchemy import event

    seen: list[tuple[str, Any]] = []

    def record(_conn: Any, _cursor: Any, sql: str, parameters: Any, *_: Any) -> None:
        seen.append((sql, parameters))

    event.listen(ledger.engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(ledger.engine, "before_cursor_execute", record)


def started(marked: Any) -> Any:
    """What `Ledger.mark_running` returned, asserted to be a start (not held by the breaker
    or the budget), for a test that sends the batch next."""
    from postledger.ledger import Started

    assert isinstance(marked, Started), f"the batch was held: {marked}"
    return marked
