"""`postledger estimate` against what the month then costs, on each kind, and what the prompt
cache saves with long instructions.

For each kind and size: two sample months of that many posts (different seeds) in a fresh
project folder on the bundled simulator. The first month is forecast with an empty ledger
(`cold`: the assumed constants), then run; the second is forecast from the first's history
(`warm`), then run. Each forecast is set beside the month's confirmed spend (which equals the
simulator's bill, `tests/flow/test_bill.py`).

Then the cache: a month with `--instructions-tokens` of instructions (a taxonomy) on each
kind, its confirmed spend beside what the same usage would cost with every input token read
fresh (what it costs without the cache).

    uv run python bench/forecast.py --counts 300 100000 --kinds openai_batch
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from workdir import isolated_workdir

FIRST, SECOND = "2026-09", "2026-10"
KINDS = ["task_api", "openai_chat", "openai_batch", "anthropic_messages", "anthropic_batch"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[300])
    parser.add_argument("--kinds", nargs="+", default=KINDS)
    parser.add_argument("--latency", type=float, default=0.05, help="the simulator's, in s")
    parser.add_argument("--instructions-tokens", type=int, default=2000)
    parser.add_argument("--cache-posts", type=int, default=300, help="0: no cache months")
    parser.add_argument("--analysis", help="what each post is asked (a JSON Schema file)")
    args = parser.parse_args()

    work = isolated_workdir("postledger-forecast-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSTLEDGER_UPSTREAM")}
    env["PREFECT_HOME"] = str(work / "prefect-home")
    if args.analysis:
        env["POSTLEDGER_ANALYSIS"] = str(Path(args.analysis).resolve())
    _postledger(["setup"], work, env)
    print(
        f"{'kind':20s} {'posts':>7s} {'cold':>10s} {'actual':>10s} {'off':>7s} "
        f"{'warm':>10s} {'actual':>10s} {'off':>7s} {'est. short':>10s}"
    )
    for kind in args.kinds:
        for count in args.counts:
            row = _forecast_then_run(
                work / f"{kind}-{count}",
                {**env, "POSTLEDGER_UPSTREAM_KIND": kind},
                count,
                args.latency,
            )
            print(
                f"{kind:20s} {count:7d} {_money(row['cold'])} {_money(row['actual_first'])} "
                f"{_off(row['cold'], row['actual_first'])} {_money(row['warm'])} "
                f"{_money(row['actual_second'])} {_off(row['warm'], row['actual_second'])} "
                f"{row['short']:>10s}",
                flush=True,
            )
            for month, said in row["estimates"].items():
                print(f"    per-batch estimates of {month}: {said}", flush=True)
    if not args.cache_posts:
        return 0
    print(f"\ninstructions of ~{args.instructions_tokens} tokens, {args.cache_posts} posts:")
    header = f"{'kind':20s} {'with cache':>11s} {'all fresh':>11s} {'saved':>7s}"
    print(f"{header} {'read':>9s} {'written':>9s}")
    taxonomy = _taxonomy(args.instructions_tokens)
    for kind in args.kinds:
        project = work / f"cache-{kind}"
        saved = _cache_saving(
            project,
            {**env, "POSTLEDGER_UPSTREAM_KIND": kind, "POSTLEDGER_PROMPT": taxonomy},
            args.cache_posts,
            args.latency,
        )
        print(
            f"{kind:20s} {_money(saved['cost'])} {_money(saved['fresh'])} "
            f"{1 - saved['cost'] / saved['fresh']:6.0%} {saved['read']:9d} {saved['written']:9d}",
            flush=True,
        )
    return 0


def _forecast_then_run(
    project: Path, env: dict[str, str], count: int, latency: float
) -> dict[str, Any]:
    project.mkdir(parents=True)
    env = {**env, "POSTLEDGER_DATABASE_URL": f"sqlite:///{project / 'ledger.db'}"}
    months = {}
    for seed, month in enumerate((FIRST, SECOND), start=1):
        posts = project / f"{month}.jsonl"
        _postledger(
            [
                "sample",
                "--month",
                month,
                "--count",
                str(count),
                "--seed",
                str(seed),
                "--out",
                str(posts),
            ],
            project,
            env,
        )
        months[month] = posts
    cold = _estimate(FIRST, months[FIRST], project, env)
    _postledger(
        ["run", "--month", FIRST, "--posts", str(months[FIRST]), "--latency", f"{latency:g}"],
        project,
        env,
    )
    warm = _estimate(SECOND, months[SECOND], project, env)
    _postledger(
        ["run", "--month", SECOND, "--posts", str(months[SECOND]), "--latency", f"{latency:g}"],
        project,
        env,
    )
    after = _estimate(SECOND, months[SECOND], project, env)
    return {
        "cold": cold["costs"][0]["cost"],
        "warm": warm["costs"][0]["cost"],
        "actual_first": _confirmed(project, FIRST),
        "actual_second": _confirmed(project, SECOND),
        "short": f"{after['estimates_short']}/{after['estimates_settled']}",
        "estimates": {month: _estimates(project, month) for month in (FIRST, SECOND)},
    }


def _cache_saving(project: Path, env: dict[str, str], count: int, latency: float) -> dict[str, int]:
    """A month with long instructions: its spend, and the same usage at the fresh input rate."""
    from postledger.defaults import DEFAULT_PRICES
    from postledger.guards.spend import cost_of
    from postledger.guards.usage import Usage

    project.mkdir(parents=True)
    env = {**env, "POSTLEDGER_DATABASE_URL": f"sqlite:///{project / 'ledger.db'}"}
    posts = project / f"{FIRST}.jsonl"
    _postledger(
        ["sample", "--month", FIRST, "--count", str(count), "--out", str(posts)], project, env
    )
    _postledger(
        ["run", "--month", FIRST, "--posts", str(posts), "--latency", f"{latency:g}"], project, env
    )
    price = DEFAULT_PRICES["sim-analyst-1"]
    discount = 50 if env["POSTLEDGER_UPSTREAM_KIND"].endswith("batch") else 0
    price = price.model_copy(update={"discount_percent": discount})
    cost = fresh = read = written = 0
    for fresh_in, cached, write, out, paid in _spend_rows(project):
        cost += paid
        fresh += cost_of(price, Usage(fresh_in + cached + write, out))
        read, written = read + cached, written + write
    return {"cost": cost, "fresh": fresh, "read": read, "written": written}


def _spend_rows(project: Path) -> list[tuple[int, int, int, int, int]]:
    import sqlite3

    with sqlite3.connect(project / "ledger.db") as connection:
        return [
            tuple(int(v or 0) for v in row)  # type: ignore[misc]
            for row in connection.execute(
                "SELECT input_tokens, cached_input_tokens, cache_write_tokens, output_tokens, cost"
                " FROM spend WHERE state = 'CONFIRMED'"
            )
        ]


def _confirmed(project: Path, month: str) -> int:
    import sqlite3

    with sqlite3.connect(project / "ledger.db") as connection:
        (total,) = connection.execute(
            "SELECT sum(cost) FROM spend WHERE month = ? AND state = 'CONFIRMED'", (month,)
        ).fetchone()
    return int(total or 0)


def _estimates(project: Path, month: str) -> str:
    """The budget's per-batch estimates of the month's confirmed sends against their costs: how
    many fell short and by how much at most, and how high they were in the middle."""
    import sqlite3
    from statistics import median

    with sqlite3.connect(project / "ledger.db") as connection:
        rows = connection.execute(
            "SELECT estimated_cost, cost FROM spend WHERE month = ? AND state = 'CONFIRMED'"
            " AND cost > 0 AND estimated_cost IS NOT NULL",
            (month,),
        ).fetchall()
    if not rows:
        return "none"
    short = [(cost - estimated) / cost for estimated, cost in rows if cost > estimated]
    over = median(estimated / cost - 1 for estimated, cost in rows)
    worst = f", by {max(short):.1%} at most" if short else ""
    return f"{len(short)} of {len(rows)} short{worst}; median {over:+.0%} over the cost"


def _estimate(month: str, posts: Path, project: Path, env: dict[str, str]) -> dict[str, Any]:
    said = _postledger(
        ["estimate", "--month", month, "--posts", str(posts), "--json"], project, env
    )
    forecast: dict[str, Any] = json.loads(said)
    return forecast


def _taxonomy(tokens: int) -> str:
    """Instructions of about `tokens` of the simulator's tokens (4 characters each)."""
    rules = [
        f"Category {n}: posts that mention feature {n} or its settings page." for n in range(400)
    ]
    text = "Classify each post by topic and tone, using this taxonomy. "
    for rule in rules:
        if len(text) >= 4 * tokens:
            break
        text += rule + " "
    return text


def _postledger(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        sys.exit(
            f"postledger {' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return done.stdout


def _money(micro: int) -> str:
    return f"{micro / 1_000_000:10.4f}"


def _off(forecast: int, actual: int) -> str:
    return f"{(forecast - actual) / actual:+6.1%}" if actual else "    n/a"


if __name__ == "__main__":
    sys.exit(main())
