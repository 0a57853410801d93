"""R20's spill file, on its own: what it keeps, and a bad line named by its place. (The ledger
becoming unwritable mid-month, through the flow: tests/flow/test_ledger_failure.py.)"""

from __future__ import annotations

from pathlib import Path

from postledger.guards.spill import Spill, SpillKind


def test_spill_keeps_records_and_names_a_bad_line(tmp_path: Path) -> None:
    spill = Spill(tmp_path / "ledger.db.spill.jsonl")
    spill.add(SpillKind.TASK_ID, "2026-10-b0001", task_id="task_1")
    spill.add(SpillKind.OUTPUT, "2026-10-b0001", output="[]", usage={"input_tokens": 3})
    with spill.path.open("a", encoding="utf-8") as file:
        file.write('{"kind": "output", "batch')  # a crash mid-write: never made durable
    assert [r["kind"] for r in spill.records()] == ["task_id", "output"]

    with spill.path.open("a", encoding="utf-8") as file:
        file.write('"}\nnot json\n')
    # Damaged lines stop nothing (R46): skipped, kept aside and named by their place.
    assert [r["kind"] for r in spill.take(lambda records: records) or []] == ["task_id", "output"]
    assert spill.kept_aside is not None and spill.kept_aside.lines == (3, 4)
