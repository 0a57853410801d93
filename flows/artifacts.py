"""The month in the Prefect UI, as artifacts computed from the ledger alone (R27, R28).

Keys are stable per month, so the runs of a month add versions to the same three artifacts:
`postledger-YYYY-MM-progress` (share of posts completed, and on a Batch API the counts its
running jobs last reported: a new version as batches end, and at least every
`progress_every` seconds while work is in flight),
`postledger-YYYY-MM-failures` (failed posts by kind, with a reason and how to continue: a new
version only when that changed, in this run or since the month's last run) and, at the end,
`postledger-YYYY-MM-summary` (one version per run).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from prefect import get_client, get_run_logger
from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.client.schemas.filters import ArtifactCollectionFilter, ArtifactCollectionFilterKey

from flows.approval import next_batch_cost
from postledger.ledger import FailureKind, Ledger, Question
from postledger.progress import (
    FINAL,
    completed_share,
    next_step,
    progress_of,
    spend_words,
    status_of,
    summary_markdown,
    what_is_asked,
)
from postledger.settings import Settings

# The UI need not follow every batch: at most one update per this many seconds.
MIN_SECONDS_BETWEEN_UPDATES = 2.0


def artifact_key(month: str, what: str) -> str:
    return f"postledger-{month}-{what}"


def failures_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per kind. The UI shows a cell as one line of plain text, cut at the column's
    width (the rest only on hover): how to continue is the command alone, or a few words; the
    full advice is in the description, which the UI renders as markdown."""
    return [
        {
            "kind": f["kind"],
            "posts": f["count"],
            "a reason": f["sample_reason"],
            "how to continue": next_step(FailureKind(f["kind"]) if f["kind"] else None),
        }
        for f in report["failures"]
    ]


def failures_description(report: dict[str, Any]) -> str:
    month = report["month"]
    if not report["failures"]:
        return f"No failed posts of {month}."
    advice = [
        f"- **{f['kind'] or 'unknown'}**: {f['how_to_continue'] or FINAL}"
        for f in report["failures"]
    ]
    failed = report["failed"]
    posts = "post" if failed == 1 else "posts"
    return "\n".join(
        [f"{failed} failed {posts} of {month}, by kind. How to continue:", "", *advice]
    )


@dataclass(frozen=True)
class Shown:
    """What a version of a table artifact shows: its rows and its description."""

    rows: Any
    description: str | None


def latest_shown(key: str) -> Shown | None:
    """The latest version of the table artifact `key` on the Prefect server; None if none."""
    with get_client(sync_client=True) as client:
        latest = client.read_latest_artifacts(
            artifact_filter=ArtifactCollectionFilter(key=ArtifactCollectionFilterKey(any_=[key])),
            limit=1,
        )
    if not latest or latest[0].type != "table":
        return None
    data = latest[0].data
    return Shown(json.loads(data) if isinstance(data, str) else data, latest[0].description)


def progress_words(ledger: Ledger, report: dict[str, Any], settings: Settings) -> str:
    """The progress artifact's description: posts, spend in currency units, each upstream job
    still running (the counts its upstream last reported, its age and window), and, while a
    run of the month is paused, what it asks, what each answer costs and how to answer."""
    month = report["month"]
    words = f"The analysis {settings.analysis_in_use().said()}: "
    words += f"{report['completed']} of {report['total']} posts completed; " + spend_words(
        ledger.spend_totals(month), simulated=settings.simulated()
    )
    for job in report.get("upstream_jobs") or []:
        # A Batch API job: the upstream's own counts, said to be so, its age and window.
        words += f". {job['said'][0].upper()}{job['said'][1:]}"
    question = ledger.approvals.waiting(month)
    if question is not None:
        asks, answer_with = what_is_asked(question.kind, month)
        words += f". Paused, waiting for a person: {asks}"
        if question.kind in (Question.BREAKER, Question.BUDGET) and (
            cost := next_batch_cost(ledger, month, settings)
        ):
            words += f"; a continue sends next a batch of {cost}"
        words += f". Answer: Resume, or `{answer_with}`"
    return words


class MonthArtifacts:
    def __init__(self, ledger: Ledger, month: str, settings: Settings) -> None:
        self._ledger = ledger
        self._month = month
        self._settings = settings
        self._progress_id: UUID | None = None
        # The failures table as its latest version shows it, read from the server once: an
        # unchanged table is not published again, by this run or by the next.
        self._failures_read = False
        self._failures_shown: Shown | None = None
        self._last = 0.0
        self._started = time.monotonic()
        # The running jobs and their counts as the latest progress version shows them.
        self._jobs_shown: list[tuple[str | None, Any]] = []

    def update(self, *, force: bool = False) -> None:
        """Publish progress and failures, unless the last update was a moment ago. Showing is
        never worth stopping the work for: a failure to publish is logged, not raised."""
        now = time.monotonic()
        if not force and now - self._last < MIN_SECONDS_BETWEEN_UPDATES:
            return
        self._last = now
        self._publish(summary=False)

    def finish(self) -> None:
        """The last progress and failures, and the summary of this run."""
        self._publish(summary=True)

    def _publish(self, *, summary: bool) -> None:
        try:
            # While batches run, only what the progress and failures artifacts show.
            report = (status_of if summary else progress_of)(self._ledger, self._month)
            if report is None:
                return
            share = completed_share(report)
            detail = progress_words(self._ledger, report, self._settings)
            # Running jobs whose counts moved since the last version (or that ended) make a
            # new version, so that the UI keeps how a job went; anything else updates the one
            # shown.
            jobs = [(j["job_id"], j["upstream_counts"]) for j in report.get("upstream_jobs", [])]
            counted = any(counts for _, counts in [*jobs, *self._jobs_shown])
            moved = counted and jobs != self._jobs_shown
            self._jobs_shown = jobs
            if self._progress_id is None or moved:
                made = create_progress_artifact(
                    share, key=artifact_key(self._month, "progress"), description=detail
                )
                assert isinstance(made, UUID), "called outside an event loop: the sync form"
                self._progress_id = made
            else:
                update_progress_artifact(self._progress_id, share, description=detail)
            self._publish_failures(report)
            if summary:
                create_markdown_artifact(
                    summary_markdown(report, wall_seconds=time.monotonic() - self._started),
                    key=artifact_key(self._month, "summary"),
                    description=f"postledger {self._month}: where the month stands",
                )
        except Exception as exc:
            get_run_logger().warning("could not update the artifacts of %s: %s", self._month, exc)

    def _publish_failures(self, report: dict[str, Any]) -> None:
        key = artifact_key(self._month, "failures")
        rows = failures_rows(report)
        # Compared as the server gives it back: JSON, so no tuple nor other type survives.
        table = Shown(json.loads(json.dumps(rows)), failures_description(report))
        if not self._failures_read:
            self._failures_shown = latest_shown(key)
            self._failures_read = True
        if table == self._failures_shown:
            return
        create_table_artifact(rows, key=key, description=table.description)
        self._failures_shown = table
