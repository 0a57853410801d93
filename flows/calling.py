"""A paused run calls for a person: an event each time a run of the month waits for an answer,
and, when `postledger setup --notify BLOCK` names a notification block, a Prefect automation
that sends the event's question through it (Slack, e-mail, a webhook: whatever the block is).

Why an event of our own rather than Prefect's `prefect.flow-run.Paused`: it carries what a
person needs in the message (the month, what is asked, what each answer costs, the command that
answers it), and a user can subscribe to it without any automation of ours.
"""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID

from prefect import get_client
from prefect.events import emit_event
from prefect.events.actions import SendNotification
from prefect.events.schemas.automations import AutomationCore, EventTrigger, Posture
from prefect.exceptions import ObjectNotFound

from postledger.ledger import Question
from postledger.progress import what_is_asked

PAUSED_EVENT = "postledger.month.paused"
AUTOMATION_NAME = "postledger: a monthly-posts run waits for a person"

SUBJECT = "postledger: {{ event.payload.month }} waits for a person"
BODY = """\
A run of {{ event.payload.month }} is paused: {{ event.payload.asks }}.
Answer with: {{ event.payload.answer_with }}
(or Resume the paused run in the Prefect UI). No answer within \
{{ event.payload.timeout_hours }} hours counts as stop."""


def call_for_a_person(
    month: str, kind: Question, *, flow_run_id: UUID | None, timeout_seconds: int
) -> None:
    """Emit the event that a run of `month` waits for an answer to a `kind` question."""
    asks, answer_with = what_is_asked(kind, month)
    run = {"prefect.resource.id": f"prefect.flow-run.{flow_run_id}", "prefect.resource.role": "run"}
    related = [run] if flow_run_id else []
    emit_event(
        event=PAUSED_EVENT,
        resource={"prefect.resource.id": f"postledger.month.{month}", "postledger.month": month},
        related=related,
        payload={
            "month": month,
            "question": kind.value,
            "asks": asks,
            "answer_with": answer_with,
            "timeout_hours": round(timeout_seconds / 3600, 2),
        },
    )


def ensure_pause_notification(block: str) -> str:
    """The automation that sends every paused-month event through the notification block
    `block` ("type-slug/name", as `prefect block ls` shows it): made, or brought up to date
    (one automation of that name, whatever ran before). Says what was done."""
    slug, _, name = block.partition("/")
    if not slug or not name:
        raise ValueError(
            f"{block!r} is no block name: give it as type/name, e.g. slack-webhook/ops "
            "(`prefect block ls` lists them)"
        )
    with get_client(sync_client=True) as client:
        try:
            document = client.read_block_document_by_name(name, slug)
        except ObjectNotFound:
            raise ValueError(
                f"there is no block {block}: create it first (in the Prefect UI: Blocks, or "
                "`prefect block create`), then run setup again"
            ) from None
        automation = AutomationCore(
            name=AUTOMATION_NAME,
            description="Sent by postledger when a run of a month pauses for a person's answer.",
            trigger=EventTrigger(
                expect={PAUSED_EVENT},
                match={"prefect.resource.id": "postledger.month.*"},
                posture=Posture.Reactive,
                threshold=1,
                within=timedelta(0),
            ),
            actions=[SendNotification(block_document_id=document.id, subject=SUBJECT, body=BODY)],
        )
        existing = client.read_automations_by_name(AUTOMATION_NAME)
        for extra in existing[1:]:
            client.delete_automation(extra.id)
        if existing:
            client.update_automation(existing[0].id, automation)
            return f"automation {AUTOMATION_NAME!r}: notifies through {block} (updated)"
        client.create_automation(automation)
        return f"automation {AUTOMATION_NAME!r}: notifies through {block} (created)"
