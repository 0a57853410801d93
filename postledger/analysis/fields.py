"""The fields an analysis asks of each post, one type per kind of answer.

Each field knows the JSON Schema it is asked with and the check of a value that came back: the
schema tells the model what to write, the check decides whether what it wrote is a result.
`schema(strict=True)` is the form OpenAI's strict structured outputs take: they list no
length or uniqueness keywords among those they support, so there those bounds are said in the
field's description, and the check holds them either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class FieldKind(StrEnum):
    """What kind of value a field holds (docs/analysis.md)."""

    ENUM = "enum"  # one of a few strings
    TEXT = "text"  # a string with a length bound
    INTEGER = "integer"  # a whole number in a range
    BOOLEAN = "boolean"  # true or false
    ENUM_LIST = "enum_list"  # some of a few strings


@dataclass(frozen=True)
class EnumField:
    name: str
    description: str
    values: tuple[str, ...]
    kind: FieldKind = FieldKind.ENUM

    def schema(self, *, strict: bool = False) -> dict[str, Any]:
        return {"type": "string", "enum": list(self.values), "description": self.description}

    def problem(self, value: Any) -> str | None:
        if isinstance(value, str) and value in self.values:
            return None
        return f"{_shown(value)} is not one of {_listed(self.values)}"


@dataclass(frozen=True)
class TextField:
    name: str
    description: str
    max_length: int
    min_length: int = 0
    kind: FieldKind = FieldKind.TEXT

    def schema(self, *, strict: bool = False) -> dict[str, Any]:
        if strict:
            return {"type": "string", "description": f"{self.description} {self.bounds_said()}"}
        schema: dict[str, Any] = {"type": "string", "description": self.description}
        schema["maxLength"] = self.max_length
        if self.min_length:
            schema["minLength"] = self.min_length
        return schema

    def bounds_said(self) -> str:
        """The bounds in words, as strict mode carries them (the simulator reads them back)."""
        least = f"at least {self.min_length} and " if self.min_length else ""
        return f"({least}at most {self.max_length} characters)"

    def problem(self, value: Any) -> str | None:
        if not isinstance(value, str):
            return f"{_shown(value)} is not text"
        if len(value) > self.max_length:
            return f"{len(value)} characters, more than the {self.max_length} allowed"
        if len(value) < self.min_length:
            return f"{len(value)} characters, fewer than the {self.min_length} asked for"
        return None


@dataclass(frozen=True)
class IntegerField:
    name: str
    description: str
    minimum: int
    maximum: int
    kind: FieldKind = FieldKind.INTEGER

    def schema(self, *, strict: bool = False) -> dict[str, Any]:
        return {
            "type": "integer",
            "minimum": self.minimum,
            "maximum": self.maximum,
            "description": self.description,
        }

    def problem(self, value: Any) -> str | None:
        if type(value) is not int:  # a boolean is an int to Python, not to JSON
            return f"{_shown(value)} is not a whole number"
        if not self.minimum <= value <= self.maximum:
            return f"{value} is outside {self.minimum}..{self.maximum}"
        return None


@dataclass(frozen=True)
class BooleanField:
    name: str
    description: str
    kind: FieldKind = FieldKind.BOOLEAN

    def schema(self, *, strict: bool = False) -> dict[str, Any]:
        return {"type": "boolean", "description": self.description}

    def problem(self, value: Any) -> str | None:
        return None if isinstance(value, bool) else f"{_shown(value)} is not true or false"


@dataclass(frozen=True)
class EnumListField:
    name: str
    description: str
    values: tuple[str, ...]
    min_items: int = 0
    max_items: int | None = None  # None: as many as there are values
    unique: bool = True
    kind: FieldKind = FieldKind.ENUM_LIST

    @property
    def most(self) -> int:
        return len(self.values) if self.max_items is None else self.max_items

    def schema(self, *, strict: bool = False) -> dict[str, Any]:
        description = self.description
        if strict and self.unique:
            description = f"{description} (each value at most once)"
        schema: dict[str, Any] = {
            "type": "array",
            "items": {"type": "string", "enum": list(self.values)},
            "description": description,
        }
        if self.min_items:
            schema["minItems"] = self.min_items
        schema["maxItems"] = self.most
        if not strict:
            schema["uniqueItems"] = self.unique
        return schema

    def problem(self, value: Any) -> str | None:
        if not isinstance(value, list):
            return f"{_shown(value)} is not a list"
        for item in value:
            if not isinstance(item, str) or item not in self.values:
                return f"{_shown(item)} is not one of {_listed(self.values)}"
        if self.unique and len(set(value)) != len(value):
            return "a value is listed twice"
        if not self.min_items <= len(value) <= self.most:
            return f"{len(value)} values, not {self.min_items}..{self.most}"
        return None


AnswerField = EnumField | TextField | IntegerField | BooleanField | EnumListField


def _shown(value: Any) -> str:
    import json

    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "…"


def _listed(values: tuple[str, ...]) -> str:
    shown = ", ".join(values[:8])
    return shown + (f", … ({len(values)} in all)" if len(values) > 8 else "")
