"""A throw-away folder and environment for one benchmark run: its own Prefect home and ledger,
nothing phoning home. Call before anything imports Prefect. The folder is removed when the
run ends (a month of 100 000 posts leaves ~200 MB), unless POSTLEDGER_BENCH_KEEP is set.

Every benchmark measures what a user's later runs cost: with the installed packages' and the
project's bytecode cached, as Python caches it on a user's first run. Where Python caches none
(PYTHONDONTWRITEBYTECODE is set on the machines these numbers come from), each process of every
run compiled Prefect's, FastAPI's and SQLAlchemy's sources again: ~3 s of every `postledger
run` (its Prefect server and simulator included), which is neither postledger's cost nor
Prefect's. So the sources are compiled here once (`compileall` skips what is up to date)."""

from __future__ import annotations

import atexit
import compileall
import os
import shutil
import sys
import sysconfig
import tempfile
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def isolated_workdir(prefix: str, **settings: str) -> Path:
    compile_sources()
    work = Path(tempfile.mkdtemp(prefix=prefix))
    os.environ.update(
        {
            "DO_NOT_TRACK": "1",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_HOME": str(work / "prefect-home"),
            "PREFECT_LOGGING_LEVEL": "WARNING",
            "POSTLEDGER_DATABASE_URL": f"sqlite:///{work / 'ledger.db'}",
            **settings,
        }
    )
    if os.environ.get("POSTLEDGER_BENCH_KEEP"):
        print(f"keeping {work}", file=sys.stderr)
    else:
        atexit.register(shutil.rmtree, work, ignore_errors=True)
    return work


def compile_sources() -> None:
    """The installed packages and the project's, compiled to bytecode where they are not yet."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    packages = project["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    for folder in [Path(sysconfig.get_paths()["purelib"]), *(REPO / p for p in packages)]:
        # quiet=2: a module written for a newer Python (whenever ships one) is not an error
        compileall.compile_dir(folder, quiet=2, workers=0)
