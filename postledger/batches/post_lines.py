"""One line of a month's posts file: checked, and made a `Post`, or its problems named (line
and fix). The file as a whole is read in `postledger.batches.posts`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import NamedTuple


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


NUL = "\x00"
AN_OBJECT = 'write one JSON object per line, e.g. {"id": "p1", "text": "…"}'


def parse_line(
    raw: str, number: int, problems: list[Problem], *, fields: bool = True
) -> Post | None:
    """The line's post, or None with its problems added to `problems`. Without `fields`, the
    line's other keys are checked as JSON but not kept (a file's check keeps no post)."""
    item = _decode(raw, number, problems)
    if item is None:
        return None
    post_id = _check_id(item, number, problems)
    text = _check_text(item, number, problems)
    if post_id is None or text is None:
        return None
    return Post(id=post_id, text=text, line=number, fields=input_fields(item) if fields else "")


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


def as_json(value: object) -> str:
    """`value` as it would be written in the file, readable (not ASCII-escaped) when it can be
    printed at all."""
    shown = json.dumps(value, ensure_ascii=False)
    return shown if _lone_surrogate(shown) is None else json.dumps(value)


def _short(value: object) -> str:
    shown = as_json(value)
    return shown if len(shown) <= 40 else shown[:37] + "…"
