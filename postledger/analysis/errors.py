"""A bad analysis, refused before anything is marked running."""

from __future__ import annotations

from dataclasses import dataclass

from postledger.errors import PostledgerError

MAX_PROBLEMS_SHOWN = 20


@dataclass(frozen=True)
class Problem:
    where: str  # "field 'urgency'", "the schema", …
    what: str
    fix: str


class AnalysisError(PostledgerError):
    """The analysis cannot be used; the message names its source, every problem found in it,
    and what to do about each."""

    def __init__(self, source: str, problems: list[Problem]) -> None:
        self.source = source
        self.problems = problems
        shown = [f"{source}: {p.where}: {p.what} — {p.fix}" for p in problems[:MAX_PROBLEMS_SHOWN]]
        if len(problems) > MAX_PROBLEMS_SHOWN:
            shown.append(f"… and {len(problems) - MAX_PROBLEMS_SHOWN} more problems")
        super().__init__("\n".join(shown))
