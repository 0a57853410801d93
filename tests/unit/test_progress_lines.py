"""`postledger run` where its output is not a terminal: plain progress lines, never silence."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from cli.run_view import ProgressLines


def _report(completed: int, failed: int = 0, running: int = 0) -> dict[str, Any]:
    return {"completed": completed, "failed": failed, "counts": {"running": running}}


def _lines(out: io.StringIO) -> list[str]:
    return [line for line in out.getvalue().splitlines() if line]


def test_a_line_each_tenth_of_the_month_and_none_in_between() -> None:
    out = io.StringIO()
    lines = ProgressLines("2026-10", 1000, Console(file=out, width=200))
    for ended in range(0, 1001, 20):  # 50 reports, every 20 posts
        lines.maybe_print(_report(ended, running=50))
    said = _lines(out)
    assert len(said) == 10, said  # at 100, 200, ..., 1000
    assert said[0].startswith("2026-10: 100 of 1000 posts ended (100 completed, 0 failed), 50 ")
    assert said[-1].startswith("2026-10: 1000 of 1000 posts ended")


def test_a_line_now_and_then_while_nothing_ends() -> None:
    out = io.StringIO()
    lines = ProgressLines("2026-10", 100_000, Console(file=out, width=200))
    lines.maybe_print(None)
    lines.maybe_print(_report(5, failed=1))
    assert _lines(out) == []  # not yet: neither a tenth ended nor the interval passed
    lines.EVERY = 0.0
    lines.maybe_print(None)
    lines.maybe_print(_report(5, failed=1, running=2))
    first, second = _lines(out)
    assert first.startswith("2026-10: starting Prefect and recording the posts")
    assert second.startswith("2026-10: 6 of 100000 posts ended (5 completed, 1 failed), 2 running")
