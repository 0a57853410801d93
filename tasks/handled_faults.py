"""A fault the system expects and handles reads as handled in the run's log.

When a one-call task run's request retries are spent on an upstream fault (no answer, a
refusal, a create that may have been made), Prefect's task engine logs it as an ERROR with
the full traceback, then its Failed final state as a second ERROR. The trip handles exactly
that fault (no verdict waits for the next look; a refusal is classified; the breaker counts
it), so a person reading the run would see a crash where the system did what it should.

This filter, on Prefect's task run logger, turns those records of our one-call task runs into
one WARNING line in plain words, without the traceback. A `process-batch` or
`process-submission` task run that ends Failed (the batch failed, or waits uncertain) is a
business outcome too: its "Finished in state Failed" line is a WARNING, and the line before it
that repeats the state with an empty traceback is dropped. Prefect's retries and the task
runs' states in the UI are untouched. Anything else, a crash or a bug of ours included, is
logged as Prefect logs it.
"""

from __future__ import annotations

import logging
from collections import OrderedDict

from postledger.trip import UpstreamError

TASK_RUN_LOGGER = "prefect.task_runs"
# The task runs whose fault was said: their "Finished in state Failed" line says it again.
_REMEMBERED = 1024


class HandledFaults(logging.Filter):
    """One WARNING line for a fault our task runs ended on and the trip handled."""

    def __init__(self, one_call_tasks: frozenset[str], trip_tasks: frozenset[str]) -> None:
        super().__init__()
        self._one_call, self._trips = one_call_tasks, trip_tasks
        self._said: OrderedDict[str, None] = OrderedDict()

    def filter(self, record: logging.LogRecord) -> bool:
        task_name = getattr(record, "task_name", None)
        if record.levelno < logging.ERROR or task_name not in self._one_call | self._trips:
            return True
        task_run = str(getattr(record, "task_run_id", ""))
        fault = record.exc_info[1] if record.exc_info else None
        said = record.getMessage()
        if isinstance(fault, UpstreamError) and task_name in self._one_call:
            self._remember(task_run)
            _plainly(record, "%s: %s. Handled: the batch's trip decides what follows")
            record.args = (getattr(record, "task_run_name", "the call"), fault)
            return True
        if fault is None and said.startswith("Task run failed with state"):
            return False  # a returned Failed state: "Finished in state" says it next
        if said.startswith("Finished in state Failed"):
            if task_name in self._one_call:
                return task_run not in self._said  # its fault was said just before
            # What became of the batch (failed, or uncertain and waiting): a business
            # outcome its state shows, not a crash.
            _plainly(record, "%s")
            record.args = (said,)
        return True

    def _remember(self, task_run: str) -> None:
        self._said[task_run] = None
        while len(self._said) > _REMEMBERED:
            self._said.popitem(last=False)


def _plainly(record: logging.LogRecord, message: str) -> None:
    record.levelno, record.levelname = logging.WARNING, "WARNING"
    record.msg = message
    record.exc_info, record.exc_text = None, None


def say_handled_faults_plainly() -> None:
    """Install the filter on Prefect's task run logger, once per process (a flow run calls
    this as it starts: its task runs log in its process)."""
    from tasks import upstream_calls as calls
    from tasks.batch import process_batch
    from tasks.submission import process_submission

    logger = logging.getLogger(TASK_RUN_LOGGER)
    if any(isinstance(existing, HandledFaults) for existing in logger.filters):
        return
    one_call = (
        calls.create_upstream_task,
        calls.wait_for_upstream_task,
        calls.find_upstream_task,
        calls.submit_upstream_job,
        calls.wait_for_upstream_job,
        calls.find_upstream_job,
    )
    trips = (process_batch, process_submission)
    logger.addFilter(
        HandledFaults(
            frozenset(task.name for task in one_call), frozenset(task.name for task in trips)
        )
    )
