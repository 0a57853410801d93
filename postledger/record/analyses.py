"""The analyses a ledger's posts were asked, kept by version (`AnalysisRecord`), so that a
result can always be read by the analysis that produced it, from the ledger alone."""

from __future__ import annotations

import json

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import Session

from postledger.analysis import Analysis, fields_version
from postledger.record.models import AnalysisRecord, utcnow


def keep_analysis(session: Session, analysis: Analysis) -> None:
    """The analysis kept under its version, once: the first name and text it had stay. Two
    months' runs may keep the same new analysis at once: the second insert does nothing."""
    table = AnalysisRecord.__table__  # type: ignore[attr-defined]
    version = fields_version(analysis)
    known = select(table.c.version).where(table.c.version == version)
    if session.connection().execute(known).first() is not None:
        return  # a sync of an unchanged month writes nothing
    row = {
        "version": version,
        "name": analysis.name,
        "document": json.dumps(analysis.json_schema(), ensure_ascii=False),  # fields in order
        "first_used": utcnow(),
    }
    dialect = postgresql if session.connection().dialect.name == "postgresql" else sqlite
    insert = dialect.insert(table).values(row).on_conflict_do_nothing(index_elements=["version"])
    session.connection().execute(insert)
