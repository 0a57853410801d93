"""A pytest worker's Prefect API (the project's own local server), what it holds (the tag
limit's slots, a flow run's task runs and state), and what a flow run logs."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

from tests.support.commands import migrated_prefect_home
from tests.support.processes import _WORKER_ONLY


@contextlib.contextmanager
def local_prefect_api(home: Path) -> Iterator[str]:
    """The project's own local Prefect server (`flows/local_server.py`: SQLite writes opened
    BEGIN IMMEDIATE), on its own PREFECT_HOME `home`, with this process's Prefect client
    pointed at it as `postledger run` points its own, threads included. Yields the API URL.

    Only this process talks to it: the server sets PREFECT_API_URL and its client settings in
    the environment; the Prefect ones are given to Prefect's settings here (Prefect was
    imported long before) and taken out of the environment, and `child_env` leaves all of
    them out, so that a child `postledger run` starts its own local server (as a user's does)
    on the worker's PREFECT_HOME, which this server's lock does not hold."""
    import prefect.context
    import prefect.settings
    from prefect.settings import temporary_settings

    from flows.local_server import local_prefect_server

    migrated_prefect_home(home)
    with contextlib.ExitStack() as stack:
        worker_home = os.environ.get("PREFECT_HOME")
        os.environ["PREFECT_HOME"] = str(home)
        try:
            before = dict(os.environ)
            api_url = stack.enter_context(local_prefect_server())
            given = {k: v for k, v in os.environ.items() if before.get(k) != v}
        finally:
            if worker_home is None:
                os.environ.pop("PREFECT_HOME", None)
            else:
                os.environ["PREFECT_HOME"] = worker_home
        _WORKER_ONLY.update(given)
        updates: dict[Any, Any] = {}
        for name, value in given.items():
            if name.startswith("PREFECT_") and hasattr(prefect.settings, name):
                updates[getattr(prefect.settings, name)] = value
                del os.environ[name]
            # (the others, postledger's local-server flag, stay: the flows read them here)
        stack.enter_context(temporary_settings(updates=updates))
        # Threads a test starts see the global settings context, not this thread's.
        stack.enter_context(
            prefect.context._temporary_global_settings_context(
                prefect.context.get_settings_context()
            )
        )
        stack.callback(_drain_events)
        yield api_url


def _drain_events() -> None:
    """Send the events still queued before the server stops (as Prefect's harness does)."""
    import inspect

    from prefect.events.worker import EventsWorker
    from prefect.utilities.asyncutils import run_coro_as_sync

    async def drain() -> None:
        result = EventsWorker.drain_all()
        if inspect.isawaitable(result):
            await result

    with contextlib.suppress(Exception):
        run_coro_as_sync(drain())


def ai_batch_slots_taken() -> int:
    """`tag:ai-batch` slots counted as taken by the current Prefect API."""
    from prefect import get_client

    from flows.limits import tag_limit_name

    with get_client(sync_client=True) as client:
        return client.read_global_concurrency_limit_by_name(tag_limit_name()).active_slots


def task_runs_of(
    flow_run_id: UUID, ready: Callable[[list[Any]], bool], timeout: float = 120.0
) -> list[Any]:
    """A flow run's task runs, once `ready` says they are all there: task runs reach the API
    through events, a little after the flow run itself ended (on a loaded CI machine, the last
    of 40 batches' events have been seen to come more than 30 s late)."""
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    flow_run = FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
    deadline = time.monotonic() + timeout
    with get_client(sync_client=True) as client:
        while True:
            runs = client.read_task_runs(flow_run_filter=flow_run)
            if ready(runs):
                return runs
            assert time.monotonic() < deadline, [run.name for run in runs]
            time.sleep(0.2)


def flow_run_state(flow_run_id: str) -> str:
    """The state type of a flow run on the current Prefect API ("PAUSED", ...)."""
    from prefect import get_client

    with get_client(sync_client=True) as client:
        state = client.read_flow_run(UUID(flow_run_id)).state
        return state.type.value if state else "NONE"


@contextlib.contextmanager
def flow_log(caplog: Any) -> Iterator[Callable[[], list[str]]]:
    """The flow's own log lines at INFO and above while the block runs (Prefect's run logger
    does not propagate to caplog's), each once: call the yielded function for them."""
    import logging

    run_log = logging.getLogger("prefect.flow_runs")
    run_log.addHandler(caplog.handler)
    caplog.set_level(logging.INFO, logger="prefect.flow_runs")
    try:
        yield lambda: [r.getMessage() for r in {id(r): r for r in caplog.records}.values()]
    finally:
        run_log.removeHandler(caplog.handler)


@contextlib.contextmanager
def logs_shipped() -> Iterator[None]:
    """The runs' logs sent to the Prefect API while this lasts, as a deployment's are (the
    local server a run starts has no UI, so it does not send them)."""
    from prefect.settings import PREFECT_LOGGING_TO_API_ENABLED, temporary_settings

    with temporary_settings({PREFECT_LOGGING_TO_API_ENABLED: True}):
        yield


def logs_since(start: Any) -> list[Any]:
    """What the Prefect API holds of the runs' logs since `start` (a UTC datetime): what the
    UI shows, formatted as sent (a traceback included)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterTimestamp
    from prefect.logging.handlers import APILogHandler

    APILogHandler().flush()  # the log worker is shared: its queue sent, then read
    with get_client(sync_client=True) as client:
        since = LogFilter(timestamp=LogFilterTimestamp(after_=start))
        return list(client.read_logs(log_filter=since))
