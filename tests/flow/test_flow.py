"""The monthly flow end to end: a local Prefect server, the real simulator over loopback HTTP,
a real SQLite ledger. The evidence is the ledger and the simulator's own charge log."""

from __future__ import annotations

import contextlib
import re
from collections import Counter
from pathlib import Path

import pytest

from postledger.batches.posts import load_posts
from postledger.ledger import Ledger
from postledger.record.models import BatchStatus, PostStatus
from simulator.model import analyse
from tests.support.months import SAMPLE
from tests.support.prefect_api import flow_log
from tests.support.simulators import Sim


@pytest.mark.on_postgres  # a whole month
def test_sample_month_completes_and_each_post_is_charged_once(
    prefect_harness: None, sim: Sim, ledger: Ledger
) -> None:
    from flows.monthly import monthly_posts

    posts = load_posts(SAMPLE)
    summary = monthly_posts(month="2026-10", posts_path=str(SAMPLE))

    assert summary["counts"]["completed"] == len(posts)
    records = ledger.posts("2026-10")
    assert len(records) == len(posts)
    assert all(r.status is PostStatus.COMPLETED and r.attempts == 1 for r in records)
    # The saved result is what the model wrote for that very post.
    for record in records:
        expected = analyse(record.post_id, record.text)
        assert record.result == {k: v for k, v in expected.items() if k != "id"}

    charges = sim.charges()
    charged = Counter(pid for charge in charges for pid in charge["post_ids"])
    assert charged == Counter({p.id: 1 for p in posts})
    batches = ledger.batches("2026-10")
    assert {b.status for b in batches} == {BatchStatus.COMPLETED}
    assert {(b.upstream_task_id, b.idempotency_key, tuple(b.post_ids)) for b in batches} == {
        (c["task_id"], c["idempotency_key"], tuple(c["post_ids"])) for c in charges
    }
    assert all(len(b.post_ids) <= 25 for b in batches)
    assert sim.stats()["max_in_flight"] <= 2


