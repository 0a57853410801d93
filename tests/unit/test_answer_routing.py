"""Where `postledger approve` sends a person's answer (`postledger/guards/answer_routing.py`):
which question waits, whether the answer fits it, and what it records. Plain records in, one
outcome out; no ledger."""

from __future__ import annotations

import pytest

from postledger.guards.answer_routing import (
    AnswerBreaker,
    AnswerBudget,
    AnswerRecovery,
    Found,
    NoBatchNeedsAYes,
    NothingWaits,
    NotThisQuestion,
    Route,
    Said,
    StopWithYes,
    UnknownMonth,
    fits,
    read_answer,
    route_answer,
)
from postledger.record.models import Answer, ApprovalRecord, BreakerLevel, Question

PLAIN = Said()
STOP = Said(stop=True)
POLL = Said(poll=True)
RESUBMIT = Said(resubmit=True)
BOTH = Said(poll=True, resubmit=True)


def asked(kind: Question, question_id: int | None = 7) -> ApprovalRecord:
    return ApprovalRecord(id=question_id, month="2026-10", upstream="sim", kind=kind, question="?")


def found(
    question: ApprovalRecord | None = None,
    *,
    known: bool = True,
    breaker: BreakerLevel = BreakerLevel.NORMAL,
    batches_need_yes: bool = False,
) -> Found:
    return Found(question, known, breaker, batches_need_yes)


# --- the flags -----------------------------------------------------------------------------


@pytest.mark.parametrize(("poll", "resubmit"), [(True, False), (False, True), (True, True)])
def test_stop_with_a_yes_is_no_answer(poll: bool, resubmit: bool) -> None:
    assert read_answer(poll=poll, resubmit=resubmit, stop=True) == StopWithYes()
    with pytest.raises(ValueError):
        Said(poll=poll, resubmit=resubmit, stop=True)


@pytest.mark.parametrize(
    ("poll", "resubmit", "stop"),
    [(False, False, False), (False, False, True), (True, False, False), (True, True, False)],
)
def test_flags_that_agree_are_an_answer(poll: bool, resubmit: bool, stop: bool) -> None:
    said = read_answer(poll=poll, resubmit=resubmit, stop=stop)
    assert said == Said(poll=poll, resubmit=resubmit, stop=stop)
    assert isinstance(said, Said)
    assert said.decision is (Answer.STOP if stop else Answer.CONTINUE)


# --- a question waits ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "said", "fit"),
    [
        (Question.RECOVERY, POLL, True),
        (Question.RECOVERY, RESUBMIT, True),
        (Question.RECOVERY, STOP, True),
        (Question.RECOVERY, PLAIN, False),
        (Question.BREAKER, PLAIN, True),
        (Question.BREAKER, STOP, True),
        (Question.BREAKER, POLL, False),
        (Question.BUDGET, PLAIN, True),
        (Question.BUDGET, STOP, True),
        (Question.BUDGET, BOTH, False),
    ],
)
def test_an_answer_fits_its_kind_of_question(kind: Question, said: Said, fit: bool) -> None:
    assert fits(kind, said) is fit
    route = route_answer(said, found(asked(kind)))
    assert isinstance(route, NotThisQuestion) is not fit
    if not fit:
        assert route == NotThisQuestion(kind, said)


@pytest.mark.parametrize(
    ("said", "route"),
    [
        (POLL, AnswerRecovery(poll=True, resubmit=False)),
        (RESUBMIT, AnswerRecovery(poll=False, resubmit=True)),
        (BOTH, AnswerRecovery(poll=True, resubmit=True)),
        (STOP, AnswerRecovery(poll=False, resubmit=False)),  # --stop: no to both
    ],
)
def test_interrupted_batches_asked_about_get_their_yes_or_no(said: Said, route: Route) -> None:
    assert route_answer(said, found(asked(Question.RECOVERY))) == route


@pytest.mark.parametrize("said", [PLAIN, STOP])
def test_the_budget_asked_about_is_closed_with_go_on_or_stop(said: Said) -> None:
    route = route_answer(said, found(asked(Question.BUDGET, 12)))
    assert route == AnswerBudget(12, said.decision)


@pytest.mark.parametrize("said", [PLAIN, STOP])
def test_the_breaker_asked_about_is_answered(said: Said) -> None:
    # Whatever the breaker's level or the batches: the question is what waits.
    route = route_answer(said, found(asked(Question.BREAKER), breaker=BreakerLevel.NORMAL))
    assert route == AnswerBreaker(said.decision)


def test_a_question_waits_whatever_the_ledger_knows_of_the_month() -> None:
    question = found(asked(Question.BREAKER), known=False)
    assert route_answer(PLAIN, question) == AnswerBreaker(Answer.CONTINUE)


# --- no question waits ---------------------------------------------------------------------


@pytest.mark.parametrize("said", [PLAIN, STOP, POLL])
def test_a_month_the_ledger_never_saw_has_nothing_to_answer(said: Said) -> None:
    route = route_answer(said, found(known=False, breaker=BreakerLevel.OPEN))
    assert route == UnknownMonth()


@pytest.mark.parametrize("said", [POLL, RESUBMIT, BOTH])
@pytest.mark.parametrize("level", list(BreakerLevel))
def test_a_yes_with_no_run_waiting_is_kept_for_the_next_run(
    said: Said, level: BreakerLevel
) -> None:
    route = route_answer(said, found(breaker=level, batches_need_yes=True))
    assert route == AnswerRecovery(poll=said.poll, resubmit=said.resubmit)


@pytest.mark.parametrize("said", [POLL, RESUBMIT, BOTH])
def test_a_yes_no_batch_needs_is_not_taken_for_a_yes_to_the_open_breaker(said: Said) -> None:
    assert route_answer(said, found(breaker=BreakerLevel.OPEN)) == NoBatchNeedsAYes()


@pytest.mark.parametrize("said", [PLAIN, STOP])
def test_the_open_breaker_is_answered_with_no_run_waiting(said: Said) -> None:
    # Batches that need a yes do not take a plain answer or a --stop: the breaker does.
    for need in (False, True):
        route = route_answer(said, found(breaker=BreakerLevel.OPEN, batches_need_yes=need))
        assert route == AnswerBreaker(said.decision)


@pytest.mark.parametrize(
    ("said", "need"),
    [(PLAIN, False), (PLAIN, True), (STOP, False), (STOP, True), (POLL, False), (BOTH, False)],
)
@pytest.mark.parametrize("level", [BreakerLevel.NORMAL, BreakerLevel.PROBE])
def test_nothing_waits_with_no_question_no_open_breaker_and_no_yes_needed(
    said: Said, need: bool, level: BreakerLevel
) -> None:
    route = route_answer(said, found(breaker=level, batches_need_yes=need))
    assert route == NothingWaits(level, need)
