"""An analysis: what the AI is asked about each post (the instructions) and the fields of its
answer. The one description every part uses: the requests, the check of each answer, the
fingerprint, the ledger's result and the report.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass, replace
from typing import Any

from postledger.analysis.fields import AnswerField, EnumField, EnumListField

# The key each item names its post by: a field of every answer, never of an analysis.
ITEM_ID = "id"


@dataclass(frozen=True)
class Analysis:
    name: str
    instructions: str
    fields: tuple[AnswerField, ...]

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(field.name for field in self.fields)

    def enum_fields(self) -> tuple[EnumField | EnumListField, ...]:
        """The fields whose values can be counted (the summary's tables)."""
        return tuple(f for f in self.fields if isinstance(f, EnumField | EnumListField))

    def item_schema(self, *, strict: bool = False) -> dict[str, Any]:
        """The JSON Schema of one post's answer: its id and every field, all required, nothing
        else (what OpenAI's strict mode asks for, and what every provider accepts).
        `strict=True`: OpenAI's strict form (bounds it does not take, said in words)."""
        properties: dict[str, Any] = {ITEM_ID: {"type": "string"}}
        properties |= {field.name: field.schema(strict=strict) for field in self.fields}
        return {
            "type": "object",
            "properties": properties,
            "required": [ITEM_ID, *self.field_names],
            "additionalProperties": False,
        }

    def json_schema(self) -> dict[str, Any]:
        """The analysis as a JSON Schema document, the form a user may write it in: its name
        as the title, the instructions as the description. Read back, it gives this analysis."""
        return {
            "title": self.name,
            "description": self.instructions,
            "type": "object",
            "properties": {field.name: field.schema() for field in self.fields},
            "required": list(self.field_names),
            "additionalProperties": False,
        }

    def fields_digest(self) -> str:
        """What the answer's shape is, as a short digest: equal digests, the same fields. The
        fields' order is not part of it: the same fields in another order ask the same."""
        schema = self.item_schema()
        schema["required"] = sorted(schema["required"])
        canonical = json.dumps(schema, sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]

    def said(self) -> str:
        """The analysis in a few words, for people: its name and its fields."""
        return f"{self.name} ({', '.join(self.field_names)})"

    @functools.cached_property
    def request_text(self) -> str:
        """What every request carries besides its posts (the instructions and the answer's
        schema): what an estimate of a request's size and cost counts."""
        return f"{self.instructions}\n{json.dumps(self.item_schema(), ensure_ascii=False)}"

    def with_instructions(self, instructions: str | None) -> Analysis:
        """This analysis asked with `instructions` instead (kept exactly as given: they are
        part of each post's fingerprint), unless they are empty."""
        if instructions is None or not instructions.strip():
            return self
        return replace(self, instructions=instructions)

    def check(self, item: dict[str, Any]) -> dict[str, Any] | str:
        """One answer's result (its fields, in the analysis's order), or why it is not one.
        Keys the analysis does not ask for are left out, as a model may add some."""
        result: dict[str, Any] = {}
        for field in self.fields:
            if field.name not in item:
                return f"{field.name}: missing"
            if (problem := field.problem(item[field.name])) is not None:
                return f"{field.name}: {problem}"
            result[field.name] = item[field.name]
        return result
