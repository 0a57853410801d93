"""A month's forecast (`postledger.progress.forecast`) in words: the command's lines, the
flow's artifact, and why a forecast past the budget asks before the first batch."""

from __future__ import annotations

from postledger.defaults import JOB_LIMITS
from postledger.guards.spend import money
from postledger.progress.forecast import Forecast


def forecast_lines(forecast: Forecast) -> list[str]:
    """The forecast in plain words, a line each (the command's output, the artifact's)."""
    work, usage, rates = forecast.work, forecast.usage, forecast.rates
    lines = [
        f"Left to send of {forecast.month}: {work.posts} posts in {work.batches} batches"
        + (f" ({work.too_long} too long to send)" if work.too_long else ""),
        f"Tokens: {usage.input + usage.cached_input + usage.cache_write} in"
        + (
            f" ({usage.cached_input} read from the prompt cache, {usage.cache_write} written)"
            if usage.cached_input or usage.cache_write
            else ""
        )
        + f", {usage.output} out",
    ]
    if rates.learned_from:
        lines.append(
            f"  learned from {rates.learned_from} completed batches: "
            f"{float(1 / rates.input_per_char):.2f} characters a token, "
            f"{float(rates.output_per_post):.1f} output tokens a post"
        )
    else:
        lines.append(
            "  no answered batches in the ledger yet: assumed 4 characters a token and 60 "
            "output tokens a post; the forecast may be off by half either way"
        )
    for index, each in enumerate(forecast.costs):
        how = "configured" if index == 0 else "the same provider's other way in"
        off = f", {each.discount_percent}% off" if each.discount_percent else ""
        said = "no price for the model" if each.cost is None else money(each.cost)
        lines.append(f"Cost on {each.kind.value} ({how}{off}): {said}")
    if forecast.wall_seconds is None:
        lines.append("Time: no finished batches of this upstream in the ledger to go by")
    else:
        units = "jobs" if forecast.costs[0].kind in JOB_LIMITS else "batches"
        lines.append(
            f"Time: about {_duration(forecast.wall_seconds)} "
            f"(from {forecast.timed_from} finished {units})"
        )
    short = forecast.shortfalls
    if short.settled:
        lines.append(
            f"The budget's per-batch estimate fell short of the cost on {short.short} of "
            f"{short.settled} answered batches"
            + (
                f" (at worst by {money(short.worst)}, {short.worst_share:.0%} of that batch)"
                if short.short
                else ""
            )
        )
    if forecast.max_cost is not None:
        left = forecast.max_cost - forecast.committed
        verdict = "would cross it" if forecast.crosses_budget() else "fits"
        lines.append(
            f"Budget: {money(forecast.max_cost)}, {money(forecast.committed)} committed, "
            f"{money(left)} left: the forecast {verdict}"
        )
    return lines


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def forecast_markdown(forecast: Forecast) -> str:
    """The forecast as the flow's artifact shows it, when the run starts."""
    return "\n".join(
        [f"## {forecast.month}: the forecast, before anything is sent", ""]
        + [f"- {line.strip()}" for line in forecast_lines(forecast)]
    )


def over_budget(forecast: Forecast) -> str:
    """Why a forecast past the budget stops the month before its first batch."""
    assert forecast.cost is not None and forecast.max_cost is not None
    return (
        f"the forecast for what is left of {forecast.month} is {money(forecast.cost)}, and "
        f"with {money(forecast.committed)} already committed that is past its budget of "
        f"{money(forecast.max_cost)}"
    )
