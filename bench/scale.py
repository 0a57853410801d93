"""The bookkeeping of a big month, step by step: check the file, sync it into the ledger (all
new, the file read again a chunk at a time, as a run does), plan it, sync it again (all
unchanged), and `postledger status`; the peak resident memory of the process after each step.
On SQLite by default, `--ledger-url` for PostgreSQL.

    uv run python bench/scale.py --count 100000
    uv run python bench/scale.py --count 100000 \\
        --ledger-url postgresql+psycopg://postgres@127.0.0.1:5432/bench_scale

The PostgreSQL database is created for the run and dropped after it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from workdir import isolated_workdir

REPO = Path(__file__).resolve().parent.parent
MONTH = "2026-10"
T = TypeVar("T")


def timed(label: str, step: Callable[[], T]) -> T:
    started = time.perf_counter()
    result = step()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{label:34s} {time.perf_counter() - started:7.2f} s  (peak RSS so far {peak:4.0f} MB)")
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--ledger-url", help="a PostgreSQL URL: created, used, dropped")
    args = parser.parse_args()

    work = isolated_workdir("postledger-scale-")
    from postledger.batches.posts import check_posts, read_posts
    from postledger.ledger import Ledger
    from postledger.settings import Settings

    posts_path = work / f"{MONTH}.jsonl"
    # In a process of its own, so that the peak memory below is the bookkeeping's alone.
    sample = [sys.executable, "-m", "cli", "sample", "--month", MONTH, "--count", str(args.count)]
    timed(f"write {args.count} sample posts", lambda: run([*sample, "--out", str(posts_path)], {}))
    print(f"{'':34s} {posts_path.stat().st_size / 1e6:7.1f} MB", flush=True)
    settings = Settings()
    with ledger_database(args.ledger_url, work) as url:
        ledger = Ledger(url)
        checked = timed("check the file", lambda: check_posts(posts_path))
        assert checked.count == args.count, checked
        sync = lambda: ledger.sync_posts(  # noqa: E731
            MONTH, read_posts(checked), model=settings.model, analysis=settings.analysis_in_use()
        )
        report = timed("sync_posts (all new)", sync)
        assert report.new == args.count, report
        planned = timed(
            "plan",
            lambda: ledger.plan(
                MONTH,
                max_posts=settings.max_batch_posts,
                max_chars=settings.max_batch_chars,
                keep_batches=False,
            ),
        )
        print(f"{'':34s} {planned.planned:7d} batches", flush=True)
        again = timed("sync_posts again (all unchanged)", sync)
        assert again.unchanged == args.count, again
        ledger.close()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{'peak resident memory':34s} {peak:7.0f} MB", flush=True)
        status = [sys.executable, "-m", "cli", "status", "--month", MONTH, "--json"]
        environment = {"POSTLEDGER_DATABASE_URL": url}
        timed("postledger status --json", lambda: run(status, environment))
    return 0


def run(command: list[str], environment: dict[str, str]) -> None:
    subprocess.run(
        command, cwd=REPO, env={**os.environ, **environment}, check=True, capture_output=True
    )


@contextlib.contextmanager
def ledger_database(url: str | None, work: Path) -> Iterator[str]:
    if not url:
        yield f"sqlite:///{work / 'ledger.db'}"
        return
    import psycopg
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    admin = parsed.set(drivername="postgresql", database="postgres").render_as_string(False)
    name = parsed.database
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield url
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    sys.exit(main())
