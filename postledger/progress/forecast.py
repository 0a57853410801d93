"""What a month will cost and how long it will take, before anything is paid.

A forecast is worked out from what is left to send (posts and their characters, batched as
planning batches them), the ledger's history (`postledger.record.history`), and the price
table; it makes no network call. Its token counts come from `TokenRates`: learned from the
ledger's confirmed usage where it has some, else today's assumed constants (about four
characters a token, 60 output tokens a post), which it says.

The same work is priced on the configured kind and on its sibling (chat and the same
provider's Batch API), each with its own discount, so that the cheaper way in is in view.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from statistics import median
from typing import TYPE_CHECKING, Any

from postledger.defaults import JOB_LIMITS, MAX_IN_FLIGHT
from postledger.guards.estimates import CHARS_PER_TOKEN, OUTPUT_TOKENS_PER_POST
from postledger.guards.spend import cost_of
from postledger.guards.usage import Usage
from postledger.record.figures import spend_totals
from postledger.record.history import (
    Shortfalls,
    UsageSeen,
    batch_seconds,
    job_seconds,
    left_sizes,
    shortfalls,
    usage_seen,
)
from postledger.record.plain import Reader, read_only

if TYPE_CHECKING:  # the read commands that import this package start without the settings
    from postledger.settings import Settings, UpstreamKind


@dataclass(frozen=True)
class Work:
    """What is left to send of a month."""

    posts: int
    chars: int  # the posts' characters
    batches: int
    too_long: int  # posts over the batch's character limit: never sent, never paid


def work_of(sizes: Iterable[tuple[str, int]], *, max_posts: int, max_chars: int) -> Work:
    """The posts to send (id, characters), batched as planning would batch them."""
    # Here, not above: the read commands that import this package start without the ORM.
    from postledger.batches.planning import BatchFiller, Sized

    filler = BatchFiller(max_posts=max_posts, max_chars=max_chars)
    too_long: list[Sized] = []
    posts = chars = batches = 0
    for post_id, length in sizes:
        batches += len(filler.add([Sized(post_id, length)], too_long))
        posts, chars = posts + 1, chars + length
    batches += len(filler.finish())
    long_chars = sum(post.chars for post in too_long)
    return Work(posts - len(too_long), chars - long_chars, batches, len(too_long))


@dataclass(frozen=True)
class TokenRates:
    """Tokens per character of input (instructions and posts), output tokens per post, and
    the share of input read from or written to the prompt cache."""

    input_per_char: Fraction
    output_per_post: Fraction
    cached_share: Fraction
    write_share: Fraction
    learned_from: int  # completed batches; 0: the assumed constants

    @classmethod
    def assumed(cls) -> TokenRates:
        none = Fraction(0)
        return cls(Fraction(1, CHARS_PER_TOKEN), Fraction(OUTPUT_TOKENS_PER_POST), none, none, 0)

    @classmethod
    def learned(cls, seen: UsageSeen, prompt_chars: int) -> TokenRates:
        """From the ledger's confirmed usage; the assumed constants where it has none."""
        asked = seen.batches * prompt_chars + seen.post_chars
        if not seen.batches or not seen.posts or not asked or not seen.input_tokens:
            return cls.assumed()
        return cls(
            Fraction(seen.input_tokens, asked),
            Fraction(seen.output_tokens, seen.posts),
            Fraction(seen.cached_input_tokens, seen.input_tokens),
            Fraction(seen.cache_write_tokens, seen.input_tokens),
            seen.batches,
        )

    def usage(self, work: Work, prompt_chars: int) -> Usage:
        """The usage of the work: each batch sends the instructions and its posts."""
        total = math.ceil(self.input_per_char * (work.batches * prompt_chars + work.chars))
        cached = math.floor(total * self.cached_share)
        written = math.floor(total * self.write_share)
        output = math.ceil(self.output_per_post * work.posts)
        return Usage(total - cached - written, output, cached_input=cached, cache_write=written)


@dataclass(frozen=True)
class KindCost:
    kind: UpstreamKind
    cost: int | None  # micro-units; None: the table has no price for the model
    discount_percent: int


