"""A throw-away folder and environment for one benchmark run: its own Prefect home and ledger,
nothing phoning home. Call before anything imports Prefect."""

from __future__ import annotations

import os
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
    return work
