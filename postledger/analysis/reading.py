"""A JSON Schema read as an analysis: the one reader of both ways a user writes one (a JSON
Schema file, or a pydantic model's `model_json_schema()`), saying every problem at once.

What it takes is deliberately small and flat (docs/analysis.md): an object whose properties are
the fields, each an enum, a bounded string, an integer in a range, a boolean or a list of enum
values, each required and described (`kinds.py` reads each kind). Anything else is refused with
what to write instead, so that a schema never reaches a provider that would refuse it, and no
bound goes unchecked.
"""

from __future__ import annotations

import re
from typing import Any

from postledger.analysis.description import ITEM_ID, Analysis
from postledger.analysis.errors import AnalysisError, Problem
from postledger.analysis.fields import AnswerField
from postledger.analysis.kinds import KINDS, Node, resolved_node, typed_field
from postledger.analysis.strict import strict_problems

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
# Names the answer or the report already uses for something else.
RESERVED = {ITEM_ID, "error", "text", "status", "failure_kind", "failure_reason", "attempts"}
RESERVED_PREFIXES = ("input_", "cost_", "wasted_")
_AN_OBJECT = (
    'write {"type": "object", "properties": {...}, "required": [...]}, one property per field'
)


def read_schema(document: Any, source: str, *, name: str) -> Analysis:
    """The analysis `document` describes; raises AnalysisError naming `source` and every
    problem. `name`: the analysis's name when the schema has no title. The instructions (the
    description) are kept exactly as written: they are part of each post's fingerprint."""
    here = "the schema"
    if not isinstance(document, dict):
        raise AnalysisError(source, [Problem(here, "it is not a JSON object", _AN_OBJECT)])
    problems: list[Problem] = []
    if document.get("type", "object") != "object":
        problems.append(Problem(here, f"its type is {document.get('type')!r}", _AN_OBJECT))
    if document.get("additionalProperties", False) is not False:
        fix = 'set "additionalProperties": false (in pydantic, do not set extra="allow")'
        problems.append(Problem(here, "it allows properties it does not name", fix))
    properties = document.get("properties")
    if not isinstance(properties, dict) or not properties:
        problems.append(Problem(here, "it has no properties", _AN_OBJECT))
        properties = {}
    required = document.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        problems.append(Problem(here, '"required" is not a list of names', _AN_OBJECT))
        required = list(properties)  # said once, not once per field
    description = document.get("description", "")
    if not isinstance(description, str):
        fix = "write the instructions as one text"
        problems.append(Problem(here, "its description (the instructions) is not text", fix))
        description = ""
    defs = _definitions(document, problems)
    fields = [_field(str(key), node, defs, required, problems) for key, node in properties.items()]
    title = document.get("title")
    analysis = Analysis(
        name=title.strip() if isinstance(title, str) and title.strip() else name,
        instructions=description,
        fields=tuple(field for field in fields if field is not None),
    )
    if not problems:
        problems = strict_problems(analysis)
    if problems:
        raise AnalysisError(source, problems)
    return analysis


def _definitions(document: dict[str, Any], problems: list[Problem]) -> dict[str, Any]:
    """What a `$ref` may name: pydantic's `$defs` (or the older `definitions`)."""
    defs: dict[str, Any] = {}
    for key in ("definitions", "$defs"):
        found = document.get(key, {})
        if not isinstance(found, dict):
            problems.append(Problem("the schema", f'"{key}" is not an object', _AN_OBJECT))
            continue
        defs |= found
    return defs


def _field(
    name: str, node: Any, defs: dict[str, Any], required: list[str], problems: list[Problem]
) -> AnswerField | None:
    here = f"field {name!r}"
    start = len(problems)
    if not NAME.fullmatch(name):
        fix = "name it with letters, digits and _ (not starting with a digit), at most 64"
        problems.append(Problem(here, "its name is not an identifier", fix))
    elif name in RESERVED or name.startswith(RESERVED_PREFIXES):
        fix = "give it another name"
        problems.append(Problem(here, "its name is taken by postledger's own columns", fix))
    if name not in required:
        fix = (
            'add it to "required" (in pydantic: give it no default); a field that may be '
            'empty can be an enum with a value such as "unknown"'
        )
        problems.append(Problem(here, "it is not required, and every field must be answered", fix))
    resolved = resolved_node(node, defs)
    if resolved is None:
        problems.append(Problem(here, "its schema cannot be read", f"make it {KINDS}"))
        return None
    description = resolved.get("description")
    if not isinstance(description, str) or not description.strip():
        fix = (
            'add a "description" (in pydantic: Field(description=...)): it is what the model reads'
        )
        problems.append(Problem(here, "it has no description", fix))
        description = ""
    field = typed_field(Node(name, description.strip(), resolved, defs, here), problems)
    return field if len(problems) == start else None
