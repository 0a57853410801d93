"""Reading a month of posts from JSONL, with errors that say file, line and fix.

Nothing here touches the ledger: the input is checked completely first (`check_posts`, one pass
that keeps no post), so a bad file leaves the ledger exactly as it was; then it is read again,
a post at a time (`read_posts`), into the ledger. A month of a million posts is 450 MB of
text: it is never held whole.
"""

from __future__ import annotations

import codecs
import functools
import hashlib
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from postledger.analysis import Analysis, fields_version
from postledger.batches.post_lines import (
    AN_OBJECT,
    NUL,
    Post,
    Problem,
    as_json,
    input_fields,
    parse_line,
)
from postledger.errors import PostledgerError
from postledger.record.collector import collector_paused

__all__ = [
    "AN_OBJECT",
    "NUL",
    "CheckedPosts",
    "InputError",
    "Post",
    "Problem",
    "check_posts",
    "input_fields",
    "load_posts",
    "read_posts",
]

MONTH_PATTERN = re.compile(r"^(\d{4})-(0[1-9]|1[0-2])$")
MAX_PROBLEMS_SHOWN = 20


class InputError(PostledgerError):
    """The posts file (or the month) cannot be used; the message lists every problem found."""

    def __init__(self, source: str, problems: list[Problem], *, count: int | None = None) -> None:
        """`count`: how many problems there are, when `problems` keeps only the first ones."""
        self.source = source
        self.problems = problems
        self.count = max(count or 0, len(problems))
        shown = [
            f"{source}:{p.line}: {p.what} — {p.fix}" if p.line else f"{source}: {p.what} — {p.fix}"
            for p in problems[:MAX_PROBLEMS_SHOWN]
        ]
        if self.count > MAX_PROBLEMS_SHOWN:
            shown.append(f"… and {self.count - MAX_PROBLEMS_SHOWN} more problems")
        super().__init__("\n".join(shown))


def parse_month(value: str) -> str:
    """Return `value` if it is a month `YYYY-MM`, else raise InputError saying what to pass."""
    if not isinstance(value, str) or not MONTH_PATTERN.match(value.strip()):
        raise InputError(
            "--month",
            [Problem(None, f"{value!r} is not a month", "give it as YYYY-MM, e.g. 2026-10")],
        )
    return value.strip()


def previous_month(now: datetime | None = None) -> str:
    """The calendar month before `now` (UTC): a run on the 1st processes the month just ended."""
    now = now or datetime.now(UTC)
    year, month = (now.year, now.month - 1) if now.month > 1 else (now.year - 1, 12)
    return f"{year:04d}-{month:02d}"


def default_posts_path(data_dir: Path, month: str) -> Path:
    return data_dir / f"{month}.jsonl"


def input_parts(text: str, model: str, analysis: Analysis) -> dict[str, str]:
    """What a post's result depends on (R25), part by part, so that a change can be named:
    its text, the model, the analysis's instructions ("prompt") and its fields ("schema")."""
    return InputDigest(model, analysis).parts(text)


def fingerprint(text: str, model: str, analysis: Analysis) -> str:
    """One digest of `input_parts`: equal fingerprints, reusable results."""
    return InputDigest(model, analysis).of(text)[1]


class InputDigest:
    """`input_parts` and their fingerprint for the many posts of one model and analysis.

    A fingerprint is the SHA-256 of the parts as JSON with sorted keys, as every ledger has
    stored it; the text sorts last, so the JSON of the month's constant parts is made once and
    each post adds only its text's digest (a `json.dumps` per post was a fifth of a month's
    sync)."""

    def __init__(self, model: str, analysis: Analysis) -> None:
        self._constant = {
            "model": model,
            "prompt": _prompt_digest(analysis.instructions),
            "schema": fields_version(analysis),
        }
        self._head = json.dumps(self._constant, sort_keys=True)[:-1] + ', "text": "'

    def parts(self, text: str) -> dict[str, str]:
        return {"text": hashlib.sha256(text.encode("utf-8")).hexdigest()[:16], **self._constant}

    def of(self, text: str) -> tuple[dict[str, str], str]:
        """The post's parts and its fingerprint."""
        parts = self.parts(text)
        canonical = f'{self._head}{parts["text"]}"}}'
        return parts, hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@functools.lru_cache(maxsize=8)
def _prompt_digest(prompt: str) -> str:
    # One prompt for a whole month: digested once, not once per post.
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:16]


def legacy_fingerprint(text: str, model: str, prompt: str) -> str:
    """The fingerprint of ledgers written before the schema version was part of it: a record
    that matches it is unchanged work, and is upgraded rather than paid for again."""
    digest = hashlib.sha256()
    for part in (text, model, prompt):
        digest.update(part.encode("utf-8"))
        digest.update(b"\x00")
    return digest.hexdigest()


# The parts as a person names them.
PART_WORDS = {
    "text": "text",
    "model": "model",
    "prompt": "the analysis's instructions",
    "schema": "the analysis's fields",
}


def changed_parts(old: dict[str, str] | None, new: dict[str, str]) -> str:
    """Which parts differ, for the event log ("text, the analysis's fields")."""
    if not old:
        return "text, model or analysis"
    changed = [PART_WORDS.get(part, part) for part in new if old.get(part) != new[part]]
    return ", ".join(changed) or "fingerprint"


