"""The business layer after a look at paid work (R23, R26, R48): what follows from the
upstream's verdict, and from no verdict.

Only the upstream's explicit verdict ends a paid batch: its output (decided by
`policy.after_output` once saved and checked), "failed", or "I do not know this id". A look
that gave no verdict says nothing about the work, which may be done and paid for: the batch
stays `running` with its id, to be looked at again (by this run, with a backoff, and by the
next one), never sent again on the strength of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from postledger.failures.classify import classify
from postledger.failures.hints import CONTINUE_HINTS
from postledger.failures.policy import STOPPING, Decision, PostMove, retry_or_fail
from postledger.guards.breaker import Signal
from postledger.record.kinds import BatchStatus, FailureKind, PostStatus
from postledger.settings import Limits
from postledger.upstreams.calls import NoVerdict, NoVerdictReason, Unknown, UpstreamFailed
from postledger.upstreams.errors import EndpointNotFound

if TYPE_CHECKING:
    from postledger.record.models import PostRecord


def after_upstream_failed(
    posts: list[PostRecord], failed: UpstreamFailed, limits: Limits
) -> Decision:
    """The upstream said the work failed: paid for unless it said otherwise (its charge is
    then given back; the attempt still counts), and worth one more paid attempt (R15)."""
    kind = FailureKind.UPSTREAM_FAILED
    return Decision(
        BatchStatus.FAILED,
        failed.reason,
        kind=kind,
        moves=[retry_or_fail(post, failed.reason, kind, limits) for post in posts],
        nothing_charged=not failed.billed,
    )


def after_unknown(posts: list[PostRecord], unknown: Unknown, task_id: str) -> Decision:
    """The upstream no longer knows the task (R26): its posts end, never answered with a
    silent new task; a person may retry them (`postledger retry`)."""
    why = f"{unknown.reason}: the upstream no longer knows task {task_id}"
    kind = FailureKind.TASK_UNKNOWN
    moves = [PostMove(post.post_id, PostStatus.FAILED, why, kind) for post in posts]
    return Decision(BatchStatus.FAILED, why, kind=kind, moves=moves)


def after_no_verdict(no_verdict: NoVerdict, task_id: str | None) -> Decision:
    """No verdict (R48): the batch and its posts stay `running` with the task's id, for the
    next look. A read refused for a reason a person must fix (the key, the balance, a
    permission) also stops the run; any other counts once toward the upstream's breaker."""
    where = f"task {task_id}" if task_id else "its work"
    why = (
        f"no verdict yet ({no_verdict.reason.value}): {no_verdict.detail}; {where} may still "
        "deliver, and is looked at again, never paid for again"
    )
    refusal = no_verdict.refusal
    kind = classify(refusal) if refusal is not None else None
    if isinstance(refusal, EndpointNotFound):  # a wrong URL: every look would fail the same
        stop = f"{refusal}. Nothing more is sent until the configuration is fixed."
        return Decision(BatchStatus.RUNNING, why, kind=kind, stop_run=stop)
    if kind in STOPPING:
        assert kind is not None
        stop = f"{kind.value}: {no_verdict.detail} — {CONTINUE_HINTS[kind]}"
        return Decision(BatchStatus.RUNNING, why, kind=kind, stop_run=stop)
    if no_verdict.reason is NoVerdictReason.UNCONFIRMED:  # the upstream answered: all is well
        return Decision(BatchStatus.RUNNING, why)
    return Decision(BatchStatus.RUNNING, why, kind=kind, signal=Signal.TRANSPORT_FAILURE)


def worth_looking_again(no_verdict: NoVerdict) -> bool:
    """Whether the same run should look again after a backoff: not when the read was refused
    for a reason a person must fix first (the key, the balance, a permission)."""
    refusal = no_verdict.refusal
    if isinstance(refusal, EndpointNotFound):
        return False
    return refusal is None or classify(refusal) not in STOPPING
