"""R46's spill file when a write was cut short (a full disk, a crash): every record starts on a
line of its own and carries a checksum; a damaged line is skipped, its bytes kept aside
exactly as they were, and the other records are imported. Real files, a real ledger."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from postledger.batches.posts import Post
from postledger.guards.spill import Spill, SpillError, SpillKind
from postledger.ledger import Ledger
from postledger.recovery.interrupted import import_spill
from tests.support.ledgers import asked

MONTH = "2026-10"
BATCH, OTHER_BATCH = f"{MONTH}-b0001", f"{MONTH}-b0002"


def torn(tmp_path: Path, **facts: Any) -> bytes:
    """The first half of a record's bytes, as a write cut by a full disk leaves them."""
    scratch = Spill(tmp_path / "scratch" / "whole.jsonl")
    scratch.add(SpillKind.OUTPUT, BATCH, task_id="task_torn", **facts)
    whole = scratch.path.read_bytes()
    return whole[: len(whole) // 2]


def append(spill: Spill, raw: bytes) -> None:
    with spill.path.open("ab") as file:
        file.write(raw)


def take_all(spill: Spill) -> list[dict[str, Any]] | None:
    return spill.take(lambda records: records)


def damaged_file(spill: Spill) -> Path:
    return spill.path.with_name(f"{spill.path.name}.damaged")


def test_a_torn_line_in_the_middle_is_kept_aside_and_the_records_after_it_imported(
    tmp_path: Path,
) -> None:
    spill = Spill(tmp_path / "spill-2026-10.jsonl")
    spill.add(SpillKind.TASK_ID, BATCH, task_id="task_1")
    half = torn(tmp_path, output="[]", usage={"input_tokens": 3})
    append(spill, half + b"\n")  # cut short, then the next record on a line of its own
    spill.add(SpillKind.TASK_ID, OTHER_BATCH, task_id="task_2")
    spill.add(SpillKind.REQUEST_RETRY, OTHER_BATCH)

    taken = take_all(spill)  # before: SpillError, "fix or remove that line", nothing imported

    assert taken is not None
    assert [(r["batch_id"], r["kind"]) for r in taken] == [
        (BATCH, "task_id"),
        (OTHER_BATCH, "task_id"),
        (OTHER_BATCH, "request_retry"),
    ]
    kept = spill.kept_aside
    assert kept is not None and kept.lines == (2,)
    assert kept.path == damaged_file(spill)
    assert kept.path.read_bytes() == half + b"\n"
    assert not spill.path.exists() and kept.archived.is_file()  # moved aside, never deleted
    assert half + b"\n" in kept.archived.read_bytes()


def test_a_record_added_after_a_write_cut_mid_line_starts_on_its_own_line(
    tmp_path: Path,
) -> None:
    spill = Spill(tmp_path / "spill-2026-10.jsonl")
    spill.add(SpillKind.TASK_ID, BATCH, task_id="task_1")
    half = torn(tmp_path, output="[]", usage=None)
    append(spill, half)  # the disk was full: no newline after it

    spill.add(SpillKind.TASK_ID, OTHER_BATCH, task_id="task_2")

    lines = spill.path.read_bytes().split(b"\n")
    assert lines[1] == half and lines[-1] == b""
    assert json.loads(lines[2])["task_id"] == "task_2"  # not glued onto the torn bytes
    taken = take_all(spill)
    assert taken is not None and [r["task_id"] for r in taken] == ["task_1", "task_2"]
    assert spill.kept_aside is not None
    assert spill.kept_aside.path.read_bytes() == half + b"\n"


def test_a_record_whose_checksum_does_not_match_is_kept_aside(tmp_path: Path) -> None:
    spill = Spill(tmp_path / "spill-2026-10.jsonl")
    spill.add(SpillKind.TASK_ID, BATCH, task_id="task_1")
    spill.add(SpillKind.TASK_ID, OTHER_BATCH, task_id="task_2")
    good, changed = spill.path.read_bytes().splitlines(keepends=True)
    damaged = changed.replace(b'"task_2"', b'"task_7"')  # still JSON, still a record
    assert json.loads(damaged)["task_id"] == "task_7"
    spill.path.write_bytes(good + damaged)

    taken = take_all(spill)

    assert taken is not None and [r["task_id"] for r in taken] == ["task_1"]
    assert spill.kept_aside is not None and spill.kept_aside.lines == (2,)
    assert spill.kept_aside.path.read_bytes() == damaged


def test_a_record_of_an_earlier_version_without_a_checksum_is_read(tmp_path: Path) -> None:
    spill = Spill(tmp_path / "spill-2026-10.jsonl")
    old = {
        "id": "0" * 32,
        "kind": "output",
        "batch_id": BATCH,
        "at": "2026-10-03T10:00:00+00:00",
        "task_id": "task_old",
        "output": "[«non-ASCII, as earlier versions wrote it»]",
        "usage": {"input_tokens": 3},
    }
    spill.path.write_text(json.dumps(old, ensure_ascii=False) + "\n", encoding="utf-8")
    spill.add(SpillKind.TASK_ID, OTHER_BATCH, task_id="task_new")

    taken = take_all(spill)

    assert taken is not None and [r["task_id"] for r in taken] == ["task_old", "task_new"]
    assert taken[0]["output"] == old["output"] and "check" in taken[1]
    assert spill.kept_aside is None and not damaged_file(spill).exists()


def test_damaged_bytes_are_kept_exactly_and_the_file_is_appended_to_never_overwritten(
    tmp_path: Path,
) -> None:
    spill = Spill(tmp_path / "spill-2026-10.jsonl")
    spill.add(SpillKind.TASK_ID, BATCH, task_id="task_1")
    # Cut inside a character (an earlier version wrote non-ASCII as is), then a last line
    # with no newline at all: neither is UTF-8 JSON, both are kept byte for byte.
    first = '{"id": "1", "kind": "output", "batch_id": "2026-10-b0001", "output": "é'.encode()[:-1]
    last = b'{"id": "2", "kind": "task_id", "batch_id": "2026-10-b0002", "task_id": "tas'
    append(spill, first + b"\n" + last)
    take_all(spill)
    assert damaged_file(spill).read_bytes() == first + b"\n" + last

    spill.add(SpillKind.TASK_ID, BATCH, task_id="task_2")  # the month's next spill file
    append(spill, b"\x00\x00\x00\n")  # a block a crash left zeroed
    taken = take_all(spill)

    assert taken is not None and [r["task_id"] for r in taken] == ["task_2"]
    assert damaged_file(spill).read_bytes() == first + b"\n" + last + b"\n" + b"\x00\x00\x00\n"


def test_a_file_that_is_not_utf8_at_all_is_refused_and_left_where_it_is(tmp_path: Path) -> None:
    spill = Spill(tmp_path / "spill-2026-10.jsonl")
    content = b"\x89PNG\r\n\x1a\n\xff\xfe\x00binary"
    spill.path.write_bytes(content)

    with pytest.raises(SpillError, match="spill-2026-10.jsonl is not UTF-8 text at all"):
        take_all(spill)

    assert spill.path.read_bytes() == content and not damaged_file(spill).exists()


def planned_batch(ledger: Ledger) -> str:
    posts = [Post(f"p{i:03d}", f"post {i}: why is the app slow?", i + 1) for i in range(2)]
    ledger.sync_posts(MONTH, posts, model="m", analysis=asked())
    (batch,) = ledger.plan(MONTH, max_posts=25, max_chars=10_000).batches
    ledger.mark_running(batch.batch_id)
    return batch.batch_id


def test_a_torn_spill_line_keeps_no_paid_task_id_out_of_the_ledger_and_imports_once(
    ledger_url: str, tmp_path: Path
) -> None:
    ledger = Ledger(ledger_url)
    batch_id = planned_batch(ledger)
    spill = Spill(tmp_path / "spill-2026-10.jsonl")
    spill.add(SpillKind.REQUEST_RETRY, batch_id)
    half = torn(tmp_path, output="[]", usage={"input_tokens": 3})
    append(spill, half)  # a write the full disk cut short
    spill.add(SpillKind.TASK_ID, batch_id, task_id="task_7")
    as_left = spill.path.read_bytes()

    taken, kept = import_spill(ledger, spill)

    assert taken == 2
    batch = ledger.batch(batch_id)
    assert (batch.upstream_task_id, batch.request_retries) == ("task_7", 1)
    assert kept is not None and kept.lines == (2,)
    assert kept.path.read_bytes() == half + b"\n"
    said = kept.message()
    assert str(kept.path) in said and "task id" in said and "paid" in said
    assert "do not delete" in said and "JSON" in said and "polled" in said
    assert "remove" not in said.lower() and "R46" not in said

    # A crash between the import and the move: the next run reads the same file again.
    shutil.copyfile(kept.archived, spill.path)
    assert spill.path.read_bytes() == as_left
    assert import_spill(ledger, spill)[0] == 0
    assert ledger.batch(batch_id).request_retries == 1
    assert kept.path.read_bytes() == half + b"\n"  # kept aside once
    ledger.close()
