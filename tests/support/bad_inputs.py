"""Bad posts files, each with the line and the words the loader's message must give (the
loader's tests and the flow's)."""

from __future__ import annotations

GOOD = '{"id": "a", "text": "hello"}'
BAD_FILES: dict[str, tuple[list[str], int, str, str]] = {
    "malformed_json": (
        ['{"id": "a", "text": "hello"}', '{"id": "b", "text": "x"'],
        2,
        "malformed JSON",
        "one JSON object per line",
    ),
    "not_an_object": ([GOOD, '["b", "x"]'], 2, "JSON array instead of an object", "JSON object"),
    "missing_id": ([GOOD, '{"text": "x"}'], 2, 'missing "id"', 'add "id"'),
    "empty_id": ([GOOD, '{"id": "  ", "text": "x"}'], 2, '"id" is', "non-empty"),
    "missing_text": ([GOOD, '{"id": "b"}'], 2, 'missing "text"', 'add "text"'),
    "empty_text": ([GOOD, '{"id": "b", "text": ""}'], 2, '"text" is', "non-empty string"),
    "text_not_string": ([GOOD, '{"id": "b", "text": 42}'], 2, '"text" is 42', "non-empty string"),
    "duplicate_id": (
        [GOOD, '{"id": "b", "text": "x"}', '{"id": "a", "text": "y"}'],
        3,
        'duplicate id "a" (first on line 1)',
        "its own id",
    ),
}
