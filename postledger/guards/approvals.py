"""Breakers and the questions put to people, as the ledger keeps them.

Both are global (every month shares an upstream's breaker), so their writes take the breakers'
lock, not a month's. A person's answer is one transaction: the question is closed and, on
"continue", the breaker leaves `open` for `probe` (R19) — whether the answer reached a paused
run or was given while no run waited (R44).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine
from sqlmodel import Session, col, select

from postledger.guards.breaker import Signal
from postledger.guards.breaker_state import apply_signal, breaker_for_update
from postledger.record.db import BREAKERS, WriteLocks
from postledger.record.models import (
    Answer,
    ApprovalRecord,
    BreakerEventRecord,
    BreakerLevel,
    BreakerRecord,
    Question,
    utcnow,
)
from postledger.record.states import move_breaker, note_breaker


class Approvals:
    def __init__(self, engine: Engine, locks: WriteLocks) -> None:
        self._engine = engine
        self._locks = locks

    @contextmanager
    def _write(self) -> Iterator[Session]:
        with self._locks.session(BREAKERS) as session:
            yield session

    # --- breakers --------------------------------------------------------------------------

    def breaker(self, upstream: str) -> BreakerRecord:
        """The breaker of `upstream`; one that never tripped is `normal`."""
        with Session(self._engine) as session:
            return session.get(BreakerRecord, upstream) or BreakerRecord(upstream=upstream)

    def history(self, upstream: str | None = None, limit: int = 20) -> list[BreakerEventRecord]:
        """The latest breaker events, oldest first."""
        with Session(self._engine) as session:
            query = select(BreakerEventRecord)
            if upstream is not None:
                query = query.where(BreakerEventRecord.upstream == upstream)
            rows = session.exec(query.order_by(col(BreakerEventRecord.id).desc()).limit(limit))
            return list(reversed(list(rows)))

    def signal(self, upstream: str, signal: Signal, why: str, *, month: str) -> BreakerRecord:
        """Tell the breaker what a batch's upstream calls ended with (outside a batch's own
        transaction: batches pass their signal to `Ledger.apply` instead)."""
        with self._write() as session:
            return apply_signal(session, upstream, signal, why, month=month)

    # --- questions and answers -------------------------------------------------------------

    def ask(
        self,
        month: str,
        upstream: str,
        question: str,
        *,
        flow_run_id: str | None,
        prefect_api_url: str | None,
        kind: Question = Question.BREAKER,
        batch_ids: list[str] | None = None,
    ) -> ApprovalRecord:
        """Record that a run paused for a person; earlier open questions of the month lapse."""
        with self._write() as session:
            for old in self._unanswered(session, month, kind):
                _answered(
                    session, old, Answer.TIMED_OUT, note="", by="superseded by a newer question"
                )
            record = ApprovalRecord(
                month=month,
                upstream=upstream,
                kind=kind,
                question=question,
                flow_run_id=flow_run_id,
                prefect_api_url=prefect_api_url,
                batch_ids=batch_ids,
            )
            session.add(record)
            return record

    def waiting(self, month: str) -> ApprovalRecord | None:
        """The month's open question, if a run asked one and nobody answered yet."""
        with Session(self._engine) as session:
            open_ = self._unanswered(session, month)
            return open_[-1] if open_ else None

    def approvals(self, month: str) -> list[ApprovalRecord]:
        with Session(self._engine) as session:
            return list(
                session.exec(
                    select(ApprovalRecord)
                    .where(ApprovalRecord.month == month)
                    .order_by(col(ApprovalRecord.id))
                )
            )

    def asked_since(self, month: str, question_id: int | None) -> bool:
        """Whether the month has a question newer than `question_id`: a run's pause is then
        for that newer one."""
        return question_id is not None and any(
            q.id is not None and q.id > question_id for q in self.approvals(month)
        )

    def answer(
        self,
        month: str,
        upstream: str,
        answer: Answer,
        *,
        note: str,
        by: str,
        question_id: int | None = None,
    ) -> BreakerRecord:
        """A person's answer (or the lack of one): the month's open question is closed and, on
        continue, an open breaker goes to probe. Returns the breaker as it now is. With
        `question_id`, an answer to that question only: if it was answered already (say by
        `postledger approve`, before it resumed the run), nothing more is recorded."""
        with self._write() as session:
            if question_id is not None:
                asked = session.get(ApprovalRecord, question_id)
                if asked is not None and asked.answer is not None:
                    return breaker_for_update(session, upstream)
            for question in self._unanswered(session, month, Question.BREAKER):
                _answered(session, question, answer, note=note, by=by)
            breaker = breaker_for_update(session, upstream)
            said = f" ({note})" if note else ""
            if answer is Answer.CONTINUE and breaker.level is BreakerLevel.OPEN:
                why = f"a person said continue through {by}{said}: one batch at a time first"
                move_breaker(session, breaker, BreakerLevel.PROBE, why, month=month)
            elif answer is Answer.CONTINUE:
                note_breaker(session, breaker, f"continue through {by}{said}", month=month)
            elif answer is Answer.STOP:
                note_breaker(
                    session, breaker, f"a person said stop through {by}{said}", month=month
                )
            else:
                note_breaker(session, breaker, f"nobody answered ({by}); it stays", month=month)
            return breaker

    def answer_recovery(
        self,
        month: str,
        upstream: str,
        *,
        poll: bool,
        resubmit: bool,
        note: str,
        by: str,
        batch_ids: list[str],
        question_id: int | None = None,
        shown_seq: int | None = None,
    ) -> ApprovalRecord:
        """A person's answer about interrupted batches (R22-R24): poll the known tasks, resubmit
        the unknown ones. It covers `batch_ids` only, as they were when shown — the month's
        events up to `shown_seq` (`postledger.recovery.steps.coverage`) — and is used once.
        Answering a paused run's question closes it; with no question, the answer waits for the
        next run. Any earlier answer of the month that no run used is replaced by this one."""
        with self._write() as session:
            record = session.get(ApprovalRecord, question_id) if question_id else None
            if record is not None and record.answer is not None:
                # Answered already (postledger approve, before resuming the run): the run that
                # showed the batches knows as of when, if the answer did not say.
                if record.shown_seq is None and shown_seq is not None:
                    record.shown_seq = shown_seq
                    session.add(record)
                return record
            if record is None:
                record = ApprovalRecord(
                    month=month,
                    upstream=upstream,
                    kind=Question.RECOVERY,
                    question="answered with no run waiting",
                    batch_ids=batch_ids,
                )
            if record.shown_seq is None:
                record.shown_seq = shown_seq
            record.poll, record.resubmit = poll, resubmit
            answer = Answer.CONTINUE if poll or resubmit else Answer.STOP
            _answered(session, record, answer, note=note, by=by)
            # The newest word about the month's interrupted batches decides: an older yes left
            # unused must not send again a batch this answer says no to.
            for older in self._unused_recovery(session, month):
                if older is not record:
                    older.used_at = record.answered_at
                    session.add(older)
            return record

    def shown(self, month: str, shown_seq: int | None) -> None:
        """The month's open question about interrupted batches showed them as of event
        `shown_seq`: kept with it, so that an answer given to it by `postledger approve` that
        no run takes up covers them only as they were then."""
        with self._write() as session:
            for question in self._unanswered(session, month, Question.RECOVERY):
                if question.shown_seq is None:
                    question.shown_seq = shown_seq
                    session.add(question)

    def close(self, question_id: int, answer: Answer, *, note: str, by: str) -> ApprovalRecord:
        """Answer one question (a budget's: go on or stop). An answered question stays as it
        was answered first."""
        with self._write() as session:
            record = session.get(ApprovalRecord, question_id)
            if record is None:
                raise ValueError(f"no question {question_id} in the ledger")
            if record.answer is None:
                _answered(session, record, answer, note=note, by=by)
            return record

    def lapse(self, question_id: int, by: str) -> None:
        """Nobody answered the question in time: it is closed, and nothing was said yes to."""
        with self._write() as session:
            record = session.get(ApprovalRecord, question_id)
            if record is not None and record.answer is None:
                _answered(session, record, Answer.TIMED_OUT, note="", by=by)

    def standing_recovery(self, month: str) -> ApprovalRecord | None:
        """The latest answer about interrupted batches that no run has used yet."""
        with Session(self._engine) as session:
            unused = self._unused_recovery(session, month)
            return unused[-1] if unused else None

    @staticmethod
    def _unused_recovery(session: Session, month: str) -> list[ApprovalRecord]:
        """The month's answers about interrupted batches that no run has used, oldest first."""
        return list(
            session.exec(
                select(ApprovalRecord)
                .where(
                    ApprovalRecord.month == month,
                    ApprovalRecord.kind == Question.RECOVERY,
                    col(ApprovalRecord.answer).in_([Answer.CONTINUE, Answer.STOP]),
                    col(ApprovalRecord.used_at).is_(None),
                )
                .order_by(col(ApprovalRecord.id))
            )
        )

    def mark_used(self, approval_id: int) -> None:
        """Every answer about interrupted batches is used once: the next interruption asks again."""
        with self._write() as session:
            record = session.get(ApprovalRecord, approval_id)
            if record is not None:
                record.used_at = utcnow()
                session.add(record)

    @staticmethod
    def _unanswered(
        session: Session, month: str, kind: Question | None = None
    ) -> list[ApprovalRecord]:
        query = select(ApprovalRecord).where(
            ApprovalRecord.month == month, col(ApprovalRecord.answer).is_(None)
        )
        if kind is not None:
            query = query.where(ApprovalRecord.kind == kind)
        return list(session.exec(query.order_by(col(ApprovalRecord.id))))


def _answered(
    session: Session, record: ApprovalRecord, answer: Answer, *, note: str, by: str
) -> None:
    """Close a question with its answer. A question nobody answered holds nothing a later run
    could use, so it is marked used at once."""
    record.answer, record.note = answer, note or None
    record.answered_by, record.answered_at = by, utcnow()
    if answer is Answer.TIMED_OUT:
        record.used_at = record.answered_at
    session.add(record)
