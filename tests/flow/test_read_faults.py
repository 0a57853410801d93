"""A paid answer we could not read is not a failed one: every read-side fault, on every kind
that reads its answers later, over real HTTP against the fault-injecting simulator, through
the monthly flow. Only the upstream's verdict (an output, "failed", "expired"/"cancelled",
"unknown id") ends a paid batch; a read that could not be made or not be read (a transport
fault past the request retries, an HTML page, JSON cut short or of the wrong shape, a status
the provider does not document, a results file cut or missing a line, a results URL on
another host) is no verdict: the batch is read again, and nothing is paid twice.

The evidence: the simulator's charge log (each post charged once), the final ledger (every
post completed), and what the batches' events say.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from postledger.ledger import Ledger
from tests.support.months import MONTH, assert_attempts_are_charges, statuses
from tests.support.months import run_flow as run
from tests.support.simulators import UPSTREAM_KINDS, Sim
from tests.support.simulators import fault_cases as cases

pytestmark = [
    pytest.mark.usefixtures("fast_retries"),
]

# A run that would pause for a person (it should never have to here) ends soon instead.
FAST_TIMINGS = {
    "poll_wait": "0.5",
    "poll_interval": "0.05",
    "read_timeout": "2",
    "approval_timeout": "2",
    "approval_poll": "0.2",
}
TASK_API, _CHAT, BATCH, _MESSAGES, MESSAGE_BATCHES = UPSTREAM_KINDS
POSTS = 60  # three ledger batches: on a Batch API, one job of three lines


# Each fault spoils the first look(s) at each upstream id (`per_id`), or the first downloads of
# a job's results; the next look reads the true answer.
READ_FAULTS = (
    cases(
        (TASK_API, BATCH, MESSAGE_BATCHES),
        "poll:html#1;per_id=true",  # a captive portal, a misrouted gateway
        "poll:cut_json#1;per_id=true",  # a connection dropped mid-body
        "poll:wrong_shape#1;per_id=true",
        "poll:bad_status#1;per_id=true",  # a status the provider does not document
        # More transient faults in a row than the request retries (3): polling through a
        # long wait survives them, with a backoff, instead of giving up on the fourth.
        "poll:http_502#1+2+3+4+5+6;per_id=true",
    )
    + cases(
        (BATCH, MESSAGE_BATCHES),
        "results:cut_file#1",
        "results:missing_lines#1",
        "results:html#1",
        "results:http_502#1+2+3+4+5",
    )
    # Behind a gateway, an ended Message Batch's results_url names the provider's own host.
    + cases((MESSAGE_BATCHES,), "poll:foreign_results_url@1.0")
)


# A Batch job left running with its id, its results read again: on PostgreSQL too.
@pytest.mark.on_postgres(ids=["openai_batch-results:cut_file#1"])
@pytest.mark.parametrize(("kind", "faulty"), READ_FAULTS, indirect=["faulty"])
def test_a_paid_answer_we_could_not_read_is_read_again_and_never_paid_twice(
    prefect_harness: None, faulty: Sim, ledger: Ledger, tmp_path: Path, kind: str
) -> None:
    run(tmp_path, POSTS)
    assert statuses(ledger) == {"completed": POSTS}
    charged = faulty.charged_per_post()
    assert set(charged.values()) == {1} and len(charged) == POSTS, charged
    assert {p.attempts for p in ledger.posts(MONTH)} == {1}
    assert_attempts_are_charges(ledger, faulty)
    fired = [f for f in faulty.fired() if f.get("applied", True)]
    assert fired, "the fault never fired: the test would prove nothing"