@dataclass(frozen=True)
class CheckedPosts:
    """A posts file that `check_posts` found good: what a run needs of it, without its posts."""

    path: Path
    count: int  # posts in it
    # The file as it was checked (size, modification time, inode): `read_posts` refuses a
    # file changed since.
    version: tuple[int, int, int]


# Problems kept of a bad file (each of them counted): the message shows the first 20, and a
# file of a million bad lines is not a million problems in memory.
MAX_PROBLEMS_KEPT = 10_000


# What a file's check keeps of an id: its hash (an int: a third of the memory of the id and
# its line, 72 MB for a million ids).
_id_key = hash


def check_posts(path: Path) -> CheckedPosts:
    """Read the whole file once and keep no post: raises InputError listing every problem
    (R32), else says how many posts it holds. What it keeps of a post is the hash of its id,
    to find ids given twice (a line whose id's hash was seen is looked at again, exactly)."""
    source = str(path)
    version = _version(path)
    problems: list[Problem] = []
    count = bad = 0
    seen: set[int] = set()
    again: dict[str, list[int]] = {}  # ids whose hash was seen before -> their lines
    with collector_paused():
        for number, raw in _lines(path):
            if not raw.strip():
                continue  # blank lines separate nothing in JSONL, but they hurt no one either
            found: list[Problem] = []
            post = parse_line(raw, number, found, fields=False)
            if post is None:
                bad += len(found)
                problems += found[: MAX_PROBLEMS_KEPT - len(problems)]
                continue
            key = _id_key(post.id)
            if key in seen:
                again.setdefault(post.id, []).append(number)
            else:
                seen.add(key)
                count += 1
        seen.clear()
        if again:  # rare: a file with ids given twice (or two ids of one hash)
            duplicates, firsts = _duplicates(path, again)
            count += firsts
            bad += len(duplicates)
            problems = sorted(problems + duplicates, key=lambda p: p.line or 0)
    if not count and not bad:
        problems.append(Problem(None, "the file holds no posts", "add one JSON object per line"))
        bad = 1
    if bad:
        raise InputError(source, problems[:MAX_PROBLEMS_KEPT], count=bad)
    return CheckedPosts(path, count, version)


def _duplicates(path: Path, again: dict[str, list[int]]) -> tuple[list[Problem], int]:
    """The lines that give an id of `again` a second time, each with the id's first line, and
    how many of `again`'s lines were an id's first after all (another id had its hash)."""
    first: dict[str, int] = {}
    for number, raw in _lines(path):
        post = parse_line(raw, number, [], fields=False) if raw.strip() else None
        if post is not None and post.id in again and post.id not in first:
            first[post.id] = number
    problems = []
    firsts = 0
    for post_id, lines in again.items():
        for number in lines:
            if number == first[post_id]:
                firsts += 1
                continue
            what = f"duplicate id {as_json(post_id)} (first on line {first[post_id]})"
            problems.append(Problem(number, what, "give every post its own id"))
    return problems, firsts


def read_posts(checked: CheckedPosts) -> Iterator[Post]:
    """The posts of a file `check_posts` found good, in file order, read as they are asked
    for. A file changed since its check is refused (InputError) before its first post and
    after its last, so a caller that writes what it reads in one transaction writes nothing
    of a file that changed under it."""
    source = str(checked.path)
    changed = Problem(
        None,
        "the file changed since it was checked",
        "leave it alone while a run reads it, and run again",
    )
    if not checked.path.is_file() or _version(checked.path) != checked.version:
        raise InputError(source, [changed])
    for number, raw in _lines(checked.path):
        if not raw.strip():
            continue
        problems: list[Problem] = []
        post = parse_line(raw, number, problems)
        if post is None:
            raise InputError(source, problems)
        yield post
    if _version(checked.path) != checked.version:
        raise InputError(source, [changed])


def load_posts(path: Path) -> list[Post]:
    """Every post of a small file, in file order; raises InputError listing every problem
    (R32). A month is read with `check_posts` and `read_posts`, never held whole."""
    checked = check_posts(path)
    with collector_paused():
        return list(read_posts(checked))


def _version(path: Path) -> tuple[int, int, int]:
    """The file as it is now: its size, modification time and inode."""
    source = str(path)
    try:
        stat = os.stat(path)
    except OSError:
        stat = None
    if stat is None or not path.is_file():
        raise InputError(
            source,
            [Problem(None, "no such file", "create it (one JSON object per line) or pass --posts")],
        )
    return stat.st_size, stat.st_mtime_ns, stat.st_ino


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """The file's lines, numbered from 1, as JSONL means them, read one at a time (a month's
    file may not fit in memory, and a whole file decoded at once costs up to four times its
    size). Split at "\n" only: `str.splitlines` would also break at U+2028, U+0085, form feeds
    and other characters a JSON string may hold unescaped."""
    source = str(path)
    with path.open("rb") as file:
        for number, data in enumerate(file, start=1):
            if number == 1:
                data = data.removeprefix(codecs.BOM_UTF8)
            try:
                line = data.decode("utf-8")
            except UnicodeDecodeError:
                problem = Problem(number, "the file is not UTF-8 text", "save the file as UTF-8")
                raise InputError(source, [problem]) from None
            yield number, line.removesuffix("\n").removesuffix("\r")
