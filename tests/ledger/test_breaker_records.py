"""The circuit breaker's rules (R18, R19), in the ledger: levels, windows, and one breaker per
upstream shared by every month and process. (The flow obeying it, over real HTTP:
tests/flow/test_breaker.py.)"""

from __future__ import annotations

from postledger.batches.posts import Post
from postledger.guards.breaker import BreakerHeld, Signal, level_after, window
from postledger.ledger import Ledger
from postledger.record.models import Answer, BreakerLevel
from tests.support.ledgers import asked

L = BreakerLevel


def test_levels_follow_final_transport_failures_and_successes() -> None:
    fail, ok = Signal.TRANSPORT_FAILURE, Signal.SUCCESS
    assert [level_after(level, fail) for level in L] == [L.PROBE, L.OPEN, L.OPEN]
    # Only a person leaves `open` (R19): a late success does not.
    assert [level_after(level, ok) for level in L] == [L.NORMAL, L.NORMAL, L.OPEN]
    assert [window(level, 2) for level in L] == [2, 1, 0]


def plan_month(ledger: Ledger, month: str, n: int) -> list[str]:
    posts = [Post(id=f"p{i}", text=f"post {i}", line=i + 1) for i in range(n)]
    ledger.sync_posts(month, posts, model="m", analysis=asked())
    return [b.batch_id for b in ledger.plan(month, max_posts=1, max_chars=1000).batches]


def test_breaker_is_shared_by_months_and_kept_in_the_ledger(any_ledger_url: str) -> None:
    ledger = Ledger(any_ledger_url)
    october, november = plan_month(ledger, "2026-10", 2), plan_month(ledger, "2026-11", 2)
    ledger.approvals.signal("up", Signal.TRANSPORT_FAILURE, "b1 failed", month="2026-10")
    ledger.approvals.signal("up", Signal.TRANSPORT_FAILURE, "b2 failed", month="2026-10")

    reopened = Ledger(any_ledger_url)  # another process's view: nothing held in memory
    assert reopened.approvals.breaker("up").level is L.OPEN
    held = reopened.mark_running(november[0], "up")
    assert isinstance(held, BreakerHeld) and "open" in held.reason
    assert reopened.batch(november[0]).sends == 0  # held back: nothing changed, nothing paid
    assert reopened.approvals.breaker("other").level is L.NORMAL  # per upstream

    reopened.approvals.answer("2026-11", "up", Answer.CONTINUE, note="fixed", by="test")
    assert ledger.approvals.breaker("up").level is L.PROBE
    ledger.leases.claim("2026-10", "run-october")  # two live runs, one per month
    reopened.leases.claim("2026-11", "run-november")
    ledger.mark_running(october[0], "up", holder="run-october")  # the one probe
    held = reopened.mark_running(november[0], "up", holder="run-november")  # one across months
    assert isinstance(held, BreakerHeld) and "probing" in held.reason
    history = [(e.from_level, e.to_level) for e in ledger.approvals.history("up")]
    assert history == [(L.NORMAL, L.PROBE), (L.PROBE, L.OPEN), (L.OPEN, L.PROBE)]
    ledger.close()
    reopened.close()
