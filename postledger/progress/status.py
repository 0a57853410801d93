"""Where a month stands, computed from the ledger alone (R28, R30): never from a queue, never
by asking the AI. Read in plain SQL (`postledger.record.figures`), so `postledger status`
starts without the ORM."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from postledger.defaults import BUNDLED_SIMULATOR, backend_of, sqlite_file
from postledger.failures.hints import CONTINUE_HINTS
from postledger.guards.breaker import advice
from postledger.guards.spend import money
from postledger.progress.jobs import jobs_report
from postledger.record import figures, rows
from postledger.record.kinds import Answer, BatchStatus, BreakerLevel, PostStatus, Question, utcnow
from postledger.record.plain import Reader

if TYPE_CHECKING:
    from postledger.ledger import Ledger
    from postledger.settings import Settings

UNFINISHED = (
    PostStatus.PENDING,
    PostStatus.QUEUED,
    PostStatus.WAITING,
    PostStatus.RUNNING,
    PostStatus.RECEIVED,
)


def open_read_only(settings: Settings) -> Ledger | None:
    """The ledger opened so that nothing can be written; None if there is no ledger yet."""
    from pathlib import Path

    from postledger.ledger import Ledger

    url = settings.resolved_database_url(create_folder=False)  # looking creates nothing
    if backend_of(url) == "sqlite" and not Path(sqlite_file(url) or "").is_file():
        return None
    return Ledger(url, read_only=True)


def progress_of(ledger: Ledger, month: str) -> dict[str, Any] | None:
    with ledger.plain() as reader:
        return progress(reader, month)


def status_of(ledger: Ledger, month: str) -> dict[str, Any] | None:
    with ledger.plain() as reader:
        return status(reader, month)


def progress(reader: Reader, month: str) -> dict[str, Any] | None:
    """The part of `status` a progress bar needs: counts and failures. Cheap enough to ask
    while batches run (no batch, spend or approval is read)."""
    return _progress(reader, month, figures.post_counts(reader, month))


def _progress(reader: Reader, month: str, counts: dict[PostStatus, int]) -> dict[str, Any] | None:
    total = sum(counts.values())
    if total == 0:
        return None
    return {
        "month": month,
        "total": total,
        "counts": {status.value: counts[status] for status in PostStatus},
        "completed": counts[PostStatus.COMPLETED],
        "failed": counts[PostStatus.FAILED],
        "unfinished": sum(counts[s] for s in UNFINISHED),
        # Batch APIs: each upstream job still running, with the counts its upstream last
        # reported (its own, not saved results), its age and its window.
        "upstream_jobs": jobs_report(reader, month),
        "failures": [
            {
                "kind": group.kind.value if group.kind else None,
                "count": group.posts,
                "sample_reason": group.first_reason,
                "how_to_continue": CONTINUE_HINTS.get(group.kind) if group.kind else None,
            }
            for group in figures.failure_groups(reader, month)
        ]
        if counts[PostStatus.FAILED]
        else [],
    }


def status(reader: Reader, month: str) -> dict[str, Any] | None:
    """Where the month stands: posts, batches, retries, spend, questions; None if the ledger
    knows nothing of the month."""
    posts = figures.post_figures(reader, month)
    so_far = _progress(reader, month, posts.counts)
    if so_far is None:
        return None
    failures = so_far.pop("failures")
    batches = figures.batch_figures(reader, month)
    spend = figures.spend_totals(reader, month)
    forecast = figures.forecast_total(reader, month)
    questions = figures.questions(reader, month)
    return {
        **so_far,
        "batches": {status.value: batches.counts.get(status, 0) for status in BatchStatus},
        "retries": {
            # Paid business retries (R15), unpaid requeues, and request-layer retries (R16).
            "business": posts.business_retries,
            "requeues": posts.requeues,
            "request": batches.request_retries,
        },
        "bisections": batches.bisected,
        "breaker_events": figures.breaker_events(reader, month),
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
            # What the month should cost in all, as its latest run forecast it before sending.
            "forecast": forecast,
            "forecast_shown": None if forecast is None else money(forecast),
            # Every batch went to `postledger run`'s bundled simulator: nothing was paid.
            "simulated": batches.upstreams == {BUNDLED_SIMULATOR},
        },
        # Running batches of a run that is not running any more: they wait for a person's
        # yes (see `postledger plan`); while a run is going, they are simply in flight.
        "running_batches": batches.running,
        "failures": failures,
        # A run of the month paused on a question: what it asks and how to answer it.
        "waiting_for": _waiting_for(month, questions),
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


def _waiting_for(month: str, questions: list[figures.AskedQuestion]) -> dict[str, str] | None:
    """The month's open question (the newest nobody answered), if a run asked one."""
    open_ = [q for q in questions if q.answer is None]
    if not open_:
        return None
    question = open_[-1]
    asks, answer = what_is_asked(question.kind, month)
    return {
        "question": question.kind.value,
        "asked_at": question.asked_at.isoformat(),
        "asks": asks,
        "answer_with": answer,
    }


def breaker_report(reader: Reader | None, configured: str) -> dict[str, Any]:
    """Every breaker the ledger knows, plus the configured upstream's (normal if it never
    tripped), each with its history and advice; and the questions that wait for a person.
    `reader` None: there is no ledger yet."""
    known = rows.breakers(reader) if reader is not None else []
    if configured not in {b.upstream for b in known}:
        known.append(rows.Breaker(configured, BreakerLevel.NORMAL, 0, None, utcnow()))
    waiting = rows.open_questions(reader) if reader is not None else []
    breakers = []
    for breaker in known:
        history = rows.breaker_history(reader, breaker.upstream) if reader is not None else []
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
