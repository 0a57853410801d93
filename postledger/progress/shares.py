"""Who a batch's money was spent on: each paid batch's cost shared over the posts it sent, in
integer micro-units that add up exactly — to the batch's cost, and so to the month's spend.

A batch is one charge for many posts; a post's share is by its characters, which is what the
upstream charges by (input tokens). Dividing with `//` loses up to a micro-unit per post, and
a column that sums to less than the bill is a report nobody trusts: the largest-remainder
method gives the lost micro-units back, one each, to the posts that lost the most.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from postledger.record.kinds import SpendState


class PaidRow(Protocol):
    """A row of the month's spend (`rows.Charge`, or the table's own record)."""

    @property
    def batch_id(self) -> str: ...
    @property
    def state(self) -> SpendState: ...
    @property
    def cost(self) -> int | None: ...
    @property
    def estimated_cost(self) -> int | None: ...


class SentBatch(Protocol):
    """A batch and what it sent (`rows.SentRequest`, or the table's own record)."""

    @property
    def batch_id(self) -> str: ...
    @property
    def request(self) -> list[list[str]] | None: ...
    @property
    def post_ids(self) -> list[str]: ...


def largest_remainder(amount: int, weights: Sequence[int]) -> list[int]:
    """`amount` shared in proportion to `weights`: whole numbers that sum to `amount` exactly,
    each the proportional share rounded down or up (so within 1 of it). Ties go to the earlier
    weight, so the same input always gives the same shares. All-zero weights share equally."""
    if amount < 0 or any(w < 0 for w in weights):
        raise ValueError("an amount and its weights cannot be negative")
    if not weights:
        if amount:
            raise ValueError(f"nobody to share {amount} with")
        return []
    total = sum(weights)
    if total == 0:
        weights, total = [1] * len(weights), len(weights)
    floors = [amount * w // total for w in weights]
    left = amount - sum(floors)  # < len(weights): each floor lost less than 1
    # The largest remainders first; among equal ones, the earlier post.
    order = sorted(range(len(weights)), key=lambda i: (-(amount * weights[i] % total), i))
    for i in order[:left]:
        floors[i] += 1
    return floors


@dataclass
class Shares:
    """Each post's share of the month's spend, in micro-units: `confirmed` (charged, output
    received) and `wasted` (charged, output unusable). Spend still `possible` (sent, outcome
    unknown) is nobody's yet, and refunded submissions cost nothing."""

    confirmed: Counter[str] = field(default_factory=Counter)
    wasted: Counter[str] = field(default_factory=Counter)


def month_shares(spend: Iterable[PaidRow], batches: Iterable[SentBatch]) -> Shares:
    """The month's confirmed and wasted spend shared over the posts of each batch's request by
    their characters: each batch's shares sum to its cost, the month's to its spend (as
    `LedgerReads.spend_totals` counts it)."""
    paid: dict[SpendState, Counter[str]] = {
        SpendState.CONFIRMED: Counter(),
        SpendState.WASTED: Counter(),
    }
    for row in spend:
        if row.state in paid:
            # As the month's totals count it: the cost from the usage, else the estimate.
            amount = row.cost if row.cost is not None else (row.estimated_cost or 0)
            paid[row.state][row.batch_id] += amount
    shares = Shares()
    for batch in batches:
        sent = _sent(batch)
        weights = [chars for _, chars in sent]
        for state, into in (
            (SpendState.CONFIRMED, shares.confirmed),
            (SpendState.WASTED, shares.wasted),
        ):
            if cost := paid[state].pop(batch.batch_id, 0):
                for (post_id, _), share in zip(sent, largest_remainder(cost, weights), strict=True):
                    into[post_id] += share
    # Every row is a batch's: a charge left unshared would make the columns lie about the bill.
    left = sorted({batch_id for costs in paid.values() for batch_id, cost in costs.items() if cost})
    if left:
        raise ValueError(f"the ledger holds spend of batches it does not know: {left}")
    return shares


def _sent(batch: SentBatch) -> list[tuple[str, int]]:
    """The posts a paid batch sent, with their characters: its request as kept before the
    first send. A batch charged without one (a ledger older than the request) is shared
    equally over the posts it lists."""
    if batch.request:
        return [(post_id, len(text)) for post_id, text in batch.request]
    return [(post_id, 0) for post_id in batch.post_ids]
