"""OpenAI-compatible chat completions, what only they have: a synchronous upstream that keeps
no task id and honours no idempotency key, so a run killed mid-request (R24) leaves a batch
that can only be sent again, and only after a person's yes. (The fault classes common to every
kind: tests/flow/test_faults.py.) Evidence: the ledger and /_sim/charges."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from postledger.ledger import Ledger
from postledger.record.crash import CRASH_EXIT_CODE
from postledger.record.models import Answer, BatchStatus, PostStatus
from tests.support.commands import postledger
from tests.support.months import MONTH, finish_month_here, on_worker_server, run_month
from tests.support.simulators import Sim, start_sim

pytestmark = pytest.mark.processes  # runs postledger in other processes


@pytest.fixture
def chat_sim(monkeypatch: pytest.MonkeyPatch) -> Iterator[Sim]:
    monkeypatch.setenv("POSTLEDGER_MAX_BATCH_POSTS", "3")
    yield from start_sim(monkeypatch, "openai_chat", latency=0.2)


def test_an_interrupted_request_is_resubmitted_only_after_a_yes(
    chat_sim: Sim, ledger_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    shared = on_worker_server(request)  # the runs here need no local server of their own
    crashed = run_month(tmp_path, POSTLEDGER_CRASH_AT="after_create", **shared)
    assert crashed.returncode == CRASH_EXIT_CODE, crashed.stdout + crashed.stderr
    ledger = Ledger(ledger_url)
    running = ledger.batches(MONTH, BatchStatus.RUNNING)
    assert running and all(b.upstream_task_id is None for b in running)
    ledger.close()
    shown = postledger("plan", "--month", MONTH, "--json", cwd=tmp_path)
    plan = json.loads(shown.stdout)
    resubmit = plan["groups"]["resubmit"]["batches"]
    assert resubmit and plan["idempotent_upstream"] is False
    assert plan["possible_double_charge_input_tokens"] > 0
    at_crash = chat_sim.charged_per_post()

    unanswered = run_month(tmp_path, POSTLEDGER_APPROVAL_TIMEOUT="1", **shared)
    assert unanswered.returncode == 1, unanswered.stdout + unanswered.stderr
    ledger = Ledger(ledger_url)
    for batch_id in resubmit:  # asked, nobody answered: nothing sent again, nothing paid
        batch = ledger.batch(batch_id)
        assert batch.status is BatchStatus.RUNNING
        assert all(chat_sim.charged_per_post()[pid] == at_crash[pid] for pid in batch.post_ids)
    (asked,) = ledger.approvals.approvals(MONTH)
    assert asked.answer is Answer.TIMED_OUT
    ledger.close()

    finish_month_here(request, tmp_path)  # the yes, given up front
    ledger = Ledger(ledger_url)
    assert {p.status for p in ledger.posts(MONTH)} == {PostStatus.COMPLETED}
    assert all(b.upstream_task_id is None for b in ledger.batches(MONTH))
    charged: Counter[str] = chat_sim.charged_per_post()
    resent = {pid for b in resubmit for pid in ledger.batch(b).post_ids}
    # Paid twice exactly where the person confirmed sending again what was already made.
    assert {pid for pid, n in charged.items() if n == 2} == {
        pid for pid in resent if at_crash[pid] == 1
    }
    assert max(charged.values()) <= 2
    ledger.close()
