"""Bad input: a message naming file, line and fix. (Through the flow, the ledger left exactly
as it was: tests/flow/test_input.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from postledger.batches.posts import (
    AN_OBJECT,
    InputError,
    Post,
    Problem,
    load_posts,
    parse_month,
    previous_month,
)
from tests.support.bad_inputs import BAD_FILES, GOOD
from tests.support.months import write_jsonl


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
    # A line's other fields are kept beside it, for the report.
    assert load_posts(path) == [Post("a", "hello", 1), Post("7", "seven", 3, '{"x":1}')]


@pytest.mark.parametrize("month", ["2026-13", "2026-1", "26-10", "october", "2026-10-01", ""])
def test_bad_month(month: str) -> None:
    with pytest.raises(InputError, match="YYYY-MM"):
        parse_month(month)


def test_previous_month() -> None:
    from datetime import UTC, datetime

    assert previous_month(datetime(2026, 11, 1, 6, tzinfo=UTC)) == "2026-10"
    assert previous_month(datetime(2027, 1, 1, tzinfo=UTC)) == "2026-12"


# --- edge cases: each test is named after the defect it keeps away -------------------------


def problems_of(path: Path) -> list[tuple[int | None, str, str]]:
    with pytest.raises(InputError) as caught:
        load_posts(path)
    return [(p.line, p.what, p.fix) for p in caught.value.problems]


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\u0085"])
def test_unicode_line_separator_inside_a_string_does_not_split_the_line(
    tmp_path: Path, separator: str
) -> None:
    path = tmp_path / "m.jsonl"
    unescaped = f'{{"id": "b", "text": "one{separator}two"}}'
    path.write_text(f'{GOOD}\n{unescaped}\n\n{{"id": "c", "text": "x"}}\n', "utf-8")
    assert load_posts(path) == [
        Post("a", "hello", 1),
        Post("b", f"one{separator}two", 2),
        Post("c", "x", 4),
    ]


@pytest.mark.parametrize("separator", ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e"])
def test_control_character_that_splitlines_breaks_at_is_one_problem_on_its_own_line(
    tmp_path: Path, separator: str
) -> None:
    """JSON allows no raw control character in a string, so the line is refused, but as one
    line: before, it was cut in two and both halves were reported, on shifted lines."""
    path = tmp_path / "m.jsonl"
    unescaped = f'{{"id": "b", "text": "one{separator}two"}}'
    path.write_text(f'{GOOD}\n{unescaped}\n{{"id": "a", "text": "x"}}\n', "utf-8")
    assert problems_of(path) == [
        (2, "malformed JSON at column 25: invalid control character", AN_OBJECT),
        (3, 'duplicate id "a" (first on line 1)', "give every post its own id"),
    ]


def test_line_numbers_after_an_unescaped_separator_stay_right(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"id": "a", "text": "x\u2028y"}\n{"id": "a", "text": "z"}\n', "utf-8")
    assert problems_of(path) == [
        (2, 'duplicate id "a" (first on line 1)', "give every post its own id")
    ]


def test_crlf_line_endings_are_still_read(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_bytes(b'{"id": "a", "text": "hello"}\r\n\r\n{"id": "b", "text": "x"}\r\n')
    assert load_posts(path) == [Post("a", "hello", 1), Post("b", "x", 3)]


@pytest.mark.parametrize("field", ["id", "text"])
def test_lone_surrogate_is_refused_at_load_not_at_ledger_sync(tmp_path: Path, field: str) -> None:
    post = {"id": '"b"', "text": '"x"'} | {field: r'"ab\ud800"'}
    line = f'{{"id": {post["id"]}, "text": {post["text"]}}}'
    path = write_jsonl(tmp_path / "m.jsonl", [GOOD, line])
    [(number, what, fix)] = problems_of(path)
    assert number == 2
    assert what == rf'"{field}" holds a lone surrogate (\ud800) at character 3'
    assert "pair" in fix and "remove the escape" in fix
    message = str(InputError(str(path), [Problem(number, what, fix)]))
    message.encode("utf-8")  # the message itself can be printed


def test_lone_low_surrogate_is_refused_but_a_pair_is_a_character(tmp_path: Path) -> None:
    lines = [r'{"id": "a", "text": "\ud83d\ude00"}', r'{"id": "b", "text": "\udc00 x"}']
    path = write_jsonl(tmp_path / "m.jsonl", lines)
    [(number, what, _)] = problems_of(path)
    assert (number, what) == (2, r'"text" holds a lone surrogate (\udc00) at character 1')


@pytest.mark.parametrize("field", ["id", "text"])
def test_nul_character_is_refused_at_load_not_on_postgresql(tmp_path: Path, field: str) -> None:
    post = {"id": '"b"', "text": '"x"'} | {field: r'"b\u0000"'}
    line = f'{{"id": {post["id"]}, "text": {post["text"]}}}'
    path = write_jsonl(tmp_path / "m.jsonl", [GOOD, line])
    message = str(pytest.raises(InputError, load_posts, path).value)
    assert message == (
        f'{path}:2: "{field}" holds a NUL character (\\u0000) at character 2 — remove it: the '
        "ledger cannot store it"
    )


def test_integer_id_becomes_its_decimal_string_but_bool_and_float_do_not(tmp_path: Path) -> None:
    good = write_jsonl(
        tmp_path / "good.jsonl", ['{"id": 1, "text": "x"}', '{"id": -20, "text": "y"}']
    )
    assert load_posts(good) == [Post("1", "x", 1), Post("-20", "y", 2)]
    lines = ['{"id": true, "text": "x"}', '{"id": 1.0, "text": "x"}', '{"id": 1e3, "text": "x"}']
    bad = write_jsonl(tmp_path / "bad.jsonl", lines)
    assert [(n, what) for n, what, _ in problems_of(bad)] == [
        (1, '"id" is true'),
        (2, '"id" is 1.0'),
        (3, '"id" is 1000.0'),
    ]


def test_integer_id_and_its_string_are_the_same_id(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "m.jsonl", ['{"id": 1, "text": "x"}', '{"id": "1", "text": "y"}'])
    assert problems_of(path) == [
        (2, 'duplicate id "1" (first on line 1)', "give every post its own id")
    ]


@pytest.mark.parametrize("post_id", [" a", "a ", "\ta", "a\u00a0"])
def test_id_with_surrounding_spaces_is_refused_not_silently_trimmed(
    tmp_path: Path, post_id: str
) -> None:
    import json

    line = json.dumps({"id": post_id, "text": "x"}, ensure_ascii=False)
    path = write_jsonl(tmp_path / "m.jsonl", [GOOD, line])
    [(number, what, fix)] = problems_of(path)
    assert number == 2
    assert what.startswith('"id" is "') and what.endswith(", with spaces around it")
    assert fix.startswith("remove the spaces around the id")


def test_id_of_only_spaces_is_refused_as_empty(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "m.jsonl", ['{"id": "   ", "text": "x"}'])
    assert problems_of(path) == [(1, '"id" is "   "', '"id" must be a non-empty string or integer')]


def test_bad_values_are_shown_as_json_not_python_repr(tmp_path: Path) -> None:
    lines = [
        '{"id": true, "text": null}',
        '{"id": [1], "text": false}',
        '{"id": null, "text": {"a": "é"}}',
        '{"id": {}, "text": ["' + "x" * 60 + '"]}',
    ]
    path = write_jsonl(tmp_path / "m.jsonl", lines)
    assert [(n, what) for n, what, _ in problems_of(path)] == [
        (1, '"id" is true'),
        (1, '"text" is null'),
        (2, '"id" is [1]'),
        (2, '"text" is false'),
        (3, '"id" is null'),
        (3, '"text" is {"a": "é"}'),
        (4, '"id" is {}'),
        (4, '"text" is ["' + "x" * 35 + "…"),
    ]


def test_not_an_object_names_the_json_type(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "m.jsonl", ['"a"', "1", "true", "null", "[]"])
    kinds = [what for _, what, _ in problems_of(path)]
    assert kinds == [
        f"a JSON {kind} instead of an object"
        for kind in ("string", "number", "boolean", "null", "array")
    ]


@pytest.mark.parametrize(
    ("line", "what"),
    [
        ('{"id": "a', "malformed JSON at column 8: unterminated string"),
        ('{"id": "a\tb", "text": "x"}', "malformed JSON at column 10: invalid control character"),
        ('{"id": "a", "text": "x"} {}', "malformed JSON at column 26: extra data"),
        ("{", "malformed JSON at column 2: expecting property name enclosed in double quotes"),
        ('{"id" "a"}', "malformed JSON at column 7: expecting ':' delimiter"),
        ('{"id": "a", "text": }', "malformed JSON at column 21: expecting value"),
    ],
)
def test_malformed_json_message_has_no_doubled_at(tmp_path: Path, line: str, what: str) -> None:
    path = write_jsonl(tmp_path / "m.jsonl", [GOOD, line])
    [(number, shown, _)] = problems_of(path)
    assert (number, shown) == (2, what)
    assert " at at " not in shown


def test_number_too_long_to_read_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "m.jsonl", ['{"id": ' + "9" * 5000 + ', "text": "x"}', "oops"])
    assert [(n, what) for n, what, _ in problems_of(path)] == [
        (1, "unreadable JSON: a number with too many digits"),
        (2, "malformed JSON at column 1: expecting value"),
    ]


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_or_infinity_anywhere_is_a_problem(tmp_path: Path, constant: str) -> None:
    """Python's json reads them, so the report would write them back: no other tool reads
    such a file."""
    line = '{"id": "a", "text": "x", "score": ' + constant + "}"
    path = write_jsonl(tmp_path / "m.jsonl", [line])
    ((number, what, fix),) = problems_of(path)
    assert number == 1 and what.startswith(f"{constant} is not JSON")
    assert "null" in fix


def test_every_edge_case_is_reported_in_one_pass(tmp_path: Path) -> None:
    lines = [
        r'{"id": " a", "text": "x"}',
        r'{"id": "b", "text": "\ud800"}',
        r'{"id": "c\u0000", "text": "x"}',
        '{"id": true, "text": "x"}',
        '{"id": "e", "text": "x',
        '{"id": "f", "text": "ok\u2028fine"}',
    ]
    path = write_jsonl(tmp_path / "m.jsonl", lines)
    assert [n for n, _, _ in problems_of(path)] == [1, 2, 3, 4, 5]
