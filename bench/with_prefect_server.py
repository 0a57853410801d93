"""Run a command against a real `prefect server start` on a fresh PostgreSQL database (with
filesystem lease storage), the set-up docs/scaling.md describes; `{api_url}` in the command is
replaced by the server's API URL.

    uv run python bench/with_prefect_server.py python bench/throughput.py \\
        --batches 40 --latency 1 --repeat 3 --api-url {api_url}
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for tests.support.prefect_server

# The tests' clean-up at exit too: whatever the server or its database left behind.
from tests.support import session  # noqa: E402, F401
from tests.support.prefect_server import fresh_postgres_database, running_prefect_server  # noqa: E402


def main() -> int:
    command = sys.argv[1:]
    if not command:
        print(__doc__)
        return 2
    home = Path(tempfile.mkdtemp(prefix="postledger-bench-server-"))
    with (
        fresh_postgres_database("postledger_bench") as url,
        running_prefect_server(home, url) as api_url,
    ):
        print(f"prefect server on PostgreSQL at {api_url}", flush=True)
        return subprocess.call([part.replace("{api_url}", api_url) for part in command])


if __name__ == "__main__":
    sys.exit(main())
