"""`postledger`: run a month, look at it, prepare the machine, make sample data, simulate.

One module per command group (`run.py`; `estimate.py`; `look.py`: status, report, plan,
breaker; `answers.py`: retry, approve; `setup.py`; `sample.py`; `analysis.py`; `sim.py`);
this one registers them, in the order `--help` lists them. Commands that need Prefect import
it when they run, so `status` and `sim` start fast and the core stays importable without it.
"""

from __future__ import annotations

import typer

from cli import analysis, answers, estimate, look, run, sample, setup, sim
from cli.shared import err

app = typer.Typer(
    help="Send a month of posts to a paid AI service in batches, with a ledger that never loses "
    "track of what was sent, paid for, or finished.",
    no_args_is_help=True,
    add_completion=False,
    # Click's plain help: flags shown as flags (not `<bool>`), paragraphs rewrapped to the
    # terminal instead of broken where the docstring's lines end.
    rich_markup_mode=None,
)
app.command()(run.run)
app.command()(estimate.estimate)
app.command()(look.status)
app.command()(look.report)
app.command()(answers.retry)
app.command()(answers.approve)
app.command("plan")(look.plan_command)
app.command()(look.breaker)
app.command()(setup.setup)
app.command()(sample.sample)
app.command()(analysis.analysis)
app.add_typer(sim.sim_app, name="sim")


def main() -> None:
    """The `postledger` command. A ledger that cannot be used as it is (an older schema, a
    database that does not answer, a write that failed), or an analysis that cannot be (a
    command that estimates what a batch costs reads it), is said with what to do, never as a
    traceback; anything else unexpected keeps its traceback."""
    try:
        app(prog_name="postledger")
    except Exception as exc:
        from postledger.analysis import AnalysisError

        if isinstance(exc, AnalysisError):
            err.print(f"error: {exc}", soft_wrap=True, markup=False, highlight=False)
            raise SystemExit(2) from None
        problem = _ledger_problem(exc)
        if problem is None:
            raise
        err.print(f"error: {problem}", soft_wrap=True, markup=False, highlight=False)
        raise SystemExit(1) from None


def _ledger_problem(exc: Exception) -> str | None:
    # Imported here: only a failing command pays for them.
    from sqlalchemy.exc import OperationalError

    from postledger.record.db import LedgerUnavailable
    from postledger.record.migrate import SchemaMismatch
    from postledger.record.plain import LedgerUnreadable, unusable

    if isinstance(exc, SchemaMismatch | LedgerUnavailable | LedgerUnreadable):
        return str(exc)
    if isinstance(exc, OperationalError):
        return unusable(str(exc.orig).strip().splitlines()[0] if exc.orig else "no answer")
    return None
