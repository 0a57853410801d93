"""How a paused run and the progress artifact say time and money: in hours and in currency
units, never in raw seconds or micro-units."""

from __future__ import annotations

from collections.abc import Mapping

from postledger.guards.spend import money

SIMULATED_SPEND = "simulated: the bundled simulator, nothing paid"
SIMULATED = f" ({SIMULATED_SPEND})"


def duration(seconds: float) -> str:
    """`86400` -> "24 h", `5400` -> "1.5 h", `900` -> "15 min", `20` -> "20 s"."""
    if seconds >= 3600:
        return f"{round(seconds / 3600, 1):g} h"
    if seconds >= 60:
        return f"{round(seconds / 60):g} min"
    return f"{seconds:g} s"


def spend_words(spend: Mapping[str, int], *, simulated: bool) -> str:
    """ "spend confirmed 0.011031, possible 0.000000, wasted 0.000000" (currency units of the
    price table), said to be simulated with the bundled simulator."""
    return (
        f"spend confirmed {money(spend['confirmed'])}, possible {money(spend['possible'])}, "
        f"wasted {money(spend['wasted'])}" + (SIMULATED if simulated else "")
    )
