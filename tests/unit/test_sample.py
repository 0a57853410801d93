"""Tests for the deterministic sample month (`simulator.sample`)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from simulator.sample import generate_posts, write_posts

KEYS = ["id", "text", "author", "created_at", "lang", "source"]


def test_same_arguments_give_identical_posts() -> None:
    first = generate_posts("2026-10", 200, 7)
    second = generate_posts("2026-10", 200, 7)
    assert first == second
    assert json.dumps(first, ensure_ascii=False) == json.dumps(second, ensure_ascii=False)


def test_different_seed_gives_different_posts() -> None:
    assert generate_posts("2026-10", 50, 7) != generate_posts("2026-10", 50, 8)


@pytest.mark.parametrize("count", [1, 2, 37, 300])
def test_count_is_honoured_and_ids_are_unique(count: int) -> None:
    posts = generate_posts("2026-10", count, 1)
    assert len(posts) == count
    ids = [post["id"] for post in posts]
    assert len(set(ids)) == count
    assert ids[0] == "p-2026-10-00001"


def test_keys_order_and_types() -> None:
    for post in generate_posts("2026-10", 100, 3):
        assert list(post) == KEYS
        assert all(isinstance(value, str) and value for value in post.values())
        assert post["source"] in {"forum", "app-review", "social", "support-ticket"}
        assert post["lang"] in {"en", "zh", "es", "de", "fr", "ja", "pt"}


@pytest.mark.parametrize(
    ("month", "last_day"), [("2026-02", 28), ("2024-02", 29), ("2026-10", 31), ("2025-12", 31)]
)
def test_created_at_is_inside_the_month(month: str, last_day: int) -> None:
    year, number = (int(part) for part in month.split("-"))
    start = datetime(year, number, 1, tzinfo=UTC)
    end = datetime(year, number, last_day, 23, 59, 59, tzinfo=UTC)
    days = set()
    for post in generate_posts(month, 400, 11):
        stamp = post["created_at"]
        assert stamp.endswith("Z")
        moment = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        assert start <= moment <= end
        days.add(moment.day)
    assert len(days) > last_day // 2  # spread over the month, not bunched on one day


def test_lengths() -> None:
    posts = generate_posts("2026-10", 300, 7)
    lengths = [len(post["text"]) for post in posts]
    assert min(lengths) >= 1
    assert max(lengths) <= 8000
    assert any(length > 1500 for length in lengths)
    usual = sum(40 <= length <= 600 for length in lengths)
    assert usual >= 0.8 * len(posts)
    assert any("\n" in post["text"] for post in posts)
    assert any("https://" in post["text"] for post in posts)


@pytest.mark.parametrize("seed", [0, 1, 7, 42, 2026])
def test_share_of_non_english_posts(seed: int) -> None:
    posts = generate_posts("2026-10", 300, seed)
    share = sum(post["lang"] != "en" for post in posts) / len(posts)
    assert 0.10 <= share <= 0.40
    assert len({post["lang"] for post in posts}) == 7


def test_posts_are_varied() -> None:
    texts = [post["text"] for post in generate_posts("2026-10", 300, 5)]
    assert len(set(texts)) >= 0.9 * len(texts)


@pytest.mark.parametrize("month", ["2026-13", "2026-00", "2026-1", "26-10", "2026/10", "", "x"])
def test_bad_month_is_rejected(month: str) -> None:
    with pytest.raises(ValueError, match="2026-10"):
        generate_posts(month, 10, 1)


@pytest.mark.parametrize("count", [0, -1])
def test_bad_count_is_rejected(count: int) -> None:
    with pytest.raises(ValueError, match="count"):
        generate_posts("2026-10", count, 1)


def test_write_posts_round_trips(tmp_path: Path) -> None:
    posts = generate_posts("2026-10", 120, 9)
    path = tmp_path / "nested" / "folder" / "posts.jsonl"
    write_posts(path, posts)
    raw = path.read_bytes()
    assert b"\r\n" not in raw
    lines = raw.decode("utf-8").split("\n")
    assert lines[-1] == ""
    assert [json.loads(line) for line in lines[:-1]] == posts
    assert "\\u" not in raw.decode("utf-8")  # ensure_ascii=False: real characters, not escapes
