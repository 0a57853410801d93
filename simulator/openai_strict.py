"""What OpenAI's strict structured outputs refuse, so that the simulator refuses it too: a
request whose `response_format` is `json_schema` with `strict: true` and a schema that
- has an object whose `required` does not list every key of its `properties`,
- has an object without `"additionalProperties": false`,
- has more than 1 000 enum values, or more than 5 000 properties, in all.

OpenAI answers such a chat completion with a 400 naming `response_format`, and nothing is
charged; a Batch API line with one is answered the same 400 in the batch's error file (the
other lines run). The limits are OpenAI's "Supported schemas" (`postledger.analysis.strict`,
which keeps an analysis within them before anything is sent).
"""

from __future__ import annotations

from typing import Any

from fastapi import Response
from fastapi.responses import JSONResponse

from postledger.analysis.strict import MOST_ENUM_VALUES, MOST_PROPERTIES

PARAM = "response_format"


def strict_problem(body: dict[str, Any]) -> str | None:
    """Why OpenAI would refuse this chat request's strict schema, in its words, or None."""
    format_ = body.get("response_format")
    if not isinstance(format_, dict) or format_.get("type") != "json_schema":
        return None
    spec = format_.get("json_schema")
    if not isinstance(spec, dict) or spec.get("strict") is not True:
        return None
    counts = {"enum": 0, "properties": 0}
    problem = _object_problem(spec.get("schema"), (), counts)
    if problem is None and counts["enum"] > MOST_ENUM_VALUES:
        problem = (
            f"Expected at most {MOST_ENUM_VALUES} enum values in total within a schema, but "
            f"received {counts['enum']}."
        )
    if problem is None and counts["properties"] > MOST_PROPERTIES:
        problem = (
            f"Expected at most {MOST_PROPERTIES} properties in total within a schema, but "
            f"received {counts['properties']}."
        )
    if problem is None:
        return None
    return f"Invalid schema for response_format {spec.get('name')!r}: {problem}"


def _object_problem(node: Any, context: tuple[str, ...], counts: dict[str, int]) -> str | None:
    """The first problem of `node` and what it holds, depth first; counts its enum values and
    properties on the way."""
    if not isinstance(node, dict):
        return None
    if isinstance(node.get("enum"), list):
        counts["enum"] += len(node["enum"])
    properties = node.get("properties")
    if node.get("type") == "object" or isinstance(properties, dict):
        properties = properties if isinstance(properties, dict) else {}
        counts["properties"] += len(properties)
        required = node.get("required")
        listed = required if isinstance(required, list) else []
        missing = [key for key in properties if key not in listed]
        if not isinstance(required, list) or missing:
            return (
                f"In context={context!r}, 'required' is required to be supplied and to be an "
                "array including every key in properties."
                + (f" Missing {missing[0]!r}." if missing else "")
            )
        if node.get("additionalProperties") is not False:
            return (
                f"In context={context!r}, 'additionalProperties' is required to be supplied "
                "and to be false."
            )
    for key, inner in _inside(node, properties):
        if (problem := _object_problem(inner, (*context, *key), counts)) is not None:
            return problem
    return None


def _inside(node: dict[str, Any], properties: Any) -> list[tuple[tuple[str, ...], Any]]:
    """The schemas `node` holds, each with the path to it."""
    held: list[tuple[tuple[str, ...], Any]] = []
    if isinstance(properties, dict):
        held += [(("properties", str(key)), inner) for key, inner in properties.items()]
    if "items" in node:
        held.append((("items",), node["items"]))
    for defs in ("$defs", "definitions"):
        if isinstance(node.get(defs), dict):
            held += [((defs, str(key)), inner) for key, inner in node[defs].items()]
    for combined in ("anyOf", "allOf"):
        if isinstance(node.get(combined), list):
            held += [((combined, str(i)), inner) for i, inner in enumerate(node[combined])]
    return held


def refusal_body(message: str) -> dict[str, Any]:
    """OpenAI's error body for a refused schema."""
    error = {"message": message, "type": "invalid_request_error", "param": PARAM, "code": None}
    return {"error": error}


def refused(message: str) -> Response:
    return JSONResponse(refusal_body(message), status_code=400)
