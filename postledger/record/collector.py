"""Python's cyclic garbage collector, paused through a month's bulk steps.

Reading, syncing or planning a month allocates hundreds of thousands of short-lived dicts and
tuples while the month's posts are alive, and every few thousand allocations the collector
walks what is alive: 0.5 to 1.5 s of CPU of a 3 s sync of 100 000 posts (`bench/scale.py`,
gc on and off, alternating). Nothing these steps make is cyclic, so reference counting frees
all of it the same; the collector runs again when the last step that paused it ends.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_guard = threading.Lock()
_pausing = 0  # steps under way that paused it, in any thread
_resume = False  # whether it ran before the first of them paused it


@contextmanager
def collector_paused() -> Iterator[None]:
    global _pausing, _resume
    with _guard:
        if _pausing == 0:
            _resume = gc.isenabled()
            gc.disable()
        _pausing += 1
    try:
        yield
    finally:
        with _guard:
            _pausing -= 1
            if _pausing == 0 and _resume:
                gc.enable()
