"""A month's file read as a stream: checked in one pass that keeps no post (every problem of
a big bad file still named, with its line), then read a post at a time, only as asked."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from postledger.batches import posts as posts_module
from postledger.batches.posts import InputError, Post, check_posts, load_posts, read_posts
from tests.support.months import write_jsonl


def good_line(n: int, post_id: str | None = None) -> str:
    return json.dumps({"id": post_id or f"p{n:06d}", "text": f"post {n}", "lang": "en"})


def test_every_bad_line_of_a_big_file_is_counted_and_the_first_are_named(
    tmp_path: Path,
) -> None:
    lines = [good_line(n) for n in range(30_000)]
    bad = {17: "oops", 12_345: '{"id": "x"}', 29_999: "[1, 2]"}
    for at, line in bad.items():
        lines[at] = line
    lines[20_000] = good_line(20_000, post_id="p000005")  # given twice
    path = write_jsonl(tmp_path / "2026-10.jsonl", lines)

    with pytest.raises(InputError) as caught:
        check_posts(path)
    error = caught.value
    assert [p.line for p in error.problems] == [18, 12_346, 20_001, 30_000]
    assert error.count == 4
    assert 'duplicate id "p000005" (first on line 6)' in str(error)
    assert f"{path}:30000: a JSON array instead of an object" in str(error)


def test_a_file_of_many_bad_lines_keeps_the_first_problems_and_counts_them_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(posts_module, "MAX_PROBLEMS_KEPT", 50)
    path = write_jsonl(tmp_path / "m.jsonl", ["oops"] * 120 + [good_line(1)])
    error = pytest.raises(InputError, check_posts, path).value
    assert [p.line for p in error.problems] == list(range(1, 51))
    assert error.count == 120
    assert str(error).endswith("… and 100 more problems")


def test_ids_of_one_hash_are_told_apart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check keeps ids' hashes: two ids of one hash are looked at again, exactly."""
    monkeypatch.setattr(posts_module, "_id_key", len)  # every id of 7 characters collides
    lines = [good_line(n) for n in range(5)]
    path = write_jsonl(tmp_path / "m.jsonl", lines)
    assert check_posts(path).count == 5

    path = write_jsonl(tmp_path / "m.jsonl", [*lines, good_line(9, post_id="p000003")])
    error = pytest.raises(InputError, check_posts, path).value
    assert [(p.line, p.what) for p in error.problems] == [
        (6, 'duplicate id "p000003" (first on line 4)')
    ]


def test_the_reader_reads_only_as_far_as_it_is_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_jsonl(tmp_path / "m.jsonl", [good_line(n) for n in range(1_000)])
    checked = check_posts(path)
    assert checked.count == 1_000
    read: list[int] = []
    lines = posts_module._lines

    def counted(path: Path) -> Iterator[tuple[int, str]]:
        for number, line in lines(path):
            read.append(number)
            yield number, line

    monkeypatch.setattr(posts_module, "_lines", counted)
    stream = read_posts(checked)
    assert read == []  # nothing before the first post is asked for
    assert next(stream) == Post("p000000", "post 0", 1, '{"lang":"en"}')
    assert read == [1]
    assert [post.line for _, post in zip(range(6), stream, strict=False)] == [2, 3, 4, 5, 6, 7]
    assert read == [1, 2, 3, 4, 5, 6, 7]


def test_a_file_changed_since_its_check_is_refused(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "m.jsonl", [good_line(n) for n in range(3)])
    checked = check_posts(path)
    write_jsonl(path, [good_line(n) for n in range(4)])
    with pytest.raises(InputError, match="the file changed since it was checked"):
        next(read_posts(checked))

    # Changed while it is read: refused after its last post, before the caller commits.
    checked = check_posts(path)
    stream = read_posts(checked)
    next(stream)
    with path.open("a", encoding="utf-8") as file:
        file.write(good_line(7) + "\n")
    with pytest.raises(InputError, match="the file changed since it was checked"):
        list(stream)


def test_load_posts_is_the_check_then_the_stream(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "m.jsonl", [good_line(1), "", good_line(2)])
    assert load_posts(path) == list(read_posts(check_posts(path)))
    assert [post.line for post in load_posts(path)] == [1, 3]
