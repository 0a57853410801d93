"""`postledger run` asks glibc for at most two malloc arenas (`processes/memory.py`)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from processes.memory import fewer_malloc_arenas


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_glibc_takes_the_limit() -> None:
    # In a child: the limit holds for the rest of a process's life.
    code = "from processes.memory import fewer_malloc_arenas as f; print(f(2))"
    said = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert said.stdout.split() == ["True"]


def test_elsewhere_nothing_is_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    assert fewer_malloc_arenas() is False


GIVE_BACK = """
import re
from processes.memory import give_back_freed_memory

def rss():
    return int(re.search(r"VmRSS:\\s+(\\d+)", open("/proc/self/status").read()).group(1))

blocks = [bytes(1000 + i % 7) for i in range(200_000)]  # ~200 MB from malloc's heap
kept = blocks[::20]  # a few kept between the holes: the heap's top cannot shrink
del blocks
before = rss()
print(give_back_freed_memory(), before - rss())
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_freed_memory_between_kept_blocks_is_given_back() -> None:
    said = subprocess.run(
        [sys.executable, "-c", GIVE_BACK], capture_output=True, text=True, check=True
    )
    trimmed, given_back_kb = said.stdout.split()
    assert trimmed == "True" and int(given_back_kb) > 100_000, said.stdout
