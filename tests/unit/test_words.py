"""How time and money are said to a person: hours, not seconds; currency units, not
micro-units; the bundled simulator's spend said to be simulated."""

from __future__ import annotations

import pytest

from postledger.progress.words import SIMULATED, duration, spend_words


@pytest.mark.parametrize(
    ("seconds", "said"),
    [(86_400, "24 h"), (5_400, "1.5 h"), (3_600, "1 h"), (900, "15 min"), (20, "20 s")],
)
def test_a_wait_is_said_in_the_largest_unit_that_fits(seconds: float, said: str) -> None:
    assert duration(seconds) == said


def test_spend_is_said_in_currency_units_and_the_simulators_as_simulated() -> None:
    spend = {"confirmed": 11_031, "possible": 2_000_000, "wasted": 0}
    said = spend_words(spend, simulated=False)
    assert said == "spend confirmed 0.011031, possible 2.000000, wasted 0.000000"
    assert spend_words(spend, simulated=True) == said + SIMULATED
