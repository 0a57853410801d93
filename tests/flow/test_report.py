"""`postledger report` round-trips a month: a real run through the simulator, then the command
as a person types it. The rows give back each post's own input fields beside its result, the
cost column adds up exactly to the month's confirmed spend as the ledger keeps it (and the
wasted column to the wasted spend), the Parquet file holds the same rows, and the summary
counts the completed posts by category and by sentiment."""

from __future__ import annotations

import csv
import json
import os
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from postledger.batches.posts import Post
from postledger.guards.spend import money
from postledger.ledger import Ledger
from postledger.progress.month_table import COST, MICRO, WASTED
from postledger.record.models import PostStatus
from tests.support.commands import postledger
from tests.support.ledgers import asked
from tests.support.months import write_jsonl
from tests.support.simulators import Sim

pytestmark = pytest.mark.processes  # runs postledger in processes of its own
MONTH = "2026-07"
INPUT_COLUMNS = ["author", "created_at", "lang", "source", "input_status", "tags"]
OUTCOME = ["status", "category", "sentiment", "summary", "failure_kind", "failure_reason"]


# What the simulated model reads as other, praise, complaint and suggestion.
SAYINGS = [
    "The thermostat went offline at noon. ",
    "I love the new app, thanks! ",
    "The app is broken and slow. ",
    "It would be nice to have a dark mode. ",
]


def month_file(path: Path) -> list[dict[str, Any]]:
    """Twelve posts of different lengths, with fields of their own: one has a field named as a
    report column ("status"), one a list, one none at all."""
    lines: list[dict[str, Any]] = []
    for i in range(12):
        line: dict[str, Any] = {
            "id": f"r{i:02d}",
            "text": f"Case {i}: " + SAYINGS[i % 4] * (1 + i % 3),  # lengths vary
            "source": ["forum", "app-review", "support-ticket"][i % 3],
            "author": f"user{i}",
            "created_at": f"2026-07-{i + 1:02d}T10:00:00Z",
            "lang": "en" if i % 2 else "de",
        }
        if i == 3:
            line["status"] = "draft"
        if i == 5:
            line["tags"] = ["wifi", "app"]
        if i == 7:
            line = {"id": line["id"], "text": line["text"]}
        lines.append(line)
    write_jsonl(path, [json.dumps(line, ensure_ascii=False) for line in lines])
    return lines


def read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="", encoding="utf-8") as file:
        reader = csv.DictReader(file)
        return list(reader.fieldnames or []), list(reader)


def micro(cell: str) -> int:
    """A currency cell back to micro-units, exactly (the cell has six places, always)."""
    assert cell == money(int(Decimal(cell) * 1_000_000)), cell
    return int(Decimal(cell) * 1_000_000)


def as_cell(value: Any) -> str:
    """A Parquet value as the CSV writes it."""
    if value is None:
        return ""
    if isinstance(value, Decimal):
        return format(value, "f")
    return value if isinstance(value, str) else json.dumps(value)


def table_rows(lines: list[str]) -> dict[str, int]:
    """The rows of the markdown table `lines` start with (after its two header lines, up to
    the first line that is not a row): first cell → the number."""
    rows = {}
    for line in lines[2:]:
        if not line.startswith("| "):
            break
        rows[line.split("|")[1].strip()] = int(line.split("|")[2])
    return rows


