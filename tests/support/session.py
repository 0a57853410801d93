"""The end of a pytest process, and of the run (`tests/conftest.py` calls these, and at exit
this process's own are ended whatever happened): every simulator stopped, every process ended,
every database dropped."""

from __future__ import annotations

import atexit
import os
import shutil
from pathlib import Path

from tests.support.databases import _drop_database, _listed_databases, drop_own_databases
from tests.support.processes import RUN_DIR_VAR, _kill_marked, end_own_processes, run_id
from tests.support.simulators import SIMULATORS


def end_run() -> None:
    """The session leader's last word: every process of the run ended, every database it
    wrote down dropped, its folder removed."""
    end_own_processes()
    if (run := run_id()) is None:
        return
    _kill_marked(lambda value: value.startswith(f"{run}/"))
    run_dir = Path(os.environ[RUN_DIR_VAR])
    for name, admin in _listed_databases(run_dir):
        _drop_database(admin, name)
    shutil.rmtree(run_dir, ignore_errors=True)


# This process's own, whatever happened: registered once, when tests/conftest.py (or a bench
# script, through it) first imports this module.
def _at_exit() -> None:
    SIMULATORS.close()
    end_own_processes()
    drop_own_databases()


atexit.register(_at_exit)
