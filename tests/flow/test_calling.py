"""A paused run calls for a person (flows/calling.py): `postledger setup --notify` makes one
Prefect automation, however often it runs; a run that pauses posts its event, and the
automation sends the question through the named notification block. The block here is
Prefect's custom webhook, aimed at a receiver in this test; the automation runs on this
worker's Prefect server (its triggers and actions services), as on a user's."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from prefect import get_client

from flows.calling import AUTOMATION_NAME, PAUSED_EVENT
from flows.setup import prepare_prefect
from postledger.guards.breaker import Signal
from postledger.ledger import Ledger
from tests.support.months import MONTH, month_posts
from tests.support.simulators import Sim
from tests.support.waiting import wait_for

BLOCK = "custom-webhook/postledger-test-hook"


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A webhook receiver on loopback: its URL, and the JSON bodies it was sent."""
    received: list[dict[str, Any]] = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/hook", received
    finally:
        server.shutdown()
        server.server_close()


def test_a_paused_run_reaches_a_person_through_the_named_block(
    prefect_harness: None,
    sim: Sim,
    ledger: Ledger,
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
    receiver: tuple[str, list[dict[str, Any]]],
    request: pytest.FixtureRequest,
) -> None:
    from prefect.blocks.notifications import CustomWebhookNotificationBlock

    from flows.dispatch import RunStopped
    from flows.monthly import monthly_posts

    url, received = receiver
    CustomWebhookNotificationBlock(
        name="postledger test", url=url, json_data={"subject": "{{subject}}", "text": "{{body}}"}
    ).save(BLOCK.split("/")[1], overwrite=True)
    request.addfinalizer(_delete_automation)  # this worker's other tests pause runs too
    with pytest.raises(ValueError, match="there is no block custom-webhook/nobody"):
        prepare_prefect(2, "postledger", notify="custom-webhook/nobody")
    for _ in range(2):  # idempotent: one automation, whatever ran before
        said = prepare_prefect(2, "postledger", notify=BLOCK)
    assert f"notifies through {BLOCK} (updated)" in said[-1]
    with get_client(sync_client=True) as client:
        (automation,) = client.read_automations_by_name(AUTOMATION_NAME)
    # Any of Prefect's trigger kinds, as typed; ours is an event trigger, which has `expect`.
    assert automation.trigger.expect == {PAUSED_EVENT}  # type: ignore[union-attr]

    # An open breaker: the run pauses at once, asks, and nobody answers within 3 s.
    upstream = sim.url.removeprefix("http://")
    for n in (1, 2):
        ledger.approvals.signal(upstream, Signal.TRANSPORT_FAILURE, f"fail {n}", month=MONTH)
    monkeypatch.setenv("POSTLEDGER_APPROVAL_TIMEOUT", "3")
    monkeypatch.setenv("POSTLEDGER_APPROVAL_POLL", "0.3")
    with pytest.raises(RunStopped):
        monthly_posts(month=MONTH, posts_path=month_posts(tmp_path, 3))
    (message,) = wait_for("the notification", lambda: received, timeout=60)
    assert message["subject"] == f"postledger: {MONTH} waits for a person"
    assert "the circuit breaker is open" in message["text"]
    assert f"postledger approve --month {MONTH}" in message["text"]
    assert sim.charges() == []


def _delete_automation() -> None:
    with get_client(sync_client=True) as client:
        for automation in client.read_automations_by_name(AUTOMATION_NAME):
            client.delete_automation(automation.id)
