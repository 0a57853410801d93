"""The ledger the suite's tests get: a SQLite file, or in the suite's PostgreSQL pass a fresh
database on the server that POSTLEDGER_DATABASE_URL names, and the PostgreSQL cluster the
tests create their databases in."""

from __future__ import annotations

import os

import pytest

# Set by tests/conftest.py from POSTLEDGER_DATABASE_URL before it clears that and before it
# imports anything of tests.support (or by a bench script, before it imports the tests): read
# once, when this module is first imported. The suite's PostgreSQL pass puts every test's
# ledger on a fresh database there.
LEDGER_UNDER_TEST = os.environ.get("POSTLEDGER_TEST_LEDGER_URL", "")
LEDGER_ON_POSTGRES = LEDGER_UNDER_TEST.startswith("postgresql")
sqlite_ledger_only = pytest.mark.skipif(
    LEDGER_ON_POSTGRES, reason="about SQLite itself (its file, its write lock)"
)
# The cluster the tests create their databases in.
PG_ADMIN_URL = (
    LEDGER_UNDER_TEST
    if LEDGER_ON_POSTGRES
    else os.environ.get(
        "POSTLEDGER_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
    )
)
