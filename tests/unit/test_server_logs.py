"""What the private Prefect server may print on a run's terminal: a few plain lines where
Prefect would print thousands of warnings, or tracebacks at a stop (flows/server_logs.py)."""

from __future__ import annotations

import asyncio
import logging

from flows.server_logs import DROPPED_EVERY, CutShort, DroppedEvents


def _record(
    message: str, *, level: int = logging.WARNING, error: BaseException | None = None
) -> logging.LogRecord:
    exc_info = (type(error), error, error.__traceback__) if error else None
    return logging.LogRecord("prefect", level, __file__, 1, message, (), exc_info)


def test_dropped_events_are_counted_and_said_now_and_then() -> None:
    dropped = DroppedEvents()
    full = "Subscription queue is full, dropping message for topic=%r queue_size=%d"
    passed = []
    for _ in range(2 * DROPPED_EVERY + 5):
        record = logging.LogRecord("m", logging.WARNING, __file__, 1, full, ("events", 1), None)
        if dropped.filter(record):
            passed.append(record.getMessage())
    assert len(passed) == 3  # the first, then one per DROPPED_EVERY
    assert passed[0].startswith("Prefect's server is behind this run: 1 of its events dropped")
    assert f"{2 * DROPPED_EVERY} of its events dropped" in passed[-1]
    assert "the ledger, which decides every batch, is not affected" in passed[-1]
    assert dropped.filter(_record("something else entirely"))


def test_a_flush_cut_short_by_the_stop_is_one_line_without_a_traceback() -> None:
    cut = CutShort()

    def cancelled_then_failed() -> BaseException:
        # As seen at a stop: closing the connection fails while the cancellation is handled.
        error = RuntimeError("while closing the connection")
        error.__context__ = asyncio.CancelledError("Cancelled via cancel scope")
        return error

    first = _record("Error flushing 1 events", level=logging.ERROR, error=cancelled_then_failed())
    assert cut.filter(first)
    assert first.exc_info is None and first.levelno == logging.WARNING
    assert "stopped with task run events not yet recorded" in first.getMessage()
    again = _record("Error flushing 1 events", level=logging.ERROR, error=cancelled_then_failed())
    assert not cut.filter(again)  # said once
    other = _record("Error flushing 3 events", level=logging.ERROR, error=ValueError("bad row"))
    assert cut.filter(other) and other.exc_info is not None  # any other error as Prefect logs it
