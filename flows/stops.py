"""Why a run stops early, in words a person can act on: what failed, what was kept where, and
what to run next."""

from __future__ import annotations

from postledger.ledger import Answer, LedgerUnavailable
from postledger.settings import Settings


def ledger_stop(
    error: LedgerUnavailable | str, in_flight: set[str], settings: Settings, month: str
) -> str:
    flying = ", ".join(sorted(in_flight)) or "none"
    return (
        f"a ledger write failed, so no new batch starts: {error}. Batches in flight then: "
        f"{flying}; they were awaited, and what they could not write is in "
        f"{settings.spill_file(month)}, which the next run imports first. Fix the database, "
        "then run again."
    )


def said(answer: Answer) -> str:
    return "a person said stop" if answer is Answer.STOP else "nobody answered in time"


def breaker_stop(upstream: str, month: str, answer: Answer) -> str:
    return (
        f"the circuit breaker of {upstream} is open and {said(answer)}. It stays open for "
        f"every run until a person continues: `postledger approve --month {month}`, then run "
        "again."
    )
