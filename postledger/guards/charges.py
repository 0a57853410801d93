"""The spend side of a batch's transactions: each paid submission, as the ledger knows it.

Called inside `Ledger` write transactions (the month's lock held), so a charge and the batch
change that explains it are committed together.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlmodel import Session, col, select

from postledger.defaults import PriceBook
from postledger.guards.estimates import Pricing
from postledger.guards.spend import cost_of, money
from postledger.guards.usage import usage_of
from postledger.record.db import insert_many
from postledger.record.figures import SpendGroup, summed
from postledger.record.in_list import any_of
from postledger.record.models import (
    Answer,
    ApprovalRecord,
    BatchRecord,
    Charge,
    EntityKind,
    FailureKind,
    Question,
    SpendRecord,
    SpendState,
    utcnow,
)
from postledger.record.states import Transitions

# Outcomes after which a charge bought nothing usable: the whole output was unusable, or the
# task that was made (and paid) failed or was lost upstream.
WASTING = frozenset(
    {FailureKind.BATCH_INVALID, FailureKind.UPSTREAM_FAILED, FailureKind.TASK_UNKNOWN}
)


@dataclass(frozen=True)
class BudgetHeld:
    """The batch would take the month past its budget; it stays queued and nothing was paid.
    A value, not an error: holding a batch is the budget doing its job."""

    reason: str


def committed(session: Session, month: str) -> int:
    """What the month has spent or may have spent: settled costs, and estimates where the
    cost is not known (yet)."""
    total = 0
    for row in session.exec(select(SpendRecord).where(SpendRecord.month == month)):
        if row.state is not SpendState.REFUNDED:
            total += row.cost if row.cost is not None else (row.estimated_cost or 0)
    return total


def budget_holds(
    session: Session, month: str, estimated: int | None, max_cost: int | None
) -> BudgetHeld | None:
    """Why starting a batch of cost `estimated` may not happen now: it could cross `max_cost`,
    and no person said go on for this month. None when it may (or there is no budget)."""
    if max_cost is None:
        return None
    spent = committed(session, month)
    if spent + (estimated or 0) <= max_cost:
        return None
    approved = session.exec(
        select(ApprovalRecord.id).where(
            ApprovalRecord.month == month,
            ApprovalRecord.kind == Question.BUDGET,
            ApprovalRecord.answer == Answer.CONTINUE,
        )
    ).first()
    if approved is not None:
        return None
    return BudgetHeld(
        f"{month} has committed {money(spent)} of its budget {money(max_cost)}; the next "
        f"batch (about {money(estimated or 0)}) would cross it"
    )


@dataclass(frozen=True)
class Quote:
    """What a send may cost, worked out before the call (None: no price known), and what it
    asks: the model, the kind, its posts and characters (None: not known, as for a charge
    read back from a spill file). Booked on each of the send's possible charges."""

    estimated: int | None
    model: str | None = None
    kind: str | None = None
    posts: int | None = None
    chars: int | None = None

    def values(self) -> dict[str, Any]:
        """The spend row's columns this quote fills."""
        return {
            "estimated_cost": self.estimated,
            "model": self.model,
            "kind": self.kind,
            "asked_posts": self.posts,
            "asked_chars": self.chars,
        }


NO_QUOTE = Quote(None)


def quote(pricing: Pricing | None, texts: Sequence[str]) -> Quote:
    """A send of these posts' `texts`, quoted by `pricing` (None: nothing known of it)."""
    if pricing is None:
        return NO_QUOTE
    return Quote(
        pricing.estimate(texts),
        pricing.model,
        pricing.kind,
        len(texts),
        pricing.asked_chars(texts),
    )


def quote_of(batch: BatchRecord, pricing: Pricing | None) -> Quote:
    """One send of the batch's request, quoted."""
    return quote(pricing, [text for _, text in batch.request or []])


def book_send(session: Session, batch: BatchRecord, *, first: bool, quoted: Quote) -> None:
    """A send on the books before the call (R3); a `first` send (a new attempt) written down
    as a possible charge at its quote (R51), once the budget let it (R52)."""
    _count_send(batch)
    if first:
        session.add(
            SpendRecord(
                month=batch.month, batch_id=batch.batch_id, send=batch.sends, **quoted.values()
            )
        )


def _count_send(batch: BatchRecord) -> None:
    """One more send of the batch, no longer waiting, and possibly charged from now on."""
    batch.sends += 1
    batch.not_before = None
    if batch.charge is Charge.NONE:
        batch.charge = Charge.POSSIBLE


def _possible(batch: BatchRecord, quoted: Quote) -> SpendRecord:
    """A possible charge of the batch's current send, at its quote."""
    return SpendRecord(
        month=batch.month, batch_id=batch.batch_id, send=batch.sends, **quoted.values()
    )


def send_counted(batch: BatchRecord, *, first: bool, quoted: Quote) -> dict[str, Any] | None:
    """`book_send` for a chunk of batches marked together: the send counted on the batch,
    and the spend row a `first` send books returned, for `write_spend` to insert with the
    chunk's others (an ORM record per row cost more than the rest of the marking)."""
    _count_send(batch)
    if not first:
        return None
    now = utcnow()
    return {
        "month": batch.month,
        "batch_id": batch.batch_id,
        "send": batch.sends,
        "state": SpendState.POSSIBLE,
        **quoted.values(),
        "input_tokens": None,
        "cached_input_tokens": None,
        "cache_write_tokens": None,
        "output_tokens": None,
        "cost": None,
        "at": now,
        "updated_at": now,
    }


