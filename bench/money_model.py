"""The money model (`tests/ledger/test_money_model.py`) with many more examples than the suite runs,
and a summary of what they went through.

    uv run python bench/money_model.py                 # 2000 examples, SQLite
    POSTLEDGER_MODEL_EXAMPLES=500 uv run python bench/money_model.py
    uv run python bench/money_model.py --examples 300 --postgres \\
        postgresql+psycopg://postgres@127.0.0.1:5432/postgres

Examples are random (not the suite's derandomized ones); a failure prints its shrunk steps
and a `@reproduce_failure` blob, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--examples", type=int, default=int(os.environ.get("POSTLEDGER_MODEL_EXAMPLES", 2000))
    )
    parser.add_argument("--steps", type=int, default=None, help="steps per example")
    parser.add_argument("--postgres", metavar="ADMIN_URL", default=None)
    args = parser.parse_args()
    # Before tests.conftest is imported: it keeps only POSTLEDGER_TEST_* variables.
    os.environ["POSTLEDGER_TEST_MODEL_EXAMPLES"] = str(args.examples)
    if args.steps:
        os.environ["POSTLEDGER_TEST_MODEL_STEPS"] = str(args.steps)
    if args.postgres:
        os.environ["POSTLEDGER_TEST_LEDGER_URL"] = args.postgres
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

    import logging
    import traceback

    from hypothesis.stateful import run_state_machine_as_test

    # The suite's environment and its clean-up at exit first, as under pytest.
    import tests.conftest  # noqa: F401
    from tests.ledger.test_money_model import LOG, STATS, MoneyModel, machine_settings

    LOG.setLevel(logging.CRITICAL)  # what the trips say of each fault: thousands of lines

    began = time.monotonic()
    failed = False
    try:
        run_state_machine_as_test(MoneyModel, settings=machine_settings())
    except Exception as exc:  # each failure, with its shrunk steps (the exception's notes)
        failed = True
        traceback.print_exception(exc, file=sys.stderr)
        print(f"\nFAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
    took = time.monotonic() - began
    backend = "PostgreSQL" if args.postgres else "SQLite"
    print(f"\nmoney model: {args.examples} examples on {backend} in {took:.0f} s")
    for name, count in sorted(STATS.items()):
        print(f"  {count:8d}  {name}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
