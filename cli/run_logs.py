"""Prefect's log lines beside `postledger run`'s progress bar.

Prefect's console handler writes through a rich console of its own, to the stderr it was built
with (it sees through the bar's redirect of stderr), so its lines would run into the live bar.
While the bar is shown in a terminal, they are printed by the bar's console: above the bar.
Not verbose, the lines Prefect's engine writes about state changes are left out: they repeat
postledger's own lines (a retried 503, an uncertain batch, a stopped run) and come with an
empty traceback ("NoneType: None"). An engine line about an unexpected exception (a bug) is
kept, traceback and all.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console

from postledger.upstreams.errors import UpstreamError


class EngineNoise(logging.Filter):
    def __init__(self, prefect_dir: str, expected: tuple[type[BaseException], ...]) -> None:
        """`expected`: the exceptions postledger raises and says itself (an upstream's
        fault, a stopped run): the engine's report of them is noise."""
        super().__init__()
        self._prefect_dir = prefect_dir
        self.expected = expected

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.pathname.startswith(self._prefect_dir):
            return True  # postledger's own line
        error = record.exc_info[1] if record.exc_info else None
        return error is not None and not isinstance(error, self.expected)


@contextmanager
def logs_above_the_bar(console: Console, *, verbose: bool) -> Iterator[None]:
    """Inside a live progress bar on `console`: Prefect's console lines print above the bar;
    without `verbose`, only postledger's own lines and unexpected errors."""
    import prefect
    from prefect.logging.handlers import PrefectConsoleHandler

    handlers = {
        handler
        for logger in (logging.getLogger(), logging.getLogger("prefect"))
        for handler in logger.handlers
        if isinstance(handler, PrefectConsoleHandler)
    }
    from flows.dispatch import RunStopped

    noise = EngineNoise(os.path.dirname(prefect.__file__), (UpstreamError, RunStopped))
    before = {handler: handler.console for handler in handlers}
    for handler in handlers:
        if console.is_terminal:  # elsewhere there is no live bar to keep clear of
            handler.console = console
        if not verbose:
            handler.addFilter(noise)
    try:
        yield
    finally:
        for handler, own in before.items():
            handler.console = own
            handler.removeFilter(noise)
