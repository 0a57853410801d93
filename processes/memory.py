"""Fewer malloc arenas for a long run with many threads, and freed memory given back.

glibc gives each thread that allocates its own arena (up to eight per core), and memory freed
in one arena is not reused by another: in `postledger run` of a million posts, Prefect's and
our threads held ~110 MB in arenas of their own beside the main heap. Two arenas is what
`MALLOC_ARENA_MAX=2` would set, for arenas made from now on; it must come before the threads.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from typing import Any

_M_ARENA_MAX = -8  # glibc's malloc.h


def _glibc(function: str) -> Any | None:
    """The C library's `function`; None where that library is not glibc (musl and others
    have neither `mallopt` nor `malloc_trim`)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), function)
    except (OSError, AttributeError):
        return None


def fewer_malloc_arenas(most: int = 2) -> bool:
    """At most `most` malloc arenas from now on; False where the C library is not glibc."""
    mallopt = _glibc("mallopt")
    return mallopt is not None and bool(mallopt(_M_ARENA_MAX, most))


def give_back_freed_memory() -> bool:
    """The heap's free pages given back to the system (glibc's `malloc_trim`): after a step
    that allocated and freed much (the sync and plan of a big month, a chunk at a time), the
    allocator keeps what was freed, and the run's peak later stands on it. False where the C
    library is not glibc."""
    trim = _glibc("malloc_trim")
    return trim is not None and bool(trim(0))
