"""The transition table: every legal move is logged, every illegal one raises and changes
nothing."""

from __future__ import annotations

import itertools

import pytest
from sqlmodel import Session, col, select

from postledger.ledger import Ledger
from postledger.record.models import (
    BatchRecord,
    BatchStatus,
    EntityKind,
    EventRecord,
    FailureKind,
    PostRecord,
    PostStatus,
)
from postledger.record.states import (
    BATCH_TRANSITIONS,
    POST_TRANSITIONS,
    IllegalTransition,
    Transitions,
)
from tests.support.ledgers import recount_posts

POST_PAIRS = list(itertools.product(PostStatus, PostStatus))
BATCH_PAIRS = list(itertools.product(BatchStatus, BatchStatus))


def _failure(target: object) -> FailureKind | None:
    return FailureKind.TRANSPORT if target in (PostStatus.FAILED, BatchStatus.FAILED) else None


@pytest.mark.parametrize(
    ("current", "target"), POST_PAIRS, ids=[f"{a}->{b}" for a, b in POST_PAIRS]
)
def test_post_transition(ledger: Ledger, current: PostStatus, target: PostStatus) -> None:
    with Session(ledger.engine) as session:
        post = PostRecord(
            month="2026-10", post_id="p1", position=0, text="t", fingerprint="f", status=current
        )
        session.add(post)
        session.commit()
        recount_posts(session)
        moves = Transitions(session, "2026-10")
        if target in POST_TRANSITIONS[current]:
            moves.post(post, target, "test", failure=_failure(target))
            session.commit()
            # Session.get is typed `| None`: the post was added above.
            assert session.get(PostRecord, ("2026-10", "p1")).status is target  # type: ignore[union-attr]
            event = session.exec(select(EventRecord)).one()
            assert (event.from_status, event.to_status, event.why) == (current, target, "test")
        else:
            with pytest.raises(IllegalTransition):
                moves.post(post, target, "test", failure=_failure(target))
            assert post.status is current
            assert session.exec(select(EventRecord)).all() == []


@pytest.mark.parametrize(
    ("current", "target"), BATCH_PAIRS, ids=[f"{a}->{b}" for a, b in BATCH_PAIRS]
)
def test_batch_transition(ledger: Ledger, current: BatchStatus, target: BatchStatus) -> None:
    with Session(ledger.engine) as session:
        batch = BatchRecord(
            batch_id="2026-10-b0001",
            month="2026-10",
            seq=1,
            post_ids=["p1"],
            idempotency_key="k",
            status=current,
        )
        session.add(batch)
        session.commit()
        moves = Transitions(session, "2026-10")
        if target in BATCH_TRANSITIONS[current]:
            moves.batch(batch, target, "test", failure=_failure(target))
            assert batch.status is target
        else:
            with pytest.raises(IllegalTransition):
                moves.batch(batch, target, "test", failure=_failure(target))
            assert batch.status is current
            assert session.exec(select(EventRecord)).all() == []


def test_terminal_states_only_restart() -> None:
    assert POST_TRANSITIONS[PostStatus.COMPLETED] == {PostStatus.PENDING}
    assert BATCH_TRANSITIONS[BatchStatus.COMPLETED] == frozenset()
    assert BATCH_TRANSITIONS[BatchStatus.CANCELLED] == frozenset()


def test_failed_needs_a_kind_and_only_failed_has_one(ledger: Ledger) -> None:
    with Session(ledger.engine) as session:
        post = PostRecord(
            month="2026-10",
            post_id="p1",
            position=0,
            text="t",
            fingerprint="f",
            status=PostStatus.RUNNING,
        )
        moves = Transitions(session, "2026-10")
        with pytest.raises(ValueError, match="failure kind"):
            moves.post(post, PostStatus.FAILED, "no kind")
        with pytest.raises(ValueError, match="failure kind"):
            moves.post(post, PostStatus.RECEIVED, "kind", failure=FailureKind.TRANSPORT)
        assert post.status is PostStatus.RUNNING


