"""Reading a month of posts from JSONL, with errors that say file, line and fix.

Nothing here touches the ledger: the input is read and checked completely first, so a bad file
leaves the ledger exactly as it was.
"""

from __future__ import annotations

import codecs
import functools
import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

from postledger.analysis import Analysis, fields_version
from postledger.errors import PostledgerError
from postledger.record.collector import collector_paused

MONTH_PATTERN = re.compile(r"^(\d{4})-(0[1-9]|1[0-2])$")
MAX_PROBLEMS_SHOWN = 20


class Post(NamedTuple):
    id: str
    text: str
    line: int  # 1-based line in the input file
    # The line's other keys (author, source, …) as canonical JSON (`input_fields`), "" when it
    # has none: kept for the report, never part of the fingerprint.
    fields: str = ""


@dataclass(frozen=True)
class Problem:
    line: int | None
    what: str
    fix: str


class InputError(PostledgerError):
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


def load_posts(path: Path) -> list[Post]:
    """Every post of the file, in file order; raises InputError listing every problem (R32)."""
    source = str(path)
    if not path.is_file():
        raise InputError(
            source,
            [Problem(None, "no such file", "create it (one JSON object per line) or pass --posts")],
        )
    with collector_paused():
        return _read_posts(path, source)


def _read_posts(path: Path, source: str) -> list[Post]:
    posts: list[Post] = []
    problems: list[Problem] = []
    first_seen: dict[str, int] = {}
    for number, raw in _lines(path):
        if not raw.strip():
            continue  # blank lines separate nothing in JSONL, but they hurt no one either
        post = _parse_line(raw, number, problems)
        if post is None:
            continue
        if post.id in first_seen:
            problems.append(
                Problem(
                    number,
                    f"duplicate id {_as_json(post.id)} (first on line {first_seen[post.id]})",
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


NUL = "\x00"
AN_OBJECT = 'write one JSON object per line, e.g. {"id": "p1", "text": "…"}'


def _parse_line(raw: str, number: int, problems: list[Problem]) -> Post | None:
    item = _decode(raw, number, problems)
    if item is None:
        return None
    post_id = _check_id(item, number, problems)
    text = _check_text(item, number, problems)
    if post_id is None or text is None:
        return None
    return Post(id=post_id, text=text, line=number, fields=input_fields(item))


def input_fields(item: dict[str, object]) -> str:
    """A line's keys other than "id" and "text", as one canonical text (sorted keys, no
    spaces), so that an unchanged line gives the same text and the ledger is not written.
    "" when there are none."""
    other = {key: value for key, value in item.items() if key not in ("id", "text")}
    if not other:
        return ""
    shown = _CANONICAL.encode(other)
    if _lone_surrogate(shown) is None:
        return shown
    # A lone surrogate (from a "\ud800" escape) cannot be stored as UTF-8: escaped, it can.
    return _CANONICAL_ASCII.encode(other)


# Made once: `json.dumps` with options makes an encoder per call, 40 % of the time of a line.
_CANONICAL = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"))
_CANONICAL_ASCII = json.JSONEncoder(sort_keys=True, separators=(",", ":"))


def _decode(raw: str, number: int, problems: list[Problem]) -> dict[str, object] | None:
    try:
        item = _DECODER.decode(raw)
    except _NotJson as exc:
        what = f"{exc} is not JSON (Python's json reads it, nothing else does)"
        problems.append(Problem(number, what, "write null, a number or a string instead"))
        return None
    except json.JSONDecodeError as exc:
        what = f"malformed JSON at column {exc.colno}: {_json_reason(exc.msg)}"
        problems.append(Problem(number, what, AN_OBJECT))
        return None
    except ValueError:  # json reads at most 4300 digits of an integer
        problems.append(
            Problem(number, "unreadable JSON: a number with too many digits", AN_OBJECT)
        )
        return None
    except RecursionError:
        problems.append(Problem(number, "JSON nested too deeply to read", AN_OBJECT))
        return None
    if not isinstance(item, dict):
        what = f"a JSON {_json_type(item)} instead of an object"
        problems.append(Problem(number, what, AN_OBJECT))
        return None
    return item


class _NotJson(ValueError):
    """NaN, Infinity or -Infinity in a line."""


def _not_json(constant: str) -> object:
    raise _NotJson(constant)


# Made once: `json.loads` with an option makes a decoder per call.
_DECODER = json.JSONDecoder(parse_constant=_not_json)


def _json_reason(msg: str) -> str:
    """json's own words, minus the trailing "at" some of them end in (they expect a position
    after them, which the message gives first)."""
    reason = msg.removesuffix(" at").removesuffix(" starting")
    return reason[:1].lower() + reason[1:]


def _json_type(value: object) -> str:
    names = {list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return names.get(type(value), "null")


def _check_id(item: dict[str, object], number: int, problems: list[Problem]) -> str | None:
    if "id" not in item:
        problems.append(Problem(number, 'missing "id"', 'add "id": a unique, non-empty string'))
        return None
    value = item["id"]
    if type(value) is int:  # a bool is an int to Python, but not an id
        return str(value)
    if not isinstance(value, str) or not value.strip():
        fix = '"id" must be a non-empty string or integer'
        problems.append(Problem(number, f'"id" is {_short(value)}', fix))
        return None
    if value != value.strip():
        what = f'"id" is {_short(value)}, with spaces around it'
        fix = "remove the spaces around the id: the report gives back the id exactly as written"
        problems.append(Problem(number, what, fix))
        return None
    return value if _storable("id", value, number, problems) else None


def _check_text(item: dict[str, object], number: int, problems: list[Problem]) -> str | None:
    if "text" not in item:
        problems.append(Problem(number, 'missing "text"', 'add "text": the post itself'))
        return None
    value = item["text"]
    if not isinstance(value, str) or not value.strip():
        fix = '"text" must be a non-empty string'
        problems.append(Problem(number, f'"text" is {_short(value)}', fix))
        return None
    return value if _storable("text", value, number, problems) else None


def _storable(field: str, value: str, number: int, problems: list[Problem]) -> bool:
    """Whether the ledger can keep `value`: UTF-8 has no lone surrogates, and PostgreSQL's
    text holds no NUL. Refused here, the whole file is refused before anything is written."""
    if NUL in value:
        what = f'"{field}" holds a NUL character (\\u0000) at character {value.index(NUL) + 1}'
        fix = "remove it: the ledger cannot store it"
        problems.append(Problem(number, what, fix))
        return False
    lone = _lone_surrogate(value)
    if lone is not None:
        at, code = lone
        what = f'"{field}" holds a lone surrogate (\\u{code:04x}) at character {at + 1}'
        fix = (
            "a \\uD800-\\uDFFF escape must come in a high-low pair: write the character "
            "itself, or fix or remove the escape"
        )
        problems.append(Problem(number, what, fix))
        return False
    return True


def _lone_surrogate(value: str) -> tuple[int, int] | None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start, ord(value[exc.start])
    return None


def _as_json(value: object) -> str:
    """`value` as it would be written in the file, readable (not ASCII-escaped) when it can be
    printed at all."""
    shown = json.dumps(value, ensure_ascii=False)
    return shown if _lone_surrogate(shown) is None else json.dumps(value)


def _short(value: object) -> str:
    shown = _as_json(value)
    return shown if len(shown) <= 40 else shown[:37] + "…"
