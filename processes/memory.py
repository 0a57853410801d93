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

_M_ARENA_MAX = -8  # glibc's malloc.h


def fewer_malloc_arenas(most: int = 2) -> bool:
    """At most `most` malloc arenas from now on; False where the C library is not glibc."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others have no mallopt
        return False
    return bool(mallopt(_M_ARENA_MAX, most))


def give_back_freed_memory() -> bool:
    """The heap's free pages given back to the system (glibc's `malloc_trim`): after a step
    that allocated and freed much (the sync and plan of a big month, a chunk at a time), the
    allocator keeps what was freed, and the run's peak later stands on it. False where the C
    library is not glibc."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):  # musl and others have no malloc_trim
        return False
    return bool(trim(0))
