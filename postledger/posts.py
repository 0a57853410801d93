"""Reading a month of posts from JSONL, with errors that say file, line and fix.

Nothing here touches the ledger: the input is read and checked completely first, so a bad file
leaves the ledger exactly as it was.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

MONTH_PATTERN = re.compile(r"^(\d{4})-(0[1-9]|1[0-2])$")
MAX_PROBLEMS_SHOWN = 20


@dataclass(frozen=True)
class Post:
    id: str
    text: str
    line: int  # 1-based line in the input file


@dataclass(frozen=True)
class Problem:
    line: int | None
    what: str
    fix: str


class InputError(ValueError):
    """The posts file (or the month) cannot be used; the message lists every problem found."""

    def __init__(self, source: str, problems: list[Problem]) -> None:
        self.source = source
        self.problems = problems
        shown = [
            f"{source}:{p.line}: {p.what} — {p.fix}" if p.line else f"{source}: {p.what} — {p.fix}"
            for p in problems[:MAX_PROBLEMS_SHOWN]
        ]
        if len(problems) > MAX_PROBLEMS_SHOWN:
            shown.append(f"… and {len(problems) - MAX_PROBLEMS_SHOWN} more problems")
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


def input_parts(text: str, model: str, prompt: str) -> dict[str, str]:
    """What a post's result depends on (R25), part by part, so that a change can be named:
    its text, the model, the prompt template and the version of the output schema."""
    from postledger.analysis import SCHEMA_VERSION

    return {
        "text": hashlib.sha256(text.encode("utf-8")).hexdigest()[:16],
        "model": model,
        "prompt": hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:16],
        "schema": SCHEMA_VERSION,
    }


def fingerprint(text: str, model: str, prompt: str) -> str:
    """One digest of `input_parts`: equal fingerprints, reusable results."""
    parts = input_parts(text, model, prompt)
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode("utf-8")).hexdigest()


def legacy_fingerprint(text: str, model: str, prompt: str) -> str:
    """The fingerprint of ledgers written before the schema version was part of it: a record
    that matches it is unchanged work, and is upgraded rather than paid for again."""
    digest = hashlib.sha256()
    for part in (text, model, prompt):
        digest.update(part.encode("utf-8"))
        digest.update(b"\x00")
    return digest.hexdigest()


def changed_parts(old: dict[str, str] | None, new: dict[str, str]) -> str:
    """Which parts differ, for the event log ("text, prompt")."""
    if not old:
        return "text, model, prompt or schema"
    return ", ".join(part for part in new if old.get(part) != new[part]) or "fingerprint"


def load_posts(path: Path) -> list[Post]:
    """Every post of the file, in file order; raises InputError listing every problem."""
    source = str(path)
    if not path.is_file():
        raise InputError(
            source,
            [Problem(None, "no such file", "create it (one JSON object per line) or pass --posts")],
        )
    try:
        content = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[: exc.start].count(b"\n") + 1
        raise InputError(
            source, [Problem(line, "the file is not UTF-8 text", "save the file as UTF-8")]
        ) from None

    posts: list[Post] = []
    problems: list[Problem] = []
    first_seen: dict[str, int] = {}
    for number, raw in enumerate(content.splitlines(), start=1):
        if not raw.strip():
            continue  # blank lines separate nothing in JSONL, but they hurt no one either
        post = _parse_line(raw, number, problems)
        if post is None:
            continue
        if post.id in first_seen:
            problems.append(
                Problem(
                    number,
                    f"duplicate id {post.id!r} (first on line {first_seen[post.id]})",
                    "give every post its own id",
                )
            )
            continue
        first_seen[post.id] = number
        posts.append(post)

    if not posts and not problems:
        problems.append(Problem(None, "the file holds no posts", "add one JSON object per line"))
    if problems:
        raise InputError(source, problems)
    return posts


def _parse_line(raw: str, number: int, problems: list[Problem]) -> Post | None:
    try:
        item = json.loads(raw)
    except json.JSONDecodeError as exc:
        problems.append(
            Problem(
                number,
                f"malformed JSON ({exc.msg} at column {exc.colno})",
                'write one JSON object per line, e.g. {"id": "p1", "text": "…"}',
            )
        )
        return None
    if not isinstance(item, dict):
        problems.append(
            Problem(
                number,
                f"a JSON {type(item).__name__} instead of an object",
                'write one JSON object per line, e.g. {"id": "p1", "text": "…"}',
            )
        )
        return None

    post_id = item.get("id")
    if isinstance(post_id, int) and not isinstance(post_id, bool):
        post_id = str(post_id)
    text = item.get("text")
    ok = True
    if post_id is None:
        problems.append(Problem(number, 'missing "id"', 'add "id": a unique, non-empty string'))
        ok = False
    elif not isinstance(post_id, str) or not post_id.strip():
        problems.append(
            Problem(number, f'"id" is {post_id!r}', '"id" must be a non-empty string or integer')
        )
        ok = False
    if text is None:
        problems.append(Problem(number, 'missing "text"', 'add "text": the post itself'))
        ok = False
    elif not isinstance(text, str) or not text.strip():
        problems.append(
            Problem(number, f'"text" is {_short(text)}', '"text" must be a non-empty string')
        )
        ok = False
    if not ok:
        return None
    assert isinstance(post_id, str) and isinstance(text, str)
    return Post(id=post_id.strip(), text=text, line=number)


def _short(value: object) -> str:
    shown = repr(value)
    return shown if len(shown) <= 40 else shown[:37] + "…"
