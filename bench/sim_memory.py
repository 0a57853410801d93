"""The simulator's peak memory on its Batch API faces, at a month's job size: does it stay
bounded by a chunk (a line, a request) rather than by a job?

For each case, a fresh simulator child process (`simulator.child.starting_simulator`) and:
- `openai`: an OpenAI Batch input file of `--lines` lines of `--posts` posts each (built on
  disk, posts of ~`--text-bytes` bytes, cut so the file stays under the 200 MB upload limit),
  streamed up (POST /v1/files, multipart from a file object), a batch made of it, polled until
  it completed, its output file streamed to disk and every custom_id checked to be there;
- `openai2`: the same, two such jobs in flight at once (two uploads, two batches);
- `month`: three such jobs (a month of a million posts), two at most in flight at once;
- `anthropic`: a Message Batch of `--requests` requests of `--posts` posts (one JSON body
  built on disk, streamed up), polled until it ended, its results streamed to disk and checked.

Reported per case: the simulator's peak resident memory (VmHWM from /proc/<pid>/status) and
its memory when idle just after start, with the case's wall time.

    uv run python bench/sim_memory.py                       # full size (~200 MB a job)
    uv run python bench/sim_memory.py --cases month         # a month's three jobs
    uv run python bench/sim_memory.py --cases openai --lines 2000
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from workdir import isolated_workdir

from postledger.analysis import load_analysis
from postledger.upstreams.anthropic_protocol import messages_body
from postledger.upstreams.openai_protocol import chat_body
from simulator.child import starting_simulator
from simulator.openai_batch_rules import MAX_FILE_BYTES

MODEL = "sim-analyst-1"
ENDPOINT = "/v1/chat/completions"
ANTHROPIC = {"x-api-key": "bench-key", "anthropic-version": "2023-06-01"}
# Room left under the upload limit: the file must be accepted, not refused as too big.
_HEADROOM = 0.97
_WORDS = " ".join(
    (
        "the app crashed again after the update and I lost my draft please fix this soon",
        "love the new dark mode it works great on my phone thanks a lot team",
        "how do I export my data to a spreadsheet is there a way to do it",
        "would be nice to have a weekly summary email with the most read posts",
        "version 4 is now available with faster sync and a new editor",
    )
).split(" ")
# Long enough for a job that finishes in minutes; a case that takes longer is stuck.
_WAIT = 1800.0


def post_text(rng: random.Random, size: int) -> str:
    """A post of about `size` characters: sentences of plain words."""
    words: list[str] = []
    length = 0
    while length < size:
        sentence = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(6, 14)))
        words.append(sentence.capitalize() + rng.choice(".!?"))
        length += len(words[-1]) + 1
    return " ".join(words)[:size]


def fitted_text_bytes(lines: int, posts: int, wanted: int) -> int:
    """The post size that keeps an input file of `lines` x `posts` under the upload limit."""
    analysis = load_analysis(None)
    sample = chat_body(MODEL, analysis, [(f"p-{i:07d}", "") for i in range(posts)], True)
    overhead = len(json.dumps({"custom_id": "r-000000", "body": sample})) + 80
    fits = (MAX_FILE_BYTES * _HEADROOM / lines - overhead) / posts
    return max(16, min(wanted, int(fits)))


def openai_file(path: Path, lines: int, posts: int, text_bytes: int, seed: int) -> list[str]:
    """Write the input file; returns its custom_ids."""
    rng, analysis = random.Random(seed), load_analysis(None)
    ids: list[str] = []
    with path.open("w", encoding="utf-8") as out:
        for line in range(lines):
            chunk = [(f"p-{line:06d}-{i:02d}", post_text(rng, text_bytes)) for i in range(posts)]
            custom_id = f"r-{line:06d}"
            body = chat_body(MODEL, analysis, chunk, True)
            request = {"custom_id": custom_id, "method": "POST", "url": ENDPOINT, "body": body}
            out.write(json.dumps(request, ensure_ascii=False) + "\n")
            ids.append(custom_id)
    return ids


def anthropic_body(path: Path, requests: int, posts: int, text_bytes: int, seed: int) -> list[str]:
    """Write one Message Batches create body; returns its custom_ids."""
    rng, analysis = random.Random(seed), load_analysis(None)
    ids: list[str] = []
    with path.open("w", encoding="utf-8") as out:
        out.write('{"requests": [')
        for index in range(requests):
            chunk = [(f"p-{index:06d}-{i:02d}", post_text(rng, text_bytes)) for i in range(posts)]
            custom_id = f"r-{index:06d}"
            params = messages_body(MODEL, analysis, chunk, 4096)
            item = json.dumps({"custom_id": custom_id, "params": params})
            out.write(("," if index else "") + item)
            ids.append(custom_id)
        out.write("]}")
    return ids


def memory_of(pid: int) -> dict[str, int]:
    """The process's VmHWM and VmRSS, in kB."""
    found: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmHWM", "VmRSS"):
            found[name] = int(value.split()[0])
    return found


def _until(look: Callable[[], dict[str, Any]], done: Callable[[dict[str, Any]], bool]) -> Any:
    deadline = time.monotonic() + _WAIT
    while time.monotonic() < deadline:
        seen = look()
        if done(seen):
            return seen
        time.sleep(1.0)
    raise TimeoutError("the job did not end in time")


def _saved_ids(client: httpx.Client, url: str, into: Path, **options: Any) -> set[str]:
    """Stream a JSONL download to disk, then read its custom_ids back line by line."""
    with client.stream("GET", url, **options) as answer, into.open("wb") as out:
        answer.raise_for_status()
        for chunk in answer.iter_bytes(1 << 20):
            out.write(chunk)
    with into.open(encoding="utf-8") as saved:
        return {json.loads(line)["custom_id"] for line in saved if line.strip()}


