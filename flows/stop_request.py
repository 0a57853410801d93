"""A person's request to stop `postledger run` early: Ctrl-C, or SIGTERM as `timeout`, `kill`
and service managers send it.

The first one starts no new batch and lets those in flight finish, so that each ends settled
in the ledger; the run then ends as any stopped run does, saying what is left. A second one
stops the run at once: batches still in flight stay `running` in the ledger, and the next run
looks at them before it sends anything (they are never sent again unasked).

Why not Python's KeyboardInterrupt: raised wherever the main thread happens to be, it was seen
swallowed inside a driver's clean-up (the run went on to the end of the month), and to leave
the run waiting for a minute on its task runs' threads.

`postledger run` installs the handlers; the dispatch loop reads the request. Prefect's flow
engine puts its own SIGTERM handler in place as the flow starts (it raises where the main
thread happens to be, as KeyboardInterrupt does), so the flow puts this one back. A deployed
flow never installs them: there Prefect's own cancellation applies.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

_why: list[str] = []  # why the run was asked to stop; empty while it was not
_handler: list[Callable[[int, FrameType | None], None]] = []  # while `stopping_on_signals` lasts


def stop_asked() -> str | None:
    """Why the run was asked to stop, if it was."""
    return _why[0] if _why else None


def ask_to_stop(why: str) -> None:
    if not _why:
        _why.append(why)


@contextmanager
def stopping_on_signals(say: Callable[[str], None]) -> Iterator[None]:
    """While this lasts (in the main thread), SIGINT and SIGTERM ask the run to stop; the
    second stops the process at once (exit code 130). `say` tells the person what happens."""
    _why.clear()

    def on_signal(number: int, _frame: FrameType | None) -> None:
        name = "Ctrl-C" if number == signal.SIGINT else signal.Signals(number).name
        if _why:
            say(f"{name} again: stopping now. The batches in flight are left to the next run.")
            os._exit(130)  # the children stop by their lifeline (processes/children.py)
        ask_to_stop(f"{name} asked it to stop")
        say(
            f"{name}: no new batch starts; those in flight are being finished. "
            f"{name} again stops at once (the next run then checks them)."
        )

    before = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    _handler[:] = [on_signal]
    try:
        yield
    finally:
        _handler.clear()
        for sig, handler in before.items():
            signal.signal(sig, handler)


def stop_on_signals_again() -> None:
    """In the flow, once Prefect's engine has put its SIGTERM handler in place: this module's
    back, if `stopping_on_signals` is in force (in the main thread only, where signals are)."""
    if _handler and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _handler[0])
