"""A throw-away folder and environment for one benchmark run: its own Prefect home and ledger,
nothing phoning home. Call before anything imports Prefect. The folder is removed when the
run ends (a month of 100 000 posts leaves ~200 MB), unless POSTLEDGER_BENCH_KEEP is set."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path


def isolated_workdir(prefix: str, **settings: str) -> Path:
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
