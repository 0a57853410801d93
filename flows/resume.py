"""Resuming a paused postledger run with a person's answer, from the command line.

Prefect 3.9 has no CLI for this (`prefect flow-run resume` does not exist). The paused run
recorded its id and the Prefect API it talks to in the ledger, so the answer can reach it from
any terminal: PREFECT_API_URL when set, else the API the run itself used (for `postledger run`,
its local server on loopback).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from uuid import UUID

import httpx
from prefect import get_client
from prefect.client.schemas.objects import StateType
from prefect.exceptions import FlowPauseTimeout, NotPausedError, ObjectNotFound
from prefect.flow_runs import resume_flow_run
from prefect.settings import PREFECT_API_URL, temporary_settings

from postledger.errors import PostledgerError
from postledger.ledger import ApprovalRecord

# The run records its question, then posts an event and pauses: an answer given in between
# finds it still running. It is waited for this long to pause, not given up on.
PAUSE_WAIT_SECONDS = 30.0


class NotResumed(PostledgerError):
    """The run that asked could not be resumed; the message says why."""


def resume_run(
    question: ApprovalRecord,
    run_input: dict[str, object],
    asked_again: Callable[[], bool] = lambda: False,
) -> None:
    """Resume the run that asked `question`; raises `NotResumed` if it no longer waits for
    that question. `asked_again()`: whether the month has a newer question than `question`
    (then a pause of the run is for that one, and this answer must not end it)."""
    if question.flow_run_id is None:
        raise NotResumed("the question has no flow run id")
    api_url = os.environ.get("PREFECT_API_URL") or question.prefect_api_url
    if not api_url:
        raise NotResumed("no Prefect API known: set PREFECT_API_URL")
    try:
        with temporary_settings(updates={PREFECT_API_URL: api_url}):
            flow_run_id = UUID(question.flow_run_id)
            _wait_until_paused(question, flow_run_id)
            if asked_again():
                raise NotResumed(
                    f"run {flow_run_id} went on and asked another question since: answer that "
                    "one (`postledger status` shows it)"
                )
            _resume_once_its_form_is_there(flow_run_id, run_input)
    except NotResumed:
        raise
    except (httpx.HTTPError, OSError) as exc:
        raise NotResumed(f"the Prefect API at {api_url} did not answer ({exc})") from None
    except ObjectNotFound:
        raise NotResumed(
            f"the Prefect API at {api_url} has no run {question.flow_run_id}"
        ) from None
    except FlowPauseTimeout:
        raise NotResumed(f"run {question.flow_run_id} timed out before the answer") from None
    except NotPausedError:
        raise NotResumed(f"run {question.flow_run_id} is not paused any more") from None
    except RuntimeError as exc:  # the API refused the input
        raise NotResumed(f"run {question.flow_run_id}: {exc}") from None


def _wait_until_paused(question: ApprovalRecord, flow_run_id: UUID) -> None:
    """Return once the run is paused, or when it is no longer running as it was when it asked
    (resumed since, or ended: the resume then says why). A run that asked and still runs has
    not paused yet: it is waited for, a while."""
    asked = question.asked_at.timestamp()
    deadline = time.monotonic() + PAUSE_WAIT_SECONDS
    with get_client(sync_client=True) as client:
        while True:
            state = client.read_flow_run(flow_run_id).state
            if state is None or state.type is not StateType.RUNNING:
                return
            if state.timestamp.timestamp() > asked:
                return  # running again since it asked: answered another way (its form)
            if time.monotonic() >= deadline:
                raise NotResumed(
                    f"run {flow_run_id} asked, but is still running and did not pause within "
                    f"{PAUSE_WAIT_SECONDS:.0f} s"
                )
            time.sleep(0.2)


def _resume_once_its_form_is_there(flow_run_id: UUID, run_input: dict[str, object]) -> None:
    """A run shows Paused a moment before it has saved its form's schema; a resume in that
    moment is refused ("Run input schema not found") and is tried again, a while."""
    deadline = time.monotonic() + PAUSE_WAIT_SECONDS
    while True:
        try:
            resume_flow_run(flow_run_id, run_input=run_input)
            return
        except RuntimeError as exc:
            if "schema not found" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.2)
