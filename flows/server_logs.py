"""What the private Prefect server of `postledger run` may print on the user's terminal.

Its output is the run's own stderr. When batches end faster than the server records their
task runs (a month of very short batches), Prefect warns once per event it drops, thousands of
lines, and a stop with events still queued ends in tracebacks. Neither touches the ledger, which
decides every batch; both mean Prefect's record of the run is incomplete. Said here in a few
plain lines instead.
"""

from __future__ import annotations

import asyncio
import logging

DROPPING_LOGGER = "prefect.server.utilities.messaging.memory"
RECORDER_LOGGER = "prefect.server.services.task_run_recorder"
# A line for the first dropped event, then one per this many.
DROPPED_EVERY = 2_000

_BEHIND = (
    "Prefect's server is behind this run: {count} of its events dropped so far, so Prefect's "
    "record of the run's task runs is incomplete (the ledger, which decides every batch, is "
    "not affected)"
)
_STOPPED = (
    "Prefect's server stopped with task run events not yet recorded: Prefect's record of this "
    "run is incomplete (the ledger, which decides every batch, is not affected)"
)


class DroppedEvents(logging.Filter):
    """Prefect's "Subscription queue is full, dropping message" warnings, counted: the first,
    then one every DROPPED_EVERY, each in plain words with the count so far."""

    def __init__(self) -> None:
        super().__init__()
        self.dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if "queue is full" not in record.getMessage():
            return True
        self.dropped += 1
        if self.dropped != 1 and self.dropped % DROPPED_EVERY:
            return False
        record.msg, record.args = _BEHIND.format(count=self.dropped), ()
        return True


class CutShort(logging.Filter):
    """The task run recorder's flush cancelled by the server's stop: one plain line, no
    traceback. Any other error of the recorder is left as Prefect logs it."""

    def __init__(self) -> None:
        super().__init__()
        self.said = False

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if not _cancelled(error):
            return True
        if self.said:
            return False
        self.said = True
        record.msg, record.args, record.exc_info, record.exc_text = _STOPPED, (), None, None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def _cancelled(error: BaseException | None) -> bool:
    while error is not None:
        if isinstance(error, asyncio.CancelledError):
            return True
        error = error.__context__
    return False


def plain_server_logs() -> None:
    """Install both filters on Prefect's loggers (after Prefect set its logging up)."""
    logging.getLogger(DROPPING_LOGGER).addFilter(DroppedEvents())
    logging.getLogger(RECORDER_LOGGER).addFilter(CutShort())
