"""Bad input: a message naming file, line and fix, and a ledger left exactly as it was."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from postledger.ledger import Ledger
from postledger.posts import InputError, Post, load_posts, parse_month, previous_month
from tests.conftest import write_jsonl

GOOD = '{"id": "a", "text": "hello"}'


def snapshot(ledger: Ledger) -> dict[str, list[tuple[object, ...]]]:
    with ledger.engine.connect() as conn:
        return {
            table: [
                tuple(row) for row in conn.execute(text(f"SELECT * FROM {table} ORDER BY 1, 2"))
            ]
            for table in ("posts", "batches", "events")
        }


@pytest.fixture
def known_month(ledger: Ledger) -> Ledger:
    """A ledger that already holds work for the month: nothing of it may change."""
    ledger.sync_posts(
        "2026-10", [Post("a", "hello", 1), Post("b", "world", 2)], model="m", prompt="p"
    )
    ledger.plan("2026-10", max_posts=25, max_chars=1000)
    return ledger


BAD_FILES = {
    "malformed_json": (
        ['{"id": "a", "text": "hello"}', '{"id": "b", "text": "x"'],
        2,
        "malformed JSON",
        "one JSON object per line",
    ),
    "not_an_object": ([GOOD, '["b", "x"]'], 2, "JSON list instead of an object", "JSON object"),
    "missing_id": ([GOOD, '{"text": "x"}'], 2, 'missing "id"', 'add "id"'),
    "empty_id": ([GOOD, '{"id": "  ", "text": "x"}'], 2, '"id" is', "non-empty"),
    "missing_text": ([GOOD, '{"id": "b"}'], 2, 'missing "text"', 'add "text"'),
    "empty_text": ([GOOD, '{"id": "b", "text": ""}'], 2, '"text" is', "non-empty string"),
    "text_not_string": ([GOOD, '{"id": "b", "text": 42}'], 2, '"text" is 42', "non-empty string"),
    "duplicate_id": (
        [GOOD, '{"id": "b", "text": "x"}', '{"id": "a", "text": "y"}'],
        3,
        "duplicate id 'a' (first on line 1)",
        "its own id",
    ),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_bad_file_message(tmp_path: Path, case: str) -> None:
    lines, line_no, what, fix = BAD_FILES[case]
    path = write_jsonl(tmp_path / "2026-10.jsonl", lines)
    with pytest.raises(InputError) as caught:
        load_posts(path)
    message = str(caught.value)
    assert f"{path}:{line_no}: " in message
    assert what in message
    assert fix in message


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "2026-10.jsonl"
    path.write_text("\n\n", encoding="utf-8")
    with pytest.raises(InputError, match="holds no posts — add one JSON object per line"):
        load_posts(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        load_posts(tmp_path / "nope.jsonl")


def test_every_problem_is_listed(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "m.jsonl", ['{"id": "a"}', "oops", '{"text": "x"}'])
    with pytest.raises(InputError) as caught:
        load_posts(path)
    assert [p.line for p in caught.value.problems] == [1, 2, 3]


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_bytes(b'{"id": "a", "text": "ok"}\n{"id": "b", "text": "\xff"}\n')
    with pytest.raises(InputError, match=r"m.jsonl:2: the file is not UTF-8"):
        load_posts(path)


def test_good_file_keeps_order_ids_and_lines(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "m.jsonl", [GOOD, "", '{"id": 7, "text": "seven", "x": 1}'])
    assert load_posts(path) == [Post("a", "hello", 1), Post("7", "seven", 3)]


@pytest.mark.parametrize("month", ["2026-13", "2026-1", "26-10", "october", "2026-10-01", ""])
def test_bad_month(month: str) -> None:
    with pytest.raises(InputError, match="YYYY-MM"):
        parse_month(month)


def test_previous_month() -> None:
    from datetime import UTC, datetime

    assert previous_month(datetime(2026, 11, 1, 6, tzinfo=UTC)) == "2026-10"
    assert previous_month(datetime(2027, 1, 1, tzinfo=UTC)) == "2026-12"


# --- through the flow: the ledger is left unchanged -----------------------------------------

FLOW_CASES = [*BAD_FILES, "empty_file", "bad_month"]


@pytest.mark.parametrize("case", FLOW_CASES)
def test_flow_rejects_bad_input_and_leaves_ledger_unchanged(
    prefect_harness: None, known_month: Ledger, tmp_path: Path, case: str
) -> None:
    from flows.monthly import monthly_posts

    month = "2026-10"
    path = tmp_path / "posts.jsonl"
    if case == "empty_file":
        path.write_text("", encoding="utf-8")
    elif case == "bad_month":
        write_jsonl(path, [GOOD])
        month = "2026-13"
    else:
        write_jsonl(path, BAD_FILES[case][0])
    before = snapshot(known_month)

    with pytest.raises(InputError) as caught:
        monthly_posts(month=month, posts_path=str(path))

    assert (
        ("YYYY-MM" in str(caught.value))
        if case == "bad_month"
        else (str(path) in str(caught.value))
    )
    assert snapshot(known_month) == before
