"""The report's answer columns: one per field of the analyses the month's posts were asked,
read from the ledger (`postledger.record.analyses`), never from today's settings, so that a
report says what the results hold even after the analysis changed."""

from __future__ import annotations

import json
from collections.abc import Sequence

from postledger.analysis import AnalysisError, AnswerField, load_analysis, read_schema
from postledger.analysis.default import DEFAULT_FIELDS_VERSION
from postledger.record import rows as ledger_rows
from postledger.record.plain import Reader
from postledger.record.rows import ReportedPost


def answer_fields(reader: Reader, posts: Sequence[ReportedPost]) -> dict[str, AnswerField]:
    """Column name → the field it holds, for every analysis the posts name, in the order they
    are first met (a field of two analyses: the first one's)."""
    versions = list(dict.fromkeys(post.analysis for post in posts))
    kept = (
        ledger_rows.analyses(reader) if any(v != DEFAULT_FIELDS_VERSION for v in versions) else {}
    )
    fields: dict[str, AnswerField] = {}
    for version in versions:
        for field in _fields_of(version, kept):
            fields.setdefault(field.name, field)
    return fields


def _fields_of(version: str | None, kept: dict[str, str]) -> tuple[AnswerField, ...]:
    if version is None or version == DEFAULT_FIELDS_VERSION:
        return load_analysis(None).fields  # ledgers older than the choice knew only these
    document = kept.get(version)
    if document is None:
        return ()  # not kept (a ledger written by a version that kept none): no columns
    try:
        return read_schema(json.loads(document), "the ledger's analysis", name=version).fields
    except (AnalysisError, ValueError):
        return ()