def openai_job(client: httpx.Client, url: str, source: Path, work: Path, name: str) -> set[str]:
    """One Batch API job through the simulator: its custom_ids that came back."""
    with source.open("rb") as file:
        files = {"file": (f"{name}.jsonl", file, "application/jsonl")}
        made = client.post(f"{url}/v1/files", files=files, data={"purpose": "batch"})
    made.raise_for_status()
    asked = {"input_file_id": made.json()["id"], "endpoint": ENDPOINT, "completion_window": "24h"}
    batch = client.post(f"{url}/v1/batches", json={**asked, "metadata": {"job": name}})
    batch.raise_for_status()
    batch_url = f"{url}/v1/batches/{batch.json()['id']}"
    ended = _until(
        lambda: client.get(batch_url).raise_for_status().json(),
        lambda seen: seen["status"] in ("completed", "failed", "expired", "cancelled"),
    )
    if ended["status"] != "completed" or ended.get("error_file_id"):
        raise RuntimeError(f"the batch ended {ended['status']}: {ended.get('errors')}")
    return _saved_ids(
        client, f"{url}/v1/files/{ended['output_file_id']}/content", work / f"{name}.out.jsonl"
    )


def anthropic_job(client: httpx.Client, url: str, source: Path, work: Path) -> set[str]:
    with source.open("rb") as body:
        made = client.post(
            f"{url}/v1/messages/batches",
            content=body,
            headers={**ANTHROPIC, "content-type": "application/json"},
        )
    made.raise_for_status()
    batch_url = f"{url}/v1/messages/batches/{made.json()['id']}"
    ended = _until(
        lambda: client.get(batch_url, headers=ANTHROPIC).raise_for_status().json(),
        lambda seen: seen["processing_status"] == "ended",
    )
    saved = work / "anthropic.results.jsonl"
    return _saved_ids(client, ended["results_url"], saved, headers=ANTHROPIC)


def measured(name: str, latency: float, run: Callable[[httpx.Client, str], None]) -> dict[str, Any]:
    """Run one case against a fresh simulator; its memory and time."""
    with (
        starting_simulator(latency=latency, api_key="bench-key") as starting,
        httpx.Client(timeout=_WAIT, headers={"authorization": "Bearer bench-key"}) as client,
    ):
        url = starting.wait_ready()
        idle = memory_of(starting.pid)["VmRSS"]
        started = time.monotonic()
        run(client, url)
        took = time.monotonic() - started
        peak = memory_of(starting.pid)["VmHWM"]
    row = {"case": name, "idle_mb": idle / 1024, "peak_mb": peak / 1024, "seconds": took}
    print(f"{name:>10s} {idle / 1024:8.0f} {peak / 1024:8.0f} {took:9.1f}", flush=True)
    return row


def _jobs(names: list[str], job: Callable[[str], None]) -> None:
    """Run a job per name, two at most in flight at once (as a month sends them); the first
    failure is raised."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        for done in [pool.submit(job, name) for name in names]:
            done.result()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", default=["openai", "openai2", "anthropic"])
    parser.add_argument("--lines", type=int, default=20_000, help="OpenAI lines per job")
    parser.add_argument("--requests", type=int, default=20_000, help="Anthropic requests")
    parser.add_argument("--posts", type=int, default=25, help="posts per line or request")
    parser.add_argument("--text-bytes", type=int, default=450, help="a post's size, at most")
    parser.add_argument("--latency", type=float, default=2.0, help="the simulator's, in s")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    work = isolated_workdir("postledger-sim-memory-")
    text_bytes = fitted_text_bytes(args.lines, args.posts, args.text_bytes)
    source, body = work / "input.jsonl", work / "anthropic.json"
    wanted: list[str] = []
    asked: list[str] = []
    if {"openai", "openai2", "month"} & set(args.cases):
        wanted = openai_file(source, args.lines, args.posts, text_bytes, args.seed)
        size = source.stat().st_size / 1e6
        shape = f"{args.lines} lines x {args.posts} posts of {text_bytes} B"
        print(f"OpenAI input: {shape}, {size:.0f} MB")
    if "anthropic" in args.cases:
        asked = anthropic_body(body, args.requests, args.posts, text_bytes, args.seed)
        size = body.stat().st_size / 1e6
        print(f"Anthropic body: {args.requests} requests x {args.posts} posts, {size:.0f} MB")
    print(f"{'case':>10s} {'idle MB':>8s} {'peak MB':>8s} {'seconds':>9s}", flush=True)
    problems: list[str] = []

    def check(name: str, got: set[str], expected: list[str]) -> None:
        if got != set(expected):
            problems.append(f"{name}: {len(set(expected) - got)} custom_ids missing")

    if "openai" in args.cases:
        measured(
            "openai",
            args.latency,
            lambda client, url: check("openai", openai_job(client, url, source, work, "a"), wanted),
        )
    for case, names in (("openai2", ["a", "b"]), ("month", ["a", "b", "c"])):
        if case in args.cases:

            def run(client: httpx.Client, url: str, names: list[str] = names) -> None:
                _jobs(
                    names,
                    lambda name: check(name, openai_job(client, url, source, work, name), wanted),
                )

            measured(case, args.latency, run)
    if "anthropic" in args.cases:
        measured(
            "anthropic",
            args.latency,
            lambda client, url: check("anthropic", anthropic_job(client, url, body, work), asked),
        )
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
