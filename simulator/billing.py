"""What the simulator bills, in money: its own price table, the cost of one request, and the
charge log's entries (`Charge`).

The simulator keeps its own table (it must not take the client's, `postledger.defaults`):
a client that priced a request otherwise than the service it calls would be caught only if
the two are computed apart. Money is in integer micro-units (1 000 000 = $1), and each
request is rounded up to the micro-unit on its own, as the providers bill and as the client
computes it per answer: the sum of the rounded costs, not the rounded sum, is what was paid.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

PER_MILLION = 1_000_000
# What the Batch API faces (OpenAI Batch, Anthropic Message Batches) take off, in percent.
BATCH_DISCOUNT = 50


@dataclass(frozen=True)
class Rates:
    """One model's list price per million tokens, in micro-units, by class of token."""

    input: int  # input neither read from nor written to the prompt cache
    cached_input: int  # input read from the prompt cache
    cache_write: int  # input written to the prompt cache (Anthropic bills it above input)
    output: int


# Every simulated model is priced alike: a small hosted model's prices, so sums mean something.
_EVERY_MODEL = Rates(input=150_000, cached_input=15_000, cache_write=187_500, output=600_000)


def rates_of(model: str) -> Rates:
    """The list price of a model (any name: the simulator answers every model alike)."""
    return _EVERY_MODEL


@dataclass(frozen=True)
class Usage:
    """What one request (or, summed, one charge) used, by class of token. `input_tokens` is
    the input billed at the full rate: neither read from the cache nor written to it."""

    input_tokens: int
    output_tokens: int
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cached_input_tokens + other.cached_input_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
        )


def request_cost(model: str, usage: Usage, discount: int) -> int:
    """The cost of ONE request, in micro-units: each class at its rate, less `discount`
    percent, rounded up once (integers only: never a float's rounding)."""
    rates = rates_of(model)
    listed = (
        usage.input_tokens * rates.input
        + usage.cached_input_tokens * rates.cached_input
        + usage.cache_write_tokens * rates.cache_write
        + usage.output_tokens * rates.output
    )
    return -(-listed * (100 - discount) // (100 * PER_MILLION))


@dataclass(frozen=True)
class Charge:
    """One entry of the charge log (`GET /_sim/charges`): a task made upstream and what it
    costs. Its tokens are by class: `input_tokens` the input billed at the full rate (neither
    read from the cache nor written to it), `cached_input_tokens` read from the cache,
    `cache_write_tokens` written to it. `discount`: the percent its face takes off
    (`BATCH_DISCOUNT` on the Batch API faces, else 0). `cost`: what it is billed, in
    micro-units: its one request's cost, or, for an OpenAI batch job (one charge for all its
    lines), the sum of its lines' costs, each rounded up on its own."""

    task_id: str
    idempotency_key: str | None
    post_ids: list[str]
    model: str
    input_tokens: int
    output_tokens: int
    at: str  # ISO 8601 UTC
    # When the task ends upstream: [at, done_at) is the time it is in flight; "" while held.
    done_at: str
    cached_input_tokens: int
    cache_write_tokens: int
    discount: int
    cost: int

    @property
    def usage(self) -> Usage:
        return Usage(
            self.input_tokens,
            self.output_tokens,
            self.cached_input_tokens,
            self.cache_write_tokens,
        )


def new_charge(
    task_id: str,
    idempotency_key: str | None,
    post_ids: list[str],
    model: str,
    usage: Usage,
    discount: int,
    at: str,
    done_at: str,
) -> Charge:
    """A charge of one request's usage, at its cost."""
    return Charge(
        task_id=task_id,
        idempotency_key=idempotency_key,
        post_ids=post_ids,
        model=model,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        at=at,
        done_at=done_at,
        cached_input_tokens=usage.cached_input_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        discount=discount,
        cost=request_cost(model, usage, discount),
    )


def billed(charge: Charge, usage: Usage, cost: int | None = None) -> Charge:
    """The charge at this usage; its cost is `cost` when the caller summed it per request
    (an OpenAI batch's lines), else the usage's as one request."""
    if cost is None:
        cost = request_cost(charge.model, usage, charge.discount)
    return replace(
        charge,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cached_input_tokens=usage.cached_input_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        cost=cost,
    )
