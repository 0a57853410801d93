"""The terminal's tables of what `postledger.progress.status` reports (rich)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.table import Table

from postledger.guards.spend import money
from postledger.progress.words import SIMULATED_SPEND
from postledger.record.kinds import BatchStatus

if TYPE_CHECKING:
    from postledger.record.figures import FailedPost
    from postledger.recovery.steps import RecoveryPlan


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
    if (forecast := report["spend"].get("forecast_shown")) is not None:
        committed = sum(report["spend"][k] for k in ("confirmed", "possible", "wasted"))
        table.add_row("spend against forecast", f"{money(committed)} of {forecast}")
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


def jobs_table(report: dict[str, Any]) -> Table | None:
    """The month's upstream jobs still running (Batch APIs): the counts their upstream last
    reported, which are its own and not results saved here, each job's age and its window."""
    jobs = report.get("upstream_jobs") or []
    if not jobs:
        return None
    table = Table(title="upstream jobs running (the upstream's counts, not saved results)")
    table.add_column("job", overflow="fold")
    for job in jobs:
        table.add_row(escape(job["said"]))
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


def failed_posts_table(month: str, failed: list[FailedPost]) -> Table | str:
    """Every failed post of the month with its kind and reason; a sentence when none failed."""
    if not failed:
        return f"No post of {month} has failed."
    table = Table(title=f"failed posts of {month}", title_justify="left")
    for column in ("post", "kind", "attempts", "reason"):
        table.add_column(column, overflow="fold")
    for post in failed:
        kind = post.kind.value if post.kind else ""
        table.add_row(post.post_id, kind, str(post.attempts), post.reason or "")
    return table