def write_spend(session: Session, rows: list[dict[str, Any]]) -> None:
    """The spend rows `send_counted` returned, inserted in their order; the list emptied."""
    insert_many(session.connection(), SpendRecord.__table__, rows)  # type: ignore[attr-defined]
    rows.clear()


def book_gateway_retries(
    session: Session, moves: Transitions, batch: BatchRecord, retries: int, *, quoted: Quote
) -> None:
    """A gateway's own retries of the batch's request: each may have been charged, so each is
    a possible charge of the current send (R42), at the batch's quote."""
    batch.gateway_retries += retries
    for _ in range(retries):
        session.add(
            SpendRecord(
                month=batch.month, batch_id=batch.batch_id, send=batch.sends, **quoted.values()
            )
        )
    session.add(batch)
    moves.noted(
        EntityKind.BATCH,
        batch.batch_id,
        batch.status,
        f"the gateway retried the request {retries}x on its own: possibly charged again",
    )


@dataclass(frozen=True)
class GatewayRetries:
    """What a gateway said it did on its own with one create: `count` extra attempts, each a
    possible charge at the batch's quote (by `pricing`)."""

    count: int
    pricing: Pricing | None

    def book(self, session: Session, moves: Transitions, batch: BatchRecord) -> None:
        if self.count > 0:
            quoted = quote_of(batch, self.pricing)
            book_gateway_retries(session, moves, batch, self.count, quoted=quoted)


def settle(
    session: Session, batch_id: str, usage: dict[str, Any] | None, prices: PriceBook | None
) -> None:
    """Output received: the batch's open charge is confirmed, with its usage and its cost at
    the price of the model and kind it was sent to (`prices`; None: no price known)."""
    row = session.exec(
        select(SpendRecord)
        .where(SpendRecord.batch_id == batch_id, SpendRecord.state == SpendState.POSSIBLE)
        # The send's own row, not a gateway's retry of it (written after it).
        .order_by(col(SpendRecord.send).desc(), col(SpendRecord.id))
    ).first()
    if row is not None:
        session.add(_confirmed(row, usage, prices))


def settle_all(
    session: Session,
    usages: Sequence[tuple[str, dict[str, Any] | None]],
    prices: PriceBook | None,
) -> None:
    """`settle` for a chunk of batches (batch id, usage) received together: their open
    charges read by one query."""
    rows = session.exec(
        select(SpendRecord)
        .where(
            any_of(session.connection(), SpendRecord.batch_id, [b for b, _ in usages]),
            SpendRecord.state == SpendState.POSSIBLE,
        )
        .order_by(col(SpendRecord.send).desc(), col(SpendRecord.id))
    )
    open_rows: dict[str, SpendRecord] = {}
    for found in rows:
        open_rows.setdefault(found.batch_id, found)  # as `settle` picks it
    for batch_id, usage in usages:
        if (row := open_rows.get(batch_id)) is not None:
            session.add(_confirmed(row, usage, prices))


def _confirmed(
    row: SpendRecord, usage: dict[str, Any] | None, prices: PriceBook | None
) -> SpendRecord:
    """A send's possible charge made confirmed, at the usage it reported if it told any,
    priced as a send of the model and kind its row names."""
    used = usage_of(usage)
    if used is not None:
        row.input_tokens, row.output_tokens = used.input, used.output
        row.cached_input_tokens, row.cache_write_tokens = used.cached_input, used.cache_write
        price = prices.price(row.model, row.kind) if prices is not None else None
        row.cost = cost_of(price, used) if price is not None else None
    row.state, row.updated_at = SpendState.CONFIRMED, utcnow()
    return row


def account(
    session: Session, batch: BatchRecord, *, nothing_charged: bool, kind: FailureKind | None
) -> None:
    """What a decision says about the batch's charges: given back (`nothing_charged`), or paid
    for nothing (a failure of a wasting `kind`)."""
    rows = list(session.exec(select(SpendRecord).where(SpendRecord.batch_id == batch.batch_id)))
    if nothing_charged:
        latest = max(rows, key=lambda r: r.send, default=None)
        if latest is not None and latest.state is SpendState.POSSIBLE:
            latest.state, latest.updated_at = SpendState.REFUNDED, utcnow()
            session.add(latest)
    elif kind in WASTING:
        for row in rows:
            paid = row.state is SpendState.CONFIRMED or (
                row.state is SpendState.POSSIBLE and batch.upstream_task_id is not None
            )
            if paid:
                row.state, row.updated_at = SpendState.WASTED, utcnow()
                session.add(row)


def spend_summary(rows: list[SpendRecord]) -> dict[str, int]:
    """`summed` of the rows themselves."""
    return summed(
        SpendGroup(
            row.state,
            row.cost if row.cost is not None else (row.estimated_cost or 0),
            row.estimated_cost or 0,
            1,
            row.input_tokens or 0,
            row.output_tokens or 0,
            row.cached_input_tokens or 0,
            row.cache_write_tokens or 0,
        )
        for row in rows
    )