@pytest.mark.on_postgres  # what the next run reads back
def test_second_run_of_a_finished_month_sends_nothing(
    prefect_harness: None,
    sim: Sim,
    ledger: Ledger,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from flows.monthly import monthly_posts

    path = tmp_path / "2026-09.jsonl"
    path.write_text(
        "".join(f'{{"id": "q{i}", "text": "Why does sync fail on day {i}?"}}\n' for i in range(30)),
        encoding="utf-8",
    )
    with flow_log(caplog) as said:
        monthly_posts(month="2026-09", posts_path=str(path))
        charges_after_first = len(sim.charges())
        events_after_first = len(ledger.events("2026-09"))
        summary = monthly_posts(month="2026-09", posts_path=str(path))

    assert summary["counts"]["completed"] == 30
    assert len(sim.charges()) == charges_after_first == 2
    assert len(ledger.events("2026-09")) == events_after_first
    # Each run ends with one line: the month's counts, its spend, its time, what is left.
    endings = [line for line in said() if "this run took" in line]
    assert len(endings) == 2, endings
    pattern = (
        r"2026-09: 30 completed, 0 failed, 0 left; spend confirmed (?!0\.000000)\d+\.\d{6}, "
        r"possible 0\.000000, wasted 0\.000000; this run took \d+ s"
    )
    assert all(re.fullmatch(pattern, line) for line in endings), endings


@pytest.mark.on_postgres  # results found by their question
def test_a_changed_prompt_processes_the_posts_again_instead_of_reusing_results(
    prefect_harness: None,
    sim: Sim,
    ledger: Ledger,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """R25: the prompt is part of every post's fingerprint; a new one is new (paid) work."""
    from flows.monthly import monthly_posts

    path = tmp_path / "2026-08.jsonl"
    path.write_text(
        "".join(f'{{"id": "r{i}", "text": "Refund still missing, week {i}."}}\n' for i in range(5)),
        encoding="utf-8",
    )
    monthly_posts(month="2026-08", posts_path=str(path))
    assert len(sim.charges()) == 1

    monkeypatch.setenv("POSTLEDGER_PROMPT", "Classify each post; answer with a JSON list.")
    summary = monthly_posts(month="2026-08", posts_path=str(path))

    assert summary["counts"]["completed"] == 5
    charges = sim.charges()
    assert len(charges) == 2 and charges[1]["post_ids"] == [f"r{i}" for i in range(5)]
    for post in ledger.posts("2026-08"):
        assert post.attempts == 1  # counted afresh: a new input, a new piece of work
        why = [e.why for e in ledger.events("2026-08") if e.entity_id == post.post_id]
        assert "input changed (the analysis's instructions): starts over" in why
        assert [e.to_status for e in ledger.events("2026-08") if e.entity_id == post.post_id][
            -1
        ] == "completed"


def test_batches_respect_the_character_limit(
    prefect_harness: None,
    sim: Sim,
    ledger: Ledger,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from flows.monthly import monthly_posts

    monkeypatch.setenv("POSTLEDGER_MAX_BATCH_CHARS", "1000")
    path = tmp_path / "2026-08.jsonl"
    texts = ["a" * 300] * 7 + ["b" * 1001] + ["c" * 50] * 3
    path.write_text(
        "".join(f'{{"id": "r{i}", "text": "{t}"}}\n' for i, t in enumerate(texts)),
        encoding="utf-8",
    )
    summary = monthly_posts(month="2026-08", posts_path=str(path))

    assert summary["counts"] == {**summary["counts"], "completed": 10, "failed": 1}
    (too_long,) = ledger.posts("2026-08", PostStatus.FAILED)
    assert too_long.post_id == "r7" and too_long.failure_kind == "too_long"
    charged = [c["post_ids"] for c in sim.charges()]
    assert "r7" not in {pid for ids in charged for pid in ids}
    for ids in charged:
        assert sum(len(texts[int(pid[1:])]) for pid in ids) <= 1000


def test_month_on_a_postgresql_ledger(
    prefect_harness: None,
    sim: Sim,
    pg_ledger_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The at-scale path: the same flow with its ledger on PostgreSQL (advisory month locks)."""
    from flows.monthly import monthly_posts

    monkeypatch.setenv("POSTLEDGER_DATABASE_URL", pg_ledger_url)
    monkeypatch.setenv("POSTLEDGER_SPILL_PATH", str(tmp_path))  # a shared ledger needs one
    path = tmp_path / "2026-07.jsonl"
    path.write_text(
        "".join(f'{{"id": "g{i}", "text": "Great update, thanks! #{i}"}}\n' for i in range(60)),
        encoding="utf-8",
    )
    summary = monthly_posts(month="2026-07", posts_path=str(path))

    assert summary["counts"]["completed"] == 60
    ledger = Ledger(pg_ledger_url)
    assert [len(b.post_ids) for b in ledger.batches("2026-07")] == [25, 25, 10]
    assert Counter(pid for c in sim.charges() for pid in c["post_ids"]) == Counter(
        {f"g{i}": 1 for i in range(60)}
    )
    ledger.close()


def test_a_bad_month_fails_the_run_with_the_message_the_cli_gives(
    prefect_harness: None, sim: Sim, ledger: Ledger
) -> None:
    """As a deployment parameter: the run starts, is named for what it was given, and ends
    Failed with the one-line reason (not Crashed with an exit code), touching nothing."""
    from prefect import get_client

    from flows.monthly import monthly_posts
    from postledger.batches.posts import InputError, parse_month

    with pytest.raises(InputError) as given:
        parse_month("2026-13")
    state = monthly_posts(month="2026-13", return_state=True)
    assert state.is_failed(), state
    assert str(given.value) in (state.message or ""), state.message
    assert state.state_details.flow_run_id is not None  # a flow's state always names its run
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(state.state_details.flow_run_id)
    assert run.name == "posts of a bad month '2026-13'"
    assert ledger.posts("2026-13") == [] and sim.charges() == []


def test_a_long_step_is_said_before_it_starts(
    prefect_harness: None,
    sim: Sim,
    ledger: Ledger,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A month big enough that taking it in and planning it take seconds says so before each
    step, for a log that no terminal shows (a worker's). The threshold is lowered here."""
    import flows.due_work
    from flows.monthly import monthly_posts

    monkeypatch.setattr(flows.due_work, "LONG_STEP_POSTS", 20)
    path = tmp_path / "2026-08.jsonl"
    path.write_text(
        "".join(f'{{"id": "l{i}", "text": "The widget froze, case {i}."}}\n' for i in range(30)),
        encoding="utf-8",
    )
    with flow_log(caplog) as said:
        monthly_posts(month="2026-08", posts_path=str(path))
    step = [m for m in said() if m.startswith("2026-08: ") and ("writing" in m or "plann" in m)]
    assert step == [
        f"2026-08: writing 30 posts of {path} to the ledger",
        "2026-08: planning 30 posts into batches",
        "2026-08: 2 batches planned",
    ]
    ledger.close()


def test_a_run_with_a_smaller_window_makes_the_tag_limit_the_default(
    prefect_harness: None, sim: Sim, ledger: Ledger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's `max_in_flight` is its own window; the `tag:ai-batch` limit it creates when
    there is none holds every run, so it is the default, not the first run's window."""
    from prefect import get_client
    from prefect.exceptions import ObjectNotFound

    from flows.limits import tag_limit_name
    from postledger.defaults import MAX_IN_FLIGHT
    from tests.support.months import run_flow

    with get_client(sync_client=True) as client, contextlib.suppress(ObjectNotFound):
        client.delete_global_concurrency_limit_by_name(tag_limit_name())
    monkeypatch.setenv("POSTLEDGER_MAX_IN_FLIGHT", "1")
    summary = run_flow(tmp_path, 6)
    assert summary["counts"]["completed"] == 6
    assert sim.stats()["max_in_flight"] == 1
    with get_client(sync_client=True) as client:
        assert client.read_global_concurrency_limit_by_name(tag_limit_name()).limit == MAX_IN_FLIGHT
