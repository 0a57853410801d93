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
