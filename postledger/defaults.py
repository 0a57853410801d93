"""The project's defaults, and where its files are: plain values, path functions, prices.

Kept apart from `settings.py` (pydantic-settings, ~0.2 s to import) so that a read command
such as `postledger status`, and the plain-SQL reads it makes, start without it: nothing here
imports more than the standard library and pydantic (which the command line loads anyway).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from pydantic import BaseModel, ConfigDict, Field

# The name `postledger run` gives its bundled simulator, whatever its port: its breaker
# persists across runs (R18), and its spend is said to be simulated.
BUNDLED_SIMULATOR = "simulator"

# Batches in flight at once: a run's window while its breaker is normal, and the Prefect
# tag limit (`tag:ai-batch`) that holds every run together.
MAX_IN_FLIGHT = 2

# Seconds a SQLite write waits for another writer, unless the settings say otherwise.
SQLITE_BUSY_TIMEOUT = 30.0


def ledger_url(database_url: str | None, *, create_folder: bool = True) -> str:
    """The ledger's URL: `database_url`, or SQLite at ./.postledger/ledger.db."""
    if database_url:
        return database_url
    folder = Path.cwd() / ".postledger"
    if create_folder:
        folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / 'ledger.db'}"


def backend_of(url: str) -> str:
    """The database a SQLAlchemy URL names: `sqlite`, `postgresql`, … (its driver left off)."""
    return url.partition("://")[0].split("+", 1)[0]


def sqlite_file(url: str) -> str | None:
    """The file of a SQLite URL, decoded as SQLAlchemy decodes it; None for an in-memory
    SQLite database or another kind of database."""
    if backend_of(url) != "sqlite":
        return None
    database = unquote(url.partition("://")[2].split("?", 1)[0][1:])
    return database if database and database != ":memory:" else None


def month_file(base: Path, month: str) -> Path:
    """The spill file of `month` for a configured location: a folder, or a file name whose
    month's sibling is used (`ledger.db.spill.jsonl` -> `ledger.db.spill-2026-10.jsonl`)."""
    if base.is_dir():
        return base / f"spill-{month}.jsonl"
    stem = base.name.removesuffix(".jsonl")
    return base.with_name(f"{stem}-{month}.jsonl")


class Price(BaseModel):
    """One model's list price per million tokens, in micro-units, by class of token: input
    read fresh, input read from the provider's prompt cache, input written to it, output.
    A class left out is billed as fresh input (an older table, or a provider without it).
    `discount_percent` comes off every class. Left unset (None), it is the kind's: a Batch
    API's half price (`Settings.price`), not something to work into the table by hand; a
    table entry that sets it keeps it on every kind."""

    model_config = ConfigDict(extra="forbid")

    input: int = Field(ge=0)
    output: int = Field(ge=0)
    cached_input: int | None = Field(default=None, ge=0)
    cache_write: int | None = Field(default=None, ge=0)
    # None, not 0, when unset: a Prefect block saves every field, and a 0 read back from one
    # must not pass for a choice the user made.
    discount_percent: int | None = Field(default=None, ge=0, le=100)

    def discount(self) -> int:
        """The percent that comes off (none until the kind's is set)."""
        return self.discount_percent or 0

    def cached_input_rate(self) -> int:
        return self.input if self.cached_input is None else self.cached_input

    def cache_write_rate(self) -> int:
        return self.input if self.cache_write is None else self.cache_write


# What one Batch API job takes at most, by kind: requests, and bytes of requests (OpenAI: 50 000
# lines and 200 MB a file; Anthropic: 100 000 requests or 256 MB a Message Batch). Here, not in
# the clients: the forecast, read by commands that load no HTTP client, counts jobs by them.
JOB_LIMITS: dict[str, tuple[int, int]] = {
    "openai_batch": (50_000, 200 * 1024 * 1024),
    "anthropic_batch": (100_000, 256 * 1024 * 1024),
}


@dataclass(frozen=True)
class PriceBook:
    """What each model costs on each kind of upstream: the `table`, with `batch_discount` off
    a price that sets no discount of its own on a Batch API's kinds (those with `JOB_LIMITS`;
    `Settings.price_book`).

    Why a book, not one price: a month's sends may span runs configured differently (another
    model, a chat month moved to the Batch API), and each send is billed at the price of the
    model and kind its spend row names. A row from before rows named them is billed as a send
    of the configured `model` on the configured `kind`."""

    table: Mapping[str, Price]
    batch_discount: int
    model: str
    kind: str

    def price(self, model: str | None = None, kind: str | None = None) -> Price | None:
        """What `model` costs on `kind` (the configured ones by default); None if the table
        has no price for the model."""
        listed = self.table.get(model or self.model)
        if listed is None or listed.discount_percent is not None:
            return listed
        discount = self.batch_discount if (kind or self.kind) in JOB_LIMITS else 0
        return listed.model_copy(update={"discount_percent": discount})


DEFAULT_PRICES: dict[str, Price] = {
    # The simulator's model: priced like a small hosted model, so the numbers mean something.
    "sim-analyst-1": Price(input=150_000, output=600_000, cached_input=15_000, cache_write=187_500),
}
