"""What a person reads about a month: its status and progress, the question it waits on, its
spend and summary in words, and what to do next. The shell shows these; it does not word them."""

from postledger.failures.hints import FINAL, next_step
from postledger.guards.breaker import OPENED_BECAUSE, advice
from postledger.guards.spend import money
from postledger.progress.forecast import Forecast, ledger_forecast
from postledger.progress.forecast_words import forecast_markdown, over_budget
from postledger.progress.report import completed_share, summary_markdown
from postledger.progress.status import progress_of, status_of, what_is_asked
from postledger.progress.words import SIMULATED, duration, spend_words

__all__ = [
    "FINAL",
    "Forecast",
    "OPENED_BECAUSE",
    "SIMULATED",
    "advice",
    "completed_share",
    "duration",
    "forecast_markdown",
    "ledger_forecast",
    "money",
    "next_step",
    "over_budget",
    "progress_of",
    "spend_words",
    "status_of",
    "summary_markdown",
    "what_is_asked",
]
