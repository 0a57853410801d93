"""No text a paused run or a Block shows cites a rule number of docs/rules.md: the Prefect
UI's pause forms and the Blocks' forms, and the questions a paused run asks and the lines it logs
around them, built from a real ledger. (Every citation's anchor, the command line's help, the
code's messages and the README: tests/unit/test_rules_doc.py.)"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_rules_doc import rule_numbers_in


def test_the_resume_forms_and_block_forms_cite_no_rule_number() -> None:
    from prefect.input import RunInput

    import flows.approval
    import flows.recover
    from blocks import BLOCK_TYPES

    forms = [
        value
        for module in (flows.approval, flows.recover)
        for value in vars(module).values()
        if isinstance(value, type) and issubclass(value, RunInput) and value is not RunInput
    ]
    assert {form.__name__ for form in forms} >= {"BreakerAnswer", "RecoveryAnswer"}
    shown = {form.__name__: json.dumps(form.model_json_schema()) for form in forms}
    for block in BLOCK_TYPES:
        schema = json.dumps(block.model_json_schema())
        shown[block.__name__] = f"{block.get_block_type_name()} {block.get_description()} {schema}"
    for name, text in shown.items():
        assert not rule_numbers_in(text), f"{name}: {text}"


class _Said(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_the_pause_questions_and_their_log_lines_cite_no_rule_number(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every question a paused run shows above its form (the open breaker, the budget,
    interrupted batches), and what the run logs around it, built from a real ledger."""
    import flows.approval
    import flows.recover
    from postledger.guards.breaker import Signal
    from postledger.ledger import Ledger
    from postledger.record.models import ApprovalRecord, Question
    from postledger.recovery.steps import RecoveryAction, RecoveryPlan, RecoveryStep
    from postledger.settings import Settings

    asked: list[str] = []
    said = _Said()
    logger = logging.getLogger("postledger.test_rules_doc")
    logger.addHandler(said)
    logger.propagate = False

    def pause(
        ledger: Ledger, month: str, question: str, form: type[Any], settings: Settings, **kw: Any
    ) -> tuple[ApprovalRecord, None]:
        asked.append(question)
        kind: Question = kw["kind"]
        return ApprovalRecord(month=month, upstream="u", kind=kind, question=question), None

    for module in (flows.approval, flows.recover):
        monkeypatch.setattr(module, "pause_for_answer", pause)
        monkeypatch.setattr(module, "get_run_logger", lambda: logger)

    month = "2026-10"
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'ledger.db'}")
    ledger = Ledger(settings.resolved_database_url())
    try:
        for _ in range(2):  # two final transport failures in a row: the breaker opens
            ledger.approvals.signal(
                settings.breaker_name(), Signal.TRANSPORT_FAILURE, "no answer", month=month
            )
        flows.approval.ask_to_continue(ledger, month, settings)
        flows.approval.ask_about_budget(ledger, month, settings, "the next batch would cross it")
        steps = [
            RecoveryStep("2026-10-b0001", RecoveryAction.POLL, ["p1"], 10, "task t1 was made"),
            RecoveryStep("2026-10-b0002", RecoveryAction.RESUBMIT, ["p2"], 10, "no task id", 7),
        ]
        for idempotent in (True, False):
            plan = RecoveryPlan(steps, idempotent=idempotent)
            flows.recover.ask_about_interrupted(ledger, month, plan, settings)
            nothing = ApprovalRecord(
                month=month, upstream="u", kind=Question.RECOVERY, question="", batch_ids=[]
            )
            flows.recover.carry_out(ledger, plan, nothing, settings)
    finally:
        ledger.close()
        logger.removeHandler(said)

    assert len(asked) == 4 and len(said.lines) >= 4
    for text in asked + said.lines:
        assert not rule_numbers_in(text), text
