"""Posts files, and runs of a month: the monthly flow in this process, `postledger run` in a
process of its own, the next run here; what the month's posts came to."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

from tests.support.commands import postledger
from tests.support.repo import REPO
from tests.support.simulators import Sim

SAMPLE = REPO / "data" / "posts" / "2026-10.jsonl"
MONTH = "2026-10"


def write_jsonl(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def posts_file(
    path: Path, n: int, *, ids: str = "p{:03d}", text: str = "Why is the app slow, day {}?"
) -> Path:
    """`n` posts, one JSON object a line: ids and texts from the formats, numbered from 0."""
    return write_jsonl(
        path,
        [json.dumps({"id": ids.format(i), "text": text.format(i)}) for i in range(n)],
    )


def month_posts(tmp_path: Path, n: int) -> str:
    """`n` posts of MONTH in the test's folder (`p000`, ...); the path as text."""
    return str(posts_file(tmp_path / f"{MONTH}.jsonl", n))


def run_flow(tmp_path: Path, n: int, **answers: Any) -> dict[str, Any]:
    """The monthly flow, in this process, on `n` posts of MONTH."""
    from flows.monthly import monthly_posts

    result: dict[str, Any] = monthly_posts(
        month=MONTH, posts_path=month_posts(tmp_path, n), **answers
    )
    return result


def run_month(tmp_path: Path, *flags: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`postledger run` of twelve posts of MONTH, in a process of its own, from the test's
    folder (with the worker's PREFECT_HOME: migrated once)."""
    posts = posts_file(
        tmp_path / "posts.jsonl", 12, ids="p{:02d}", text="Login loops back to the start, case {}."
    )
    # `env`'s keys are environment variables: never postledger()'s own keyword arguments.
    return postledger("run", "--month", MONTH, "--posts", str(posts), *flags, cwd=tmp_path, **env)  # type: ignore[arg-type]


def on_worker_server(request: Any) -> dict[str, str]:
    """The environment that points a `postledger run` child at this worker's Prefect server,
    as a deployment's worker points its runs at a shared one: the child starts no local server
    of its own (~10 s of CPU saved per run, most of it importing Prefect's server). For runs
    whose own embedded server is not what the test is about, such as a run that only has to
    crash at a named point. (`request`: the test's, for the server.)"""
    request.getfixturevalue("prefect_harness")
    from prefect.settings import PREFECT_API_URL

    return {"PREFECT_API_URL": str(PREFECT_API_URL.value())}


def finish_month_here(request: Any, tmp_path: Path) -> dict[str, Any]:
    """The next run of the month `run_month` left unfinished (a crash, an unanswered question),
    as the monthly flow in this process, against this worker's Prefect server, with a yes to
    polling and resubmitting given up front. What it finishes and pays is decided by the
    ledger alone; it raises unless every post ended. (`request`: the test's, for the server.)"""
    request.getfixturevalue("prefect_harness")
    from flows.monthly import monthly_posts

    posts_path = str(tmp_path / "posts.jsonl")  # the file `run_month` wrote and read
    summary: dict[str, Any] = monthly_posts(
        month=MONTH, posts_path=posts_path, poll=True, resubmit=True
    )
    return summary


def statuses(ledger: Any, month: str = MONTH) -> Counter[str]:
    return Counter(p.status.value for p in ledger.posts(month))


def assert_attempts_are_charges(ledger: Any, sim: Sim, month: str = MONTH) -> None:
    """For every post: charged upstream tasks that contain it == its business attempts."""
    charged = sim.charged_per_post()
    posts = ledger.posts(month)
    assert {p.post_id: p.attempts for p in posts} == {
        p.post_id: charged.get(p.post_id, 0) for p in posts
    }