# The first output has one bad item (that post is sent again: paid twice); the second is not
# JSON at all (its batch is paid for nothing: wasted).
@pytest.mark.on_postgres  # the report's queries
@pytest.mark.parametrize("faulty", ["output:bad_field#1,output:not_json#2"], indirect=True)
def test_report_round_trips_a_month(
    prefect_harness: None,
    faulty: Sim,
    ledger: Ledger,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from flows.monthly import monthly_posts

    monkeypatch.setenv("POSTLEDGER_MAX_BATCH_POSTS", "5")
    lines = month_file(tmp_path / f"{MONTH}.jsonl")
    state = monthly_posts(month=MONTH, posts_path=str(tmp_path / f"{MONTH}.jsonl"))
    assert state["counts"]["completed"] == 12, state
    totals = ledger.spend_totals(MONTH)
    assert totals["confirmed"] > 0 and totals["wasted"] > 0  # the faults wasted a batch

    out = tmp_path / "report"
    written = postledger("report", "--month", MONTH, "--out", str(out), "--parquet")
    assert written.returncode == 0, written.stdout + written.stderr
    header, rows = read_csv(out / f"posts-{MONTH}.csv")
    assert header == ["id", *INPUT_COLUMNS, *OUTCOME, "attempts", COST, WASTED]
    assert [row["id"] for row in rows] == [line["id"] for line in lines]
    for row, line in zip(rows, lines, strict=True):
        given = {"input_status" if k == "status" else k: v for k, v in line.items()}
        expected = {c: given.get(c, "") for c in INPUT_COLUMNS}
        if "tags" in given:  # a list: as JSON
            expected["tags"] = json.dumps(given["tags"])
        assert {c: row[c] for c in INPUT_COLUMNS} == expected
        assert row["status"] == "completed" and row["category"] and row["sentiment"]

    # Every post's cost, in currency units, exactly; the column sums to the confirmed spend.
    assert sum(micro(row[COST]) for row in rows) == totals["confirmed"]
    assert sum(micro(row[WASTED]) for row in rows) == totals["wasted"]
    assert all(micro(row[COST]) > 0 for row in rows)
    assert max(int(row["attempts"]) for row in rows) == 2  # the bad item's post, sent again

    # The JSONL: the same rows, values as in the file, money also in micro-units.
    records = [json.loads(line) for line in (out / f"posts-{MONTH}.jsonl").open()]
    assert list(records[0]) == [*header, *MICRO.values()]
    assert records[5]["tags"] == ["wifi", "app"] and records[7]["author"] is None
    for record, row in zip(records, rows, strict=True):
        assert record[COST] == row[COST] and record[MICRO[COST]] == micro(row[COST])
        assert record[MICRO[WASTED]] == micro(row[WASTED])

    # Parquet: read back with pyarrow, the same rows.
    import pyarrow.parquet as pq

    table = pq.read_table(out / f"posts-{MONTH}.parquet")
    assert table.column_names == list(records[0])
    assert str(table.schema.field(COST).type) == "decimal128(38, 6)"
    for read, record, row in zip(table.to_pylist(), records, rows, strict=True):
        assert {c: as_cell(read[c]) for c in header} == row
        assert {m: read[m] for m in MICRO.values()} == {m: record[m] for m in MICRO.values()}
    assert sum(table.column(COST).to_pylist()) * 1_000_000 == totals["confirmed"]

    # The summary: completed posts by category and by sentiment, and what the costs mean.
    summary = (out / f"summary-{MONTH}.md").read_text(encoding="utf-8")
    for name in ("category", "sentiment"):
        at = summary.splitlines().index(f"| {name} | completed posts |")
        counted = table_rows(summary.splitlines()[at:])
        assert counted == dict(Counter(row[name] for row in rows)), summary
        assert len(counted) >= 3 and sum(counted.values()) == 12
    assert f"exactly ({money(totals['confirmed'])})" in summary
    assert "simulated" not in summary  # the test's simulator stands for a real upstream

    # --text: each post's text too, after its own fields.
    texts = tmp_path / "with-text"
    assert postledger("report", "-m", MONTH, "--out", str(texts), "--text").returncode == 0
    header, rows = read_csv(texts / f"posts-{MONTH}.csv")
    assert header[: len(INPUT_COLUMNS) + 2] == ["id", *INPUT_COLUMNS, "text"]
    assert [row["text"] for row in rows] == [line["text"] for line in lines]
    assert not (texts / f"posts-{MONTH}.parquet").exists()


def test_parquet_without_pyarrow_says_how_to_install_it_and_writes_nothing(
    ledger: Ledger, tmp_path: Path
) -> None:
    ledger.sync_posts(
        MONTH, [Post("p1", "a post", 1, '{"lang":"en"}')], model="m", analysis=asked()
    )
    hidden = tmp_path / "no-pyarrow" / "pyarrow"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text('raise ImportError("no pyarrow here")\n')
    path = os.pathsep.join(p for p in (str(hidden.parent), os.environ.get("PYTHONPATH")) if p)
    out = tmp_path / "report"
    refused = postledger(
        "report", "--month", MONTH, "--out", str(out), "--parquet", PYTHONPATH=path
    )
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert refused.stderr.count("\n") == 1, refused.stderr  # one line
    assert "uv sync --extra parquet" in refused.stderr
    assert "pip install 'postledger[parquet]'" in refused.stderr
    assert not out.exists()
    # Without --parquet the same command works: pyarrow is needed for Parquet only.
    plain = postledger("report", "--month", MONTH, "--out", str(out), PYTHONPATH=path)
    assert plain.returncode == 0, plain.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        f"posts-{MONTH}.csv",
        f"posts-{MONTH}.jsonl",
        f"summary-{MONTH}.md",
    ]
    assert PostStatus.PENDING.value in (out / f"posts-{MONTH}.csv").read_text()
