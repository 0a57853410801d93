"""The user's analysis: what each post is asked, and the fields of its answer (docs/analysis.md).

`load_analysis` turns a reference (a JSON Schema file, a pydantic model, or nothing for the
built-in analysis) into an `Analysis`, or raises `AnalysisError` naming what to fix.
"""

from postledger.analysis.description import ITEM_ID, Analysis
from postledger.analysis.errors import AnalysisError, Problem
from postledger.analysis.fields import (
    AnswerField,
    BooleanField,
    EnumField,
    EnumListField,
    FieldKind,
    IntegerField,
    TextField,
)
from postledger.analysis.loading import DEFAULT, fields_version, load_analysis
from postledger.analysis.reading import read_schema

__all__ = [
    "DEFAULT",
    "ITEM_ID",
    "Analysis",
    "AnalysisError",
    "AnswerField",
    "BooleanField",
    "EnumField",
    "EnumListField",
    "FieldKind",
    "IntegerField",
    "Problem",
    "TextField",
    "fields_version",
    "load_analysis",
    "read_schema",
]
