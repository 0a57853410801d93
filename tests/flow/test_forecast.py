"""`postledger estimate` against the months it forecasts: with no history it says what it
assumed; once the ledger has confirmed answers, its forecast of the next month is within a
tenth of what that month then costs, and it has a wall time to go by; a finished month has
nothing left. The actual cost is the ledger's confirmed spend (the simulator's bill)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from postledger.ledger import Ledger
from postledger.record.models import SpendState
from simulator.sample import generate_posts, write_posts
from tests.support.commands import postledger
from tests.support.simulators import Sim

pytestmark = pytest.mark.usefixtures("fast_retries")


def forecast_of(month: str, posts: Path) -> dict[str, Any]:
    done = postledger("estimate", "--month", month, "--posts", str(posts), "--json")
    assert done.returncode == 0, done.stderr
    said: dict[str, Any] = json.loads(done.stdout)
    return said


@pytest.mark.on_postgres  # the history read by plain SQL
@pytest.mark.parametrize("kind", ["task_api", "openai_batch"])
def test_a_forecast_with_history_is_within_a_tenth_of_what_the_month_costs(
    prefect_harness: None, sim: Sim, ledger: Ledger, tmp_path: Path, kind: str
) -> None:
    from flows.monthly import monthly_posts

    first, second = tmp_path / "2026-09.jsonl", tmp_path / "2026-10.jsonl"
    write_posts(first, generate_posts("2026-09", 150, 1))
    write_posts(second, generate_posts("2026-10", 150, 2))

    cold = forecast_of("2026-09", first)
    assert cold["posts"] == 150 and cold["learned_from_batches"] == 0
    assert cold["wall_seconds"] is None  # no history of this upstream
    assert sim.charges() == []  # a forecast never calls the AI

    monthly_posts(month="2026-09", posts_path=str(first))
    warm = forecast_of("2026-10", second)
    assert warm["learned_from_batches"] >= cold["batches"]
    assert warm["wall_seconds"] is not None and warm["timed_from"] >= 1
    # The budget's per-batch estimates, made before each call, did not fall short.
    assert warm["estimates_settled"] >= cold["batches"] and warm["estimates_short"] == 0

    monthly_posts(month="2026-10", posts_path=str(second))
    rows = ledger.spend("2026-10")
    assert rows and {row.state for row in rows} == {SpendState.CONFIRMED}
    actual = sum(row.cost or 0 for row in rows)
    forecast = warm["costs"][0]["cost"]
    assert abs(forecast - actual) * 10 <= actual, (forecast, actual)
    # The run kept the same forecast, made before it sent, for the live bar and `status`.
    assert ledger.forecast_total("2026-10") == warm["committed"] + forecast

    done = forecast_of("2026-10", second)
    assert (done["posts"], done["batches"], done["costs"][0]["cost"]) == (0, 0, 0)
