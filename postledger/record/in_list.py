"""`column IN (values)` for a list of any length, as one parameter.

Why: an IN list of thousands of parameters cost more to render and bind than the rows it
named, and each length is a statement of its own. SQLite's driver keeps the last 128
statements of each connection compiled, with their bound values: a chunk's IN list of 6 250
post ids compiles to a ~300 kB program, and a 300 000-post month's run held ~55 MB of them
(memray, at the run's peak). As one parameter, the statement is the same whatever the count.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from sqlalchemy import ColumnElement, Connection, String, any_, bindparam, func, select
from sqlalchemy.dialects.postgresql import ARRAY


def any_of(connection: Connection, column: Any, values: Iterable[str]) -> ColumnElement[bool]:
    """`column IN values`: on PostgreSQL `= ANY` of one array parameter, elsewhere (SQLite)
    `IN` the rows of `json_each` of one JSON array (which the query plan reads by the
    column's index, as an IN list)."""
    listed = list(values)
    if connection.dialect.name == "postgresql":
        return column == any_(bindparam(None, listed, type_=ARRAY(String)))  # type: ignore[no-any-return]
    array = bindparam(None, json.dumps(listed), type_=String)
    rows = func.json_each(array).table_valued("value")
    return column.in_(select(rows.c.value))  # type: ignore[no-any-return]
