"""`postledger approve`'s resume of the run that asked (`flows/resume.py`): an answer given in the
moment between a run recording its question and pausing still reaches the run (it waits for the
pause instead of leaving the run paused with an answer it never gets), and an answer to a
question the run has gone past never ends the run's next pause."""

from __future__ import annotations

import time
from typing import Any

import pytest

from postledger.ledger import Ledger
from postledger.record.models import Question
from tests.support.months import MONTH
from tests.support.prefect_api import flow_run_state
from tests.support.waiting import in_background, wait_for

ASK_TO_PAUSE_SECONDS = 5.0  # far longer than the real gap: the answer surely comes first


def ask_and_pause(ledger_url: str, question: str, *, pause_after: float = 0.0) -> str:
    """In a flow: record `question` as the monthly flow does (with this run's id and Prefect
    API), wait `pause_after` seconds, pause for the breaker's form; the decision given."""
    from prefect.context import FlowRunContext
    from prefect.flow_runs import pause_flow_run
    from prefect.settings import get_current_settings

    from flows.approval import BreakerAnswer

    context = FlowRunContext.get()
    assert context is not None and context.flow_run is not None
    ledger = Ledger(ledger_url)
    ledger.approvals.ask(
        MONTH,
        "simulator",
        question,
        flow_run_id=str(context.flow_run.id),
        prefect_api_url=get_current_settings().api.url,
        kind=Question.BREAKER,
    )
    ledger.close()
    time.sleep(pause_after)
    # poll_interval is typed int but only ever slept on: a float works (as in flows/approval.py).
    reply = pause_flow_run(  # type: ignore[call-overload]
        wait_for_input=BreakerAnswer, timeout=60, poll_interval=0.5
    )
    return str(reply.decision)


def asks_then_pauses_late(ledger_url: str) -> str:
    """A flow that records a question, as the monthly flow does, then pauses a while later."""
    from prefect import flow

    @flow(name="asks-then-pauses-late", persist_result=False)
    def asks() -> str:
        return ask_and_pause(ledger_url, "Continue?", pause_after=ASK_TO_PAUSE_SECONDS)

    return asks()


def test_an_answer_given_before_the_run_pauses_waits_for_the_pause(
    prefect_harness: None, ledger: Ledger, ledger_url: str
) -> None:
    from flows.resume import resume_run

    thread, outcome = in_background(lambda: asks_then_pauses_late(ledger_url))
    question: Any = wait_for("the question", lambda: ledger.approvals.waiting(MONTH))
    assert flow_run_state(question.flow_run_id) == "RUNNING"  # asked, not paused yet

    resume_run(question, {"decision": "continue", "note": ""})
    thread.join(60)
    assert outcome.get("result") == "continue", outcome.get("error")
    assert flow_run_state(question.flow_run_id) == "COMPLETED"


def asks_twice(ledger_url: str) -> list[str]:
    """A flow that asks, pauses, and once resumed asks again and pauses again."""
    from prefect import flow

    @flow(name="asks-twice", persist_result=False)
    def asks() -> list[str]:
        return [ask_and_pause(ledger_url, question) for question in ("First?", "Second?")]

    return asks()


def test_an_answer_to_a_question_the_run_went_past_does_not_end_its_next_pause(
    prefect_harness: None, ledger: Ledger, ledger_url: str
) -> None:
    from flows.resume import NotResumed, resume_run

    thread, outcome = in_background(lambda: asks_twice(ledger_url))
    first: Any = wait_for("the first question", lambda: ledger.approvals.waiting(MONTH))
    wait_for("Paused", lambda: flow_run_state(first.flow_run_id) == "PAUSED")
    # Answered in the run's form; `postledger approve` read the first question before that.
    resume_run(first, {"decision": "continue", "note": ""})
    second: Any = wait_for(
        "the second question",
        lambda: (q := ledger.approvals.waiting(MONTH)) is not None and q.id != first.id and q,
    )
    wait_for("Paused again", lambda: flow_run_state(first.flow_run_id) == "PAUSED")

    with pytest.raises(NotResumed, match="asked another question since"):
        resume_run(
            first,
            {"decision": "stop", "note": ""},
            asked_again=lambda: ledger.approvals.asked_since(MONTH, first.id),
        )
    assert flow_run_state(first.flow_run_id) == "PAUSED"  # the second pause waits on

    resume_run(second, {"decision": "continue", "note": ""})
    thread.join(60)
    assert outcome.get("result") == ["continue", "continue"], outcome.get("error")