@dataclass(frozen=True)
class Forecast:
    month: str
    work: Work
    rates: TokenRates
    usage: Usage
    costs: list[KindCost]  # the configured kind first, then its sibling
    wall_seconds: float | None  # None: no history for this upstream
    timed_from: int  # batches (or Batch API jobs) whose durations the wall time is from
    committed: int  # what the month has spent or may have spent so far
    max_cost: int | None
    shortfalls: Shortfalls  # the budget's per-batch estimates against their costs, so far

    @property
    def cost(self) -> int | None:
        return self.costs[0].cost

    def crosses_budget(self) -> bool:
        """Whether the month, at this forecast, would go past its budget."""
        if self.max_cost is None or self.cost is None:
            return False
        return self.committed + self.cost > self.max_cost

    def summary(self) -> dict[str, Any]:
        """The forecast for `--json` and the flow's artifact."""
        return {
            "month": self.month,
            "posts": self.work.posts,
            "batches": self.work.batches,
            "too_long_posts": self.work.too_long,
            "input_tokens": self.usage.input,
            "cached_input_tokens": self.usage.cached_input,
            "cache_write_tokens": self.usage.cache_write,
            "output_tokens": self.usage.output,
            "learned_from_batches": self.rates.learned_from,
            "costs": [
                {"kind": c.kind.value, "cost": c.cost, "discount_percent": c.discount_percent}
                for c in self.costs
            ],
            "wall_seconds": None if self.wall_seconds is None else round(self.wall_seconds),
            "timed_from": self.timed_from,
            "committed": self.committed,
            "max_cost": self.max_cost,
            "crosses_budget": self.crosses_budget(),
            "estimates_settled": self.shortfalls.settled,
            "estimates_short": self.shortfalls.short,
            "worst_shortfall": self.shortfalls.worst,
        }


def wall_seconds(
    kind: UpstreamKind,
    work: Work,
    durations: Sequence[float],
    *,
    prompt_chars: int = 0,
    most_batches: int | None = None,
) -> float | None:
    """The month's expected wall time: rounds of `MAX_IN_FLIGHT` batches (or, on a Batch API,
    jobs) at the median duration the ledger has seen; None without history."""
    if not durations:
        return None
    if not work.batches:
        return 0.0
    units = work.batches
    if kind in JOB_LIMITS:
        units = jobs_of(kind, work, prompt_chars, most_batches)
    return -(-units // MAX_IN_FLIGHT) * median(durations)


def jobs_of(kind: str, work: Work, prompt_chars: int, most_batches: int | None = None) -> int:
    """The upstream jobs a Batch API month takes: by its requests (at most `most_batches` a
    job, where the settings cap them), and by their bytes, at least the posts' characters and
    each request's instructions (a million posts of ~300 characters: two or three OpenAI
    files, not the one their requests alone would take)."""
    lines, size = JOB_LIMITS[kind]
    lines = min(lines, most_batches or lines)
    least_bytes = work.chars + work.batches * prompt_chars
    return max(-(-work.batches // lines), -(-least_bytes // size))


def month_forecast(
    reader: Reader | None, month: str, settings: Settings, sizes: Iterable[tuple[str, int]]
) -> Forecast:
    """The forecast of the posts `sizes` (id, characters) still to send of `month`, from the
    ledger `reader` reads (None: a ledger with nothing in it yet)."""
    work = work_of(sizes, max_posts=settings.max_batch_posts, max_chars=settings.max_batch_chars)
    prompt_chars = len(settings.analysis_in_use().request_text)
    upstream, kind = settings.breaker_name(), settings.upstream_kind
    rates, durations, committed = TokenRates.assumed(), [], 0
    short = Shortfalls(0, 0, 0, 0.0)
    if reader is not None:
        rates = TokenRates.learned(_usage_seen(reader, settings.model, upstream), prompt_chars)
        timed = job_seconds if kind in JOB_LIMITS else batch_seconds
        durations = timed(reader, upstream)
        spend = spend_totals(reader, month)
        committed = spend["confirmed"] + spend["possible"] + spend["wasted"]
        short = shortfalls(reader, model=settings.model)
    usage = rates.usage(work, prompt_chars)
    kinds = [kind] if kind.sibling is None else [kind, kind.sibling]
    costs = []
    for each in kinds:
        price = settings.price(each)
        cost = None if price is None else cost_of(price, usage)
        costs.append(KindCost(each, cost, price.discount() if price else 0))
    return Forecast(
        month=month,
        work=work,
        rates=rates,
        usage=usage,
        costs=costs,
        wall_seconds=wall_seconds(
            kind,
            work,
            durations,
            prompt_chars=prompt_chars,
            most_batches=settings.max_submission_batches,
        ),
        timed_from=len(durations),
        committed=committed,
        max_cost=settings.max_cost,
        shortfalls=short,
    )


def _usage_seen(reader: Reader, model: str, upstream: str) -> UsageSeen:
    """What the ledger has seen of the model (the tokens are the model's); with nothing
    learned of it (the ledger's sends before it kept their model, or another model's), of the
    upstream, then of any."""
    found = usage_seen(reader, model=model)
    if not found.batches:
        found = usage_seen(reader, upstream)
    return found if found.batches else usage_seen(reader)


def ledger_forecast(ledger_url: str, month: str, settings: Settings) -> Forecast:
    """The forecast of what the ledger has left to send of `month` (once a run has written
    the month's posts to it), read in one snapshot."""
    with read_only(ledger_url) as reader:
        sizes = left_sizes(reader, month) if reader is not None else []
        return month_forecast(reader, month, settings, sizes)