def test_only_the_state_machine_assigns_a_status() -> None:
    """'Nobody else flips a status': no module but states.py assigns `.status` or a
    breaker's `.level`."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    offenders = [
        str(path.relative_to(root))
        for folder in ("postledger", "flows", "tasks", "blocks")
        for path in (root / folder).rglob("*.py")
        if path.name != "states.py"
        and re.search(r"\.(status|level)\s*=[^=]", path.read_text(encoding="utf-8"))
    ]
    assert offenders == []


def test_breaker_levels_move_only_along_the_table(ledger: Ledger) -> None:
    from postledger.record.models import BreakerLevel, BreakerRecord
    from postledger.record.states import BREAKER_TRANSITIONS, move_breaker

    engine = ledger.engine
    for current in BreakerLevel:
        for target in BreakerLevel:
            with Session(engine) as session:
                breaker = BreakerRecord(upstream="u", level=current)
                if target in BREAKER_TRANSITIONS[current]:
                    move_breaker(session, breaker, target, "test")
                    assert breaker.level is target
                else:
                    with pytest.raises(IllegalTransition):
                        move_breaker(session, breaker, target, "test")
                    assert breaker.level is current


@pytest.mark.parametrize("staged", [False, True], ids=["executemany", "staged"])
def test_a_bulk_move_moves_each_post_once_and_fails_whole_if_one_moved_on(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch, staged: bool
) -> None:
    """`posts_by_id` on either ledger, both ways (on PostgreSQL a big move is one UPDATE
    joined to the rows COPYed in; `staged` makes these few rows count as big): each post gets
    its own reason; if one is not in the expected state any more, the transaction fails and
    nothing moves."""
    from postledger.record import states
    from postledger.record.states import LedgerConflict, PostChange

    if staged:
        monkeypatch.setattr(states, "STAGE_FROM", 1)

    with Session(ledger.engine) as session:
        for i, status in enumerate([PostStatus.PENDING, PostStatus.PENDING, PostStatus.QUEUED]):
            session.add(
                PostRecord(
                    month="2026-10",
                    post_id=f"p{i}",
                    position=i,
                    text="t",
                    fingerprint="f",
                    status=status,
                )
            )
        session.commit()
        recount_posts(session)
        moves = Transitions(session, "2026-10")
        moves.noted(EntityKind.POST, "p2", PostStatus.QUEUED, "logged before the move")
        changes = [PostChange("p0", "first"), PostChange("p1", "second")]
        moves.posts_by_id(PostStatus.PENDING, PostStatus.QUEUED, changes)
        moves.noted(EntityKind.POST, "p2", PostStatus.QUEUED, "logged after the move")
        session.commit()
        # Staged or bound, the same events in the same order, numbered without a gap.
        logged = [
            (e.seq, e.entity, e.entity_id, e.from_status, e.to_status)
            for e in session.exec(select(EventRecord).order_by(col(EventRecord.seq)))
        ]
        assert logged == [
            (1, EntityKind.POST, "p2", PostStatus.QUEUED, PostStatus.QUEUED),
            (2, EntityKind.POST, "p0", PostStatus.PENDING, PostStatus.QUEUED),
            (3, EntityKind.POST, "p1", PostStatus.PENDING, PostStatus.QUEUED),
            (4, EntityKind.POST, "p2", PostStatus.QUEUED, PostStatus.QUEUED),
        ]
        got = {p.post_id: p.status for p in session.exec(select(PostRecord))}
        assert got == dict.fromkeys(("p0", "p1", "p2"), PostStatus.QUEUED)
        whys = {e.entity_id: e.why for e in session.exec(select(EventRecord))}
        assert (whys["p0"], whys["p1"]) == ("first", "second")

        # p9 is not in the month at all: the move of p0 with it must not happen either.
        stale = [PostChange("p0", "again"), PostChange("p9", "not there")]
        with pytest.raises(LedgerConflict):
            Transitions(session, "2026-10").posts_by_id(
                PostStatus.QUEUED, PostStatus.PENDING, stale
            )
        session.rollback()
        after = {p.post_id: p.status for p in session.exec(select(PostRecord))}
        assert after == {"p0": PostStatus.QUEUED, "p1": PostStatus.QUEUED, "p2": PostStatus.QUEUED}
