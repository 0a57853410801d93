"""Where a month stands, computed from the ledger alone (R28, R30): never from a queue, never
by asking the AI."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from rich.table import Table
from sqlalchemy.engine import make_url

from postledger.failures.policy import CONTINUE_HINTS
from postledger.guards.spend import money
from postledger.ledger import Ledger
from postledger.progress.words import SIMULATED_SPEND
from postledger.record.models import Answer, BatchStatus, PostStatus, Question
from postledger.recovery.interrupted import RecoveryPlan
from postledger.settings import BUNDLED_SIMULATOR, Settings

UNFINISHED = (
    PostStatus.PENDING,
    PostStatus.QUEUED,
    PostStatus.WAITING,
    PostStatus.RUNNING,
    PostStatus.RECEIVED,
)


def open_read_only(settings: Settings) -> Ledger | None:
    """The ledger opened so that nothing can be written; None if there is no ledger yet."""
    url = settings.resolved_database_url(create_folder=False)  # looking creates nothing
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and not Path(parsed.database or "").is_file():
        return None
    return Ledger(url, read_only=True)


def month_status(settings: Settings, month: str) -> dict[str, Any] | None:
    ledger = open_read_only(settings)
    if ledger is None:
        return None
    try:
        return status_of(ledger, month)
    finally:
        ledger.close()


def progress_of(ledger: Ledger, month: str) -> dict[str, Any] | None:
    """The part of `status_of` a progress bar needs: counts and failures. Cheap enough to ask
    while batches run (no batch, spend or approval is read)."""
    counts = ledger.counts(month)
    total = sum(counts.values())
    if total == 0:
        return None
    failed = ledger.posts(month, PostStatus.FAILED)
    by_kind = Counter(p.failure_kind for p in failed)
    sample = {p.failure_kind: p.failure_reason for p in reversed(failed)}
    return {
        "month": month,
        "total": total,
        "counts": {status.value: counts[status] for status in PostStatus},
        "completed": counts[PostStatus.COMPLETED],
        "failed": counts[PostStatus.FAILED],
        "unfinished": sum(counts[s] for s in UNFINISHED),
        "failures": [
            {
                "kind": kind.value if kind else None,
                "count": n,
                "sample_reason": sample[kind],
                "how_to_continue": CONTINUE_HINTS.get(kind) if kind else None,
            }
            for kind, n in by_kind.most_common()
        ],
    }


def status_of(ledger: Ledger, month: str) -> dict[str, Any] | None:
    progress = progress_of(ledger, month)
    if progress is None:
        return None
    failures = progress.pop("failures")
    business, requeues = ledger.retry_totals(month)
    batches = ledger.batch_figures(month)
    spend = ledger.spend_totals(month)
    questions = ledger.approvals.approvals(month)
    return {
        **progress,
        "batches": {status.value: batches.counts.get(status, 0) for status in BatchStatus},
        "retries": {
            # Paid business retries (R15), unpaid requeues, and request-layer retries (R16).
            "business": business,
            "requeues": requeues,
            "request": batches.request_retries,
        },
        "bisections": batches.bisected,
        "breaker_events": ledger.approvals.breaker_events_of(month),
        "approvals": {
            "asked": len(questions),
            "given": sum(q.answer is Answer.CONTINUE for q in questions),
            "refused": sum(q.answer is Answer.STOP for q in questions),
            "unanswered": sum(q.answer in (None, Answer.TIMED_OUT) for q in questions),
        },
        "spend": {
            **spend,
            "unit": "confirmed, possible, wasted: micro-units (1000000 = 1 currency unit)",
            "shown": {k: money(spend[k]) for k in ("confirmed", "possible", "wasted")},
            # Every batch went to `postledger run`'s bundled simulator: nothing was paid.
            "simulated": batches.upstreams == {BUNDLED_SIMULATOR},
        },
        # Running batches of a run that is not running any more: they wait for a person's
        # yes (see `postledger plan`); while a run is going, they are simply in flight.
        "running_batches": batches.running,
        "failures": failures,
        # A run of the month paused on a question: what it asks and how to answer it.
        "waiting_for": _waiting_for(ledger, month),
    }


_ASKS = {
    Question.BREAKER: (
        "the circuit breaker is open: continue (one batch at a time first) or stop",
        "postledger approve --month {month}  (or --stop)",
    ),
    Question.BUDGET: (
        "the next batch could cross the month's budget: continue past it or stop",
        "postledger approve --month {month}  (or --stop)",
    ),
    Question.RECOVERY: (
        "interrupted batches need a yes: poll their known tasks (free), send again those with "
        "no task id (may be charged twice: `postledger plan --month {month}` shows how much)",
        "postledger approve --month {month} --poll and/or --resubmit  (or --stop)",
    ),
}


def what_is_asked(kind: Question, month: str) -> tuple[str, str]:
    """What a paused run of `month` asks, in words with what each answer costs, and the
    command that answers it."""
    asks, answer = _ASKS[kind]
    return asks.format(month=month), answer.format(month=month)


def _waiting_for(ledger: Ledger, month: str) -> dict[str, str] | None:
    question = ledger.approvals.waiting(month)
    if question is None:
        return None
    asks, answer = what_is_asked(question.kind, month)
    return {
        "question": question.kind.value,
        "asked_at": question.asked_at.isoformat(),
        "asks": asks,
        "answer_with": answer,
    }


def status_table(report: dict[str, Any]) -> Table:
    table = Table(title=f"postledger {report['month']}: {report['total']} posts", min_width=40)
    table.add_column("state")
    table.add_column("posts", justify="right")
    for status, n in report["counts"].items():
        style = {"completed": "green", "failed": "red"}.get(status, "")
        table.add_row(f"[{style}]{status}[/]" if style else status, str(n))
    table.add_section()
    table.add_row("unfinished", str(report["unfinished"]))
    table.add_row("batches in flight", str(report["batches"][BatchStatus.RUNNING.value]))
    shown = report["spend"]["shown"]
    table.add_row("spend confirmed / possible / wasted", " / ".join(shown.values()))
    if report["spend"]["simulated"]:
        table.add_row("spend", SIMULATED_SPEND)
    retries = report["retries"]
    table.add_row(
        "retries business / requeues / request",
        f"{retries['business']} / {retries['requeues']} / {retries['request']}",
    )
    for failure in report["failures"]:
        table.add_row(f"[red]failed: {failure['kind']}[/]", str(failure["count"]))
    if waiting := report.get("waiting_for"):
        table.add_section()
        table.add_row("[yellow]paused[/]", f"[yellow]{waiting['asks']}[/]")
        table.add_row("answer with", waiting["answer_with"])
    return table


def failures_table(report: dict[str, Any]) -> Table | None:
    if not report["failures"]:
        return None
    table = Table(title="why posts failed, and how to continue")
    for column in ("kind", "posts", "a reason", "how to continue"):
        table.add_column(column, overflow="fold")
    for failure in report["failures"]:
        table.add_row(
            failure["kind"],
            str(failure["count"]),
            failure["sample_reason"] or "",
            failure["how_to_continue"] or "",
        )
    return table


def breaker_report(ledger: Ledger | None, configured: str) -> dict[str, Any]:
    """Every breaker the ledger knows, plus the configured upstream's (normal if it never
    tripped), each with its history and advice; and the questions that wait for a person."""
    from postledger.guards.breaker import advice
    from postledger.record.models import BreakerRecord

    known = ledger.approvals.breakers() if ledger is not None else []
    if configured not in {b.upstream for b in known}:
        known.append(BreakerRecord(upstream=configured))
    waiting = ledger.approvals.all_waiting() if ledger is not None else []
    breakers = []
    for breaker in known:
        history = ledger.approvals.history(breaker.upstream) if ledger is not None else []
        # The month to answer for: the one whose run waits, else the one that tripped it last.
        asking = [q.month for q in waiting if q.upstream == breaker.upstream]
        tripped = [e.month for e in history if e.month]
        month = next(iter(asking or tripped[-1:]), None)
        breakers.append(
            {
                "upstream": breaker.upstream,
                "level": breaker.level.value,
                "failures_in_a_row": breaker.failures,
                "since": breaker.changed_at.isoformat() if history else None,
                "reason": breaker.reason,
                "what_to_do": advice(breaker.level, month),
                "history": [
                    {
                        "at": e.at.isoformat(),
                        "month": e.month,
                        "from": e.from_level.value,
                        "to": e.to_level.value,
                        "why": e.why,
                    }
                    for e in history
                ],
            }
        )
    return {
        "breakers": breakers,
        "waiting_for_a_person": [
            {
                "month": q.month,
                "upstream": q.upstream,
                "asked_at": q.asked_at.isoformat(),
                "flow_run_id": q.flow_run_id,
                "answer_with": f"postledger approve --month {q.month} [--stop]",
            }
            for q in waiting
        ],
    }


def breaker_tables(report: dict[str, Any]) -> list[Table]:
    tables = []
    for breaker in report["breakers"]:
        style = {"normal": "green", "probe": "yellow", "open": "red"}[breaker["level"]]
        table = Table(
            title=f"breaker of {breaker['upstream']}: [{style}]{breaker['level']}[/] — "
            f"{breaker['what_to_do']}",
            title_justify="left",
        )
        for column in ("at (UTC)", "month", "change", "why"):
            table.add_column(column, overflow="fold")
        for event in breaker["history"]:
            change = (
                event["to"] if event["from"] == event["to"] else f"{event['from']} → {event['to']}"
            )
            table.add_row(event["at"][:19], event["month"] or "", change, event["why"])
        tables.append(table)
    if report["waiting_for_a_person"]:
        table = Table(title="paused runs waiting for a person", title_justify="left")
        for column in ("month", "asked at (UTC)", "answer with"):
            table.add_column(column)
        for q in report["waiting_for_a_person"]:
            table.add_row(q["month"], q["asked_at"][:19], q["answer_with"])
        tables.append(table)
    return tables


def recovery_table(month: str, plan: RecoveryPlan) -> Table:
    summary = plan.summary()
    at_risk = (
        "none: the upstream honours idempotency keys"
        if plan.idempotent
        else f"about {money(plan.double_charge_cost)} ({plan.double_charge_tokens} input tokens), "
        "if every resubmission is confirmed"
    )
    table = Table(
        title=f"{month}: interrupted batches — possible double charge: {at_risk}",
        title_justify="left",
    )
    for column in ("action", "batches", "posts", "needs a yes", "how"):
        table.add_column(column, overflow="fold")
    how = {
        "finish_locally": "the next run, from the saved output (no AI call)",
        "poll": "`postledger run --poll`, or yes (default) in the paused run's form",
        "resubmit": "`postledger run --resubmit`, or yes in the paused run's form",
        "close": "the next run (every post changed since)",
    }
    for action, group in summary["groups"].items():
        if group["batches"]:
            needs = "yes" if action in ("poll", "resubmit") else "no"
            table.add_row(
                action, ", ".join(group["batches"]), str(group["posts"]), needs, how[action]
            )
    if not plan.steps:
        table.add_row("none", "", "0", "no", "nothing was interrupted")
    return table


def failed_posts_table(settings: Settings, month: str) -> Table | str:
    """Every failed post of the month with its kind and reason; a sentence when none failed."""
    ledger = open_read_only(settings)
    failed = ledger.posts(month, PostStatus.FAILED) if ledger is not None else []
    if ledger is not None:
        ledger.close()
    if not failed:
        return f"No post of {month} has failed."
    table = Table(title=f"failed posts of {month}", title_justify="left")
    for column in ("post", "kind", "attempts", "reason"):
        table.add_column(column, overflow="fold")
    for post in failed:
        kind = post.failure_kind.value if post.failure_kind else ""
        table.add_row(post.post_id, kind, str(post.attempts), post.failure_reason or "")
    return table
