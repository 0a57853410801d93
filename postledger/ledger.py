"""The ledger: every post, batch and status change of every month, persisted.

Each write is one transaction that holds the month's lock (R5) and goes through
`postledger.record.states.Transitions`, so history and state can never disagree.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, func
from sqlmodel import Session, col, select

from postledger.batches.output import OutputCheck
from postledger.batches.planning import Sized, plan_batches
from postledger.batches.posts import (
    Post,
    changed_parts,
    fingerprint,
    input_parts,
    legacy_fingerprint,
)
from postledger.failures.policy import Decision
from postledger.guards.approvals import Approvals
from postledger.guards.breaker import apply_signal, check_may_start
from postledger.guards.charges import account, check_budget, settle
from postledger.guards.spend import Price, estimate, unpriced_budget
from postledger.guards.spill import SpillKind
from postledger.record.db import BREAKERS, WriteLocks, create_schema, make_engine
from postledger.record.migrate import check_current, current_revision
from postledger.record.models import (
    BatchRecord,
    BatchStatus,
    Charge,
    EntityKind,
    FailureKind,
    PostRecord,
    PostStatus,
    SpendRecord,
    SpillImportRecord,
    batch_id_for,
    month_of,
    utcnow,
)
from postledger.record.month_lease import MonthLeases, check_holds
from postledger.record.reads import LedgerError, LedgerReads
from postledger.record.states import Transitions


@dataclass(frozen=True)
class SyncReport:
    new: int
    unchanged: int
    changed: int


@dataclass(frozen=True)
class PlanReport:
    batches: list[BatchRecord]
    too_long: int


_shared: dict[str, Ledger] = {}
_shared_guard = threading.Lock()


def open_ledger(url: str) -> Ledger:
    """The process's one Ledger for `url`: engines are thread-safe and costly to make, and one
    set of month locks per process is what serializes its threads."""
    with _shared_guard:
        if url not in _shared:
            _shared[url] = Ledger(url)
        return _shared[url]


class Ledger(LedgerReads):
    def __init__(
        self, url: str, *, read_only: bool = False, busy_timeout: float | None = None
    ) -> None:
        from postledger.settings import Settings

        self.url = url
        self.engine: Engine = make_engine(
            url,
            read_only=read_only,
            busy_timeout=busy_timeout or Settings().sqlite_busy_timeout,
        )
        if read_only:
            check_current(self.engine)
        else:
            create_schema(self.engine)
        self._locks = WriteLocks(self.engine)
        self.approvals = Approvals(self.engine, self._locks)  # breakers and people's answers
        self.leases = MonthLeases(self._locks)  # one run per month

    def close(self) -> None:
        self.engine.dispose()

    def schema_revision(self) -> str | None:
        """The Alembic revision the ledger's schema is at."""
        with self.engine.connect() as connection:
            return current_revision(connection)

    # --- sessions --------------------------------------------------------------------------

    @contextmanager
    def _write(self, month: str) -> Iterator[tuple[Session, Transitions]]:
        with self._locks.session(month) as session:
            yield session, Transitions(session, month)

    # --- input -----------------------------------------------------------------------------

    def sync_posts(
        self, month: str, posts: Sequence[Post], *, model: str, prompt: str
    ) -> SyncReport:
        """Make the ledger know every post of the file: new ones `pending`, unchanged ones as
        they were, changed ones (text, model or prompt, R25) back to `pending`."""
        new = unchanged = changed = 0
        with self._write(month) as (session, moves):
            known = {
                p.post_id: p
                for p in session.exec(select(PostRecord).where(PostRecord.month == month))
            }
            for position, post in enumerate(posts):
                parts = input_parts(post.text, model, prompt)
                print_ = fingerprint(post.text, model, prompt)
                record = known.get(post.id)
                if record is None:
                    session.add(
                        PostRecord(
                            month=month,
                            post_id=post.id,
                            position=position,
                            text=post.text,
                            fingerprint=print_,
                            inputs=parts,
                        )
                    )
                    moves.created(EntityKind.POST, post.id, PostStatus.PENDING, "read from input")
                    new += 1
                    continue
                record.position = position
                if record.inputs is None and record.fingerprint == legacy_fingerprint(
                    post.text, model, prompt
                ):
                    record.fingerprint, record.inputs = print_, parts  # same work, new digest
                if record.fingerprint == print_:
                    unchanged += 1
                    session.add(record)
                    continue
                # R25: nothing of the old work is reused: not its result, not its batch.
                changed += 1
                why = f"input changed ({changed_parts(record.inputs, parts)}): starts over"
                record.text, record.fingerprint, record.inputs = post.text, print_, parts
                record.result, record.batch_id = None, None
                # New work: its own limits (R15, R12), whatever the old input cost.
                record.attempts, record.requeues, record.extra_attempts = 0, 0, 0
                record.split = False
                if record.status is PostStatus.PENDING:
                    session.add(record)
                else:
                    moves.post(record, PostStatus.PENDING, why)
        return SyncReport(new=new, unchanged=unchanged, changed=changed)

    # --- planning --------------------------------------------------------------------------

    def replan_unsent(self, month: str) -> int:
        """Dissolve batches planned by an earlier run but never sent: they cost nothing, and
        their posts are planned again under the current limits. Returns the posts freed."""
        freed = 0
        with self._write(month) as (session, moves):
            for batch in session.exec(
                select(BatchRecord).where(
                    BatchRecord.month == month,
                    BatchRecord.status == BatchStatus.QUEUED,
                    BatchRecord.sends == 0,
                )
            ):
                for post in self._posts_of(session, batch, PostStatus.QUEUED):
                    moves.post(post, PostStatus.PENDING, f"batch {batch.batch_id} re-planned")
                    post.batch_id = None
                    freed += 1
                moves.batch(
                    batch, BatchStatus.CANCELLED, "never sent; its posts were planned again"
                )
        return freed

    def plan(
        self, month: str, *, max_posts: int, max_chars: int, max_attempts: int | None = None
    ) -> PlanReport:
        """Put every `pending` post into a new batch (R7); posts too long to send end `failed`,
        and so do posts with no paid attempt left under `max_attempts` (R15)."""
        with self._write(month) as (session, moves):
            pending = list(
                session.exec(
                    select(PostRecord)
                    .where(PostRecord.month == month, PostRecord.status == PostStatus.PENDING)
                    .order_by(col(PostRecord.position))
                )
            )
            if max_attempts is not None:
                pending = self._fail_capped(moves, pending, max_attempts)
            by_id = {p.post_id: p for p in pending}
            plan = plan_batches(
                [Sized(p.post_id, len(p.text)) for p in pending],
                max_posts=max_posts,
                max_chars=max_chars,
            )
            for sized in plan.too_long:
                moves.post(
                    by_id[sized.post_id],
                    PostStatus.FAILED,
                    f"the post has {sized.chars} characters, more than max_batch_chars="
                    f"{max_chars}: it was never sent. Shorten it, or raise "
                    "POSTLEDGER_MAX_BATCH_CHARS",
                    failure=FailureKind.TOO_LONG,
                )
            batches = self._new_batches(session, moves, month, plan.batches, by_id)
        return PlanReport(batches=batches, too_long=len(plan.too_long))

    @staticmethod
    def _fail_capped(
        moves: Transitions, posts: list[PostRecord], max_attempts: int
    ) -> list[PostRecord]:
        """Posts that have had every paid attempt they may have end here; the rest are returned."""
        left = []
        for post in posts:
            if post.attempts >= max_attempts + post.extra_attempts:
                why = f"{post.attempts} paid attempts made, the limit: not sent again"
                moves.post(post, PostStatus.FAILED, why, failure=FailureKind.ATTEMPTS_EXHAUSTED)
            else:
                left.append(post)
        return left

    def _new_batches(
        self,
        session: Session,
        moves: Transitions,
        month: str,
        groups: list[list[str]],
        by_id: dict[str, PostRecord],
        *,
        split_from: str | None = None,
    ) -> list[BatchRecord]:
        last_seq = session.exec(
            select(func.max(BatchRecord.seq)).where(BatchRecord.month == month)
        ).one()
        batches = []
        for offset, post_ids in enumerate(groups, start=1):
            seq = (last_seq or 0) + offset
            batch = BatchRecord(
                batch_id=batch_id_for(month, seq),
                month=month,
                seq=seq,
                post_ids=post_ids,
                idempotency_key=f"postledger-{uuid.uuid4()}",
                split_from=split_from,
            )
            session.add(batch)
            origin = f", half of {split_from}" if split_from else ""
            moves.created(
                EntityKind.BATCH,
                batch.batch_id,
                BatchStatus.QUEUED,
                f"planned with {len(post_ids)} posts{origin}",
            )
            for post_id in post_ids:
                by_id[post_id].batch_id = batch.batch_id
                moves.post(by_id[post_id], PostStatus.QUEUED, f"planned in {batch.batch_id}")
            batches.append(batch)
        return batches

    # --- one batch's life ------------------------------------------------------------------

    def mark_running(
        self,
        batch_id: str,
        upstream: str | None = None,
        *,
        idempotent: bool = True,
        price: Price | None = None,
        prompt: str = "",
        max_cost: int | None = None,
        holder: str | None = None,
        max_attempts: int | None = None,
    ) -> tuple[BatchRecord, list[PostRecord]]:
        """Persist the intent to pay before paying (R3): the batch and its posts `running`,
        each post's business attempt counted. Only after this returns may the AI be called.
        With `upstream`, its breaker is asked first, in the same transaction: `BreakerHeld`
        when it does not let the batch start (R18), and nothing is changed.

        With `max_cost`, the month's budget is asked too: `BudgetHeld`, and nothing changed,
        when a new charge could cross it.

        A batch sent again with its same idempotency key is the same attempt when the upstream
        honours keys (it charges a key once); otherwise it is a new attempt.

        With `holder`, the run must still hold the month (`MonthLost` otherwise): a run that
        lost its claim to another never starts a batch. With `max_attempts`, a new attempt
        beyond a post's cap is refused (`LedgerError`): planning never asks for one."""
        if max_cost is not None and price is None:
            raise LedgerError(unpriced_budget("configured"))
        month = month_of(batch_id)
        with self._write(month) as (session, moves):
            if holder is not None:
                check_holds(session, month, holder)
            batch = self._batch(session, batch_id)
            if upstream is not None:
                self._locks.also(session, BREAKERS)
                check_may_start(session, upstream, batch)
            moves.batch(batch, BatchStatus.RUNNING, "about to call the upstream")
            batch.upstream, batch.sent_by = upstream, holder
            posts = self._posts_of(session, batch, PostStatus.QUEUED)
            if not posts:
                raise LedgerError(f"batch {batch_id} has no post left to send")
            if batch.request is None:
                if len(posts) != len(batch.post_ids):
                    raise LedgerError(
                        f"batch {batch_id} lists {len(batch.post_ids)} posts but only "
                        f"{len(posts)} are queued in it: the ledger changed under this run"
                    )
                # What is sent is kept: a send again under the same key must be the same
                # request, even if some posts changed since (they have left the batch, R25).
                batch.request = [[p.post_id, p.text] for p in posts]
            first = batch.charge is Charge.NONE or not idempotent
            estimated = (
                estimate(price, prompt, [text for _, text in batch.request])
                if price is not None and first
                else None
            )
            if first and max_attempts is not None:
                over = [p.post_id for p in posts if p.attempts >= max_attempts + p.extra_attempts]
                if over:
                    raise LedgerError(
                        f"batch {batch_id}: posts {over} have had every paid attempt they may "
                        "have; this is a bug in postledger, nothing was sent"
                    )
            if first and max_cost is not None:
                check_budget(session, month, estimated, max_cost)  # nothing changed if held
            batch.sends += 1
            batch.not_before = None
            if batch.charge is Charge.NONE:
                batch.charge = Charge.POSSIBLE
            if first:  # a charge that may happen: on the books before the call (R3)
                session.add(
                    SpendRecord(
                        month=month,
                        batch_id=batch_id,
                        send=batch.sends,
                        estimated_cost=estimated,
                    )
                )
            for post in posts:
                post.attempts += 1 if first else 0
                moves.post(
                    post,
                    PostStatus.RUNNING,
                    f"{batch_id} sent (attempt {post.attempts}"
                    + ("" if first else f", same key, send {batch.sends}")
                    + ")",
                )
        return batch, posts

    def record_task_id(self, batch_id: str, task_id: str, *, adopted: str | None = None) -> None:
        """Save the upstream task id the moment it is known: recovery polls it (R23).

        `adopted`: the id was never saved by the run that made the task and was found
        upstream afterwards (why, and how); it is logged as an event of the batch, whose
        status stays as it is."""
        month = month_of(batch_id)
        with self._write(month) as (session, moves):
            batch = self._batch(session, batch_id)
            if adopted is not None:
                if batch.upstream_task_id is not None or batch.status is not BatchStatus.RUNNING:
                    raise LedgerError(f"batch {batch_id} has no orphaned upstream task to adopt")
                moves.noted(EntityKind.BATCH, batch_id, batch.status, adopted)
            batch.upstream_task_id = task_id
            batch.charge = Charge.CONFIRMED
            session.add(batch)

    def save_output(
        self, batch_id: str, raw: str, usage: dict[str, Any] | None, price: Price | None = None
    ) -> None:
        """Persist the raw output before checking it (R4): a crash while validating loses
        nothing, and nobody pays for it again. The charge is settled from the usage."""
        month = month_of(batch_id)
        with self._write(month) as (session, moves):
            batch = self._batch(session, batch_id)
            batch.raw_output, batch.usage = raw, usage
            settle(session, batch_id, usage, price)
            moves.batch(batch, BatchStatus.RECEIVED, "output saved, not yet validated")
            for post in self._posts_of(session, batch, PostStatus.RUNNING):
                moves.post(post, PostStatus.RECEIVED, "output saved, not yet validated")

    def apply(
        self,
        batch_id: str,
        decision: Decision,
        check: OutputCheck | None = None,
        *,
        upstream: str | None = None,
    ) -> None:
        """Carry out a business decision (postledger.failures.policy) in one transaction: successes
        saved first (R13), the others retried, split, made to wait or ended with a reason;
        and what the outcome tells `upstream`'s breaker (R18)."""
        month = month_of(batch_id)
        with self._write(month) as (session, moves):
            batch = self._batch(session, batch_id)
            if upstream is not None and decision.signal is not None:
                self._locks.also(session, BREAKERS)
                apply_signal(
                    session,
                    upstream,
                    decision.signal,
                    f"{batch_id}: {decision.why}",
                    month=month,
                    sent_at=batch.started_at,
                )
            if decision.uncertain:
                # Nothing is final: the batch and its posts stay running for recovery (R23,
                # R24). No run handles it any more, so it holds no probe (R18).
                batch.sent_by = None
                session.add(batch)
                moves.noted(
                    EntityKind.BATCH, batch_id, batch.status, f"outcome unknown: {decision.why}"
                )
                return
            posts = {
                p.post_id: p
                for p in self._posts_of(session, batch, PostStatus.RUNNING, PostStatus.RECEIVED)
            }
            for move in decision.moves:
                post = posts.pop(move.post_id)
                if move.to is PostStatus.COMPLETED:
                    assert check is not None, "a completed post needs the checked output"
                    post.result = check.valid[move.post_id].model_dump(mode="json", exclude={"id"})
                if move.refund:
                    post.attempts -= 1
                if move.requeue:
                    post.requeues += 1
                if move.to in (PostStatus.PENDING, PostStatus.WAITING):
                    post.batch_id = None
                moves.post(post, move.to, move.why, failure=move.kind)
                post.not_before = move.not_before
            if decision.halves:
                halves = [[posts.pop(pid) for pid in half] for half in decision.halves]
                by_id = {p.post_id: p for half in halves for p in half}
                for post in by_id.values():
                    post.split = True  # one split per lineage, whatever batch it goes into
                self._new_batches(
                    session, moves, month, decision.halves, by_id, split_from=batch_id
                )
            if posts:
                raise LedgerError(
                    f"the decision for {batch_id} left posts without a move: {sorted(posts)}"
                )
            if decision.nothing_charged:
                batch.charge = Charge.NONE
            account(session, batch, decision)
            moves.batch(batch, decision.batch_to, decision.why, failure=decision.kind)
            batch.not_before = decision.batch_not_before

    def import_spill(self, records: list[dict[str, Any]], price: Price | None = None) -> int:
        """Take in what batches spilled while the ledger could not be written (R20). Safe to
        repeat: a record is taken in once (by its id), and a fact the ledger already has is
        skipped. Returns the records taken in."""
        taken = 0
        for record in records:
            batch_id = record["batch_id"]
            with self._write(month_of(batch_id)) as (session, moves):
                record_id = record.get("id")
                if record_id is not None:
                    if session.get(SpillImportRecord, record_id) is not None:
                        continue
                    kind = str(record["kind"])
                    session.add(
                        SpillImportRecord(record_id=record_id, batch_id=batch_id, kind=kind)
                    )
                taken += self._take_spilled(session, moves, record, price)
        return taken

    def _take_spilled(
        self,
        session: Session,
        moves: Transitions,
        record: dict[str, Any],
        price: Price | None,
    ) -> int:
        batch = self._batch(session, record["batch_id"])
        kind = SpillKind(record["kind"])
        task_id = record.get("task_id")
        taken = 0
        if task_id and batch.upstream_task_id is None:
            batch.upstream_task_id, batch.charge = task_id, Charge.CONFIRMED
            session.add(batch)
            taken += kind is SpillKind.TASK_ID
        if kind is SpillKind.REQUEST_RETRY:
            batch.request_retries += 1
            session.add(batch)
            taken += 1
        if kind is SpillKind.OUTPUT and batch.status is BatchStatus.RUNNING:
            why = "output saved from the spill file, not yet validated"
            batch.raw_output, batch.usage = record["output"], record.get("usage")
            settle(session, batch.batch_id, batch.usage, price)
            moves.batch(batch, BatchStatus.RECEIVED, why)
            for post in self._posts_of(session, batch, PostStatus.RUNNING):
                moves.post(post, PostStatus.RECEIVED, why)
            taken += 1
        return taken

    def resend_later(self, batch_id: str, why: str, *, max_attempts: int | None = None) -> None:
        """A person confirmed that an interrupted batch with no task id may be sent again
        (R24): back to `queued`, with its same idempotency key and request. A post that has
        had every paid attempt it may have gets one more: the person said yes to this one."""
        with self._write(month_of(batch_id)) as (session, moves):
            batch = self._batch(session, batch_id)
            moves.batch(batch, BatchStatus.QUEUED, why)
            for post in self._posts_of(session, batch, PostStatus.RUNNING):
                if max_attempts is not None and post.attempts >= max_attempts + post.extra_attempts:
                    post.extra_attempts += 1
                moves.post(post, PostStatus.QUEUED, why)

    def close_emptied(self, month: str) -> list[str]:
        """Batches sent before whose posts all changed since (R25): nothing of them is reused
        and nothing is sent again under their key. Returns their ids."""
        closed = []
        with self._write(month) as (session, moves):
            candidates = session.exec(
                select(BatchRecord).where(
                    BatchRecord.month == month,
                    col(BatchRecord.status).in_([BatchStatus.QUEUED, BatchStatus.RUNNING]),
                    BatchRecord.sends > 0,
                )
            ).all()
            for batch in candidates:
                if not self._posts_of(session, batch):
                    why = "every post of it changed since it was sent: it is not sent again"
                    moves.batch(batch, BatchStatus.FAILED, why, failure=FailureKind.INPUT_CHANGED)
                    closed.append(batch.batch_id)
        return closed

    def release_due(self, month: str, now: datetime | None = None) -> int:
        """Posts whose wait is over go back to `pending`, to be planned again (R11)."""
        now = now or utcnow()
        with self._write(month) as (session, moves):
            due = [
                p
                for p in session.exec(
                    select(PostRecord).where(
                        PostRecord.month == month, PostRecord.status == PostStatus.WAITING
                    )
                )
                if p.not_before is None or p.not_before <= now
            ]
            for post in due:
                moves.post(post, PostStatus.PENDING, "wait over")
        return len(due)

    def retry_failed(self, month: str, kinds: set[FailureKind] | None = None) -> int:
        """A person's decision: failed posts (of these kinds) are planned again."""
        with self._write(month) as (session, moves):
            query = select(PostRecord).where(
                PostRecord.month == month, PostRecord.status == PostStatus.FAILED
            )
            failed = [p for p in session.exec(query) if kinds is None or p.failure_kind in kinds]
            for post in failed:
                post.batch_id = None
                # The person's yes buys each post its full number of paid attempts again (R15).
                post.extra_attempts = post.attempts
                moves.post(post, PostStatus.PENDING, f"retry asked for ({post.failure_kind})")
        return len(failed)

    def count_gateway_retries(
        self, batch_id: str, retries: int, *, price: Price | None = None, prompt: str = ""
    ) -> None:
        """A gateway between us and the upstream says it retried this batch's request on its
        own: each retry may have been charged, so each is on the books as a possible charge."""
        if retries <= 0:
            return
        month = month_of(batch_id)
        with self._write(month) as (session, moves):
            batch = self._batch(session, batch_id)
            batch.gateway_retries += retries
            texts = [text for _, text in batch.request or []]
            estimated = estimate(price, prompt, texts) if price is not None else None
            for _ in range(retries):
                session.add(
                    SpendRecord(
                        month=month, batch_id=batch_id, send=batch.sends, estimated_cost=estimated
                    )
                )
            session.add(batch)
            moves.noted(
                EntityKind.BATCH,
                batch_id,
                batch.status,
                f"the gateway retried the request {retries}x on its own: possibly charged again",
            )

    def count_request_retry(self, batch_id: str) -> None:
        """One more request-layer retry for this batch (R16: not a business attempt)."""
        month = month_of(batch_id)
        with self._write(month) as (session, _):
            batch = self._batch(session, batch_id)
            batch.request_retries += 1
            session.add(batch)
