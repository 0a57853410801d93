"""A month asked the user's own analysis (docs/analysis.md), end to end on the real simulator:
the support triage through every kind, typed in the report; a changed analysis is new work,
said in each post's events; a bad analysis is refused before the ledger is touched."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from postledger.analysis import load_analysis
from postledger.ledger import Ledger
from postledger.record import rows
from postledger.record.models import PostStatus
from postledger.record.plain import read_only
from tests.support.commands import postledger
from tests.support.months import MONTH, SAMPLE, write_jsonl
from tests.support.repo import REPO
from tests.support.simulators import UPSTREAM_KINDS, Sim

pytestmark = pytest.mark.usefixtures("fast_retries")
SIMULATOR = {"latency": 0.05}  # the `faulty` fixture's
TRIAGE = REPO / "examples" / "support_triage.json"
TRIAGE_FIELDS = ("product_area", "urgency", "needs_reply", "summary")


def sample_month(tmp_path: Path, n: int) -> Path:
    """The first `n` posts of the shipped sample month, with their own fields."""
    lines = SAMPLE.read_text(encoding="utf-8").splitlines()[:n]
    return write_jsonl(tmp_path / f"{MONTH}.jsonl", lines)


def write_report(tmp_path: Path, url: str) -> Path:
    """The month's report (JSONL, CSV, summary, Parquet), as `postledger report` writes it."""
    from postledger.progress.report import write_report as written
    from postledger.progress.status import status

    out = tmp_path / "report"
    with read_only(url) as reader:
        assert reader is not None
        summary = status(reader, MONTH)
        assert summary is not None
        written(reader, MONTH, summary, out, parquet=True)
    return out


def progress_description() -> str:
    """What the month's progress artifact says now, on the Prefect server."""
    from prefect import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.client.schemas.sorting import ArtifactSort

    from flows.artifacts import artifact_key

    key = ArtifactFilterKey(any_=[artifact_key(MONTH, "progress")])
    with get_client(sync_client=True) as client:
        (latest,) = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=key), sort=ArtifactSort.CREATED_DESC, limit=1
        )
    return latest.description or ""


# The ledger's part (the analyses kept, the report's columns read back, a changed analysis
# starting posts over) runs on both ledgers in tests/ledger/test_analysis_ledger.py.
@pytest.mark.parametrize("kind", UPSTREAM_KINDS)
@pytest.mark.parametrize("faulty", [None], indirect=True)
def test_the_support_triage_goes_through_every_kind_into_typed_columns(
    prefect_harness: None, faulty: Sim, ledger: Ledger, ledger_url: str, tmp_path: Path
) -> None:
    from flows.monthly import monthly_posts

    posts = sample_month(tmp_path, 20)
    state = monthly_posts(month=MONTH, posts_path=str(posts), analysis=str(TRIAGE))
    assert state["counts"]["completed"] == 20, state

    triage = load_analysis(str(TRIAGE))
    for post in ledger.posts(MONTH):
        assert post.status is PostStatus.COMPLETED
        assert post.result is not None and sorted(post.result) == sorted(TRIAGE_FIELDS)
        assert triage.check(post.result) == post.result  # every answer in the triage's shape
    assert set(faulty.charged_per_post().values()) == {1}  # each post paid once

    import pyarrow.parquet as pq

    out = write_report(tmp_path, ledger_url)
    table = pq.read_table(out / f"posts-{MONTH}.parquet")
    types = {name: str(table.schema.field(name).type) for name in TRIAGE_FIELDS}
    assert types == {
        "product_area": "string",
        "urgency": "string",
        "needs_reply": "bool",
        "summary": "string",
    }
    assert "category" not in table.column_names and "sentiment" not in table.column_names
    rows = table.to_pylist()
    assert {row["product_area"] for row in rows} <= {
        "billing",
        "shipping",
        "account",
        "app",
        "other",
    }
    summary = (out / f"summary-{MONTH}.md").read_text(encoding="utf-8")
    for name in ("product_area", "urgency", "needs_reply"):
        assert f"| {name} | completed posts |" in summary
    assert "| true |" in summary or "| false |" in summary


@pytest.mark.parametrize("faulty", [None], indirect=True)
def test_a_changed_analysis_asks_the_completed_posts_again_as_new_work(
    prefect_harness: None,
    faulty: Sim,
    ledger: Ledger,
    ledger_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from flows.monthly import monthly_posts

    posts = str(sample_month(tmp_path, 12))
    monthly_posts(month=MONTH, posts_path=posts)  # the built-in analysis
    assert {tuple(sorted(p.result or {})) for p in ledger.posts(MONTH)} == {
        ("category", "sentiment", "summary")  # sorted
    }
    assert set(faulty.charged_per_post().values()) == {1}

    with read_only(ledger_url) as reader:
        assert reader is not None
        before = rows.last_event(reader, MONTH)
    monthly_posts(month=MONTH, posts_path=posts, analysis=str(TRIAGE))
    with read_only(ledger_url) as reader:  # what `postledger run` says this run did
        assert reader is not None
        assert rows.posts_ended_since(reader, MONTH, before) == {"completed": 12, "failed": 0}
    named = "The analysis support_triage (product_area, urgency, needs_reply, summary): "
    assert progress_description().startswith(named)  # the progress artifact names it
    assert {tuple(sorted(p.result or {})) for p in ledger.posts(MONTH)} == {
        tuple(sorted(TRIAGE_FIELDS))
    }
    assert {p.status for p in ledger.posts(MONTH)} == {PostStatus.COMPLETED}
    assert Counter(faulty.charged_per_post().values()) == {2: 12}  # each paid again, once
    why = "input changed (the analysis's instructions, the analysis's fields): starts over"
    started_over = [e for e in ledger.events(MONTH) if e.why == why]
    assert sorted(e.entity_id for e in started_over) == sorted(
        p.post_id for p in ledger.posts(MONTH)
    )

    # The same analysis again, in its pydantic form, named from the project folder: the same
    # question, so nothing is sent.
    charges = len(faulty.charges())
    monkeypatch.chdir(REPO)
    monthly_posts(month=MONTH, posts_path=posts, analysis="examples.support_triage:SupportTriage")
    assert len(faulty.charges()) == charges


@pytest.mark.parametrize("faulty", [None], indirect=True)
def test_a_bad_analysis_is_refused_before_the_ledger_is_touched(
    prefect_harness: None, faulty: Sim, ledger: Ledger, tmp_path: Path
) -> None:
    from flows.monthly import RunStopped, monthly_posts

    bad = tmp_path / "bad.json"
    document = json.loads(TRIAGE.read_text(encoding="utf-8"))
    document["properties"]["score"] = {"type": "number", "description": "A score."}
    document["required"].append("score")
    bad.write_text(json.dumps(document), encoding="utf-8")
    posts = str(sample_month(tmp_path, 5))

    with pytest.raises(RunStopped) as stopped:
        monthly_posts(month=MONTH, posts_path=posts, analysis=str(bad))
    said = str(stopped.value)
    assert said.startswith(f"{MONTH}: nothing was done: the analysis cannot be used")
    assert f"{bad}: field 'score': a number with a fraction is not supported" in said
    assert ledger.posts(MONTH) == [] and ledger.events(MONTH) == []
    assert faulty.charges() == [] and faulty.creates() == 0


def test_postledger_run_refuses_a_bad_analysis_before_prefect_starts(tmp_path: Path) -> None:
    posts = sample_month(tmp_path, 3)
    answered = postledger(
        "run", "--month", MONTH, "--posts", str(posts), "--analysis", "missing.json",
        cwd=tmp_path, timeout=60,
    )  # fmt: skip
    assert answered.returncode == 2, answered.stdout + answered.stderr
    said = " ".join((answered.stdout + answered.stderr).split())
    assert "missing.json: the file: there is no such file" in said
    assert "name a JSON Schema file" in said  # what to do
    assert not (tmp_path / ".postledger").exists()  # no ledger was made


def test_a_broken_analysis_setting_does_not_keep_a_person_from_the_plan(tmp_path: Path) -> None:
    """`postledger plan` (and `approve`, which reads the same plan) estimate what resending
    costs from the configured analysis; one that cannot be read is the next run's to refuse,
    not a reason to leave a paused run unanswered: the estimate counts the built-in one."""
    from postledger.ledger import open_ledger
    from postledger.preflight import Post

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    ledger = open_ledger(url)
    ledger.sync_posts(MONTH, [Post("p1", "a post", 1)], model="m", analysis=load_analysis(None))
    ledger.close()
    answered = postledger(
        "plan", "--month", MONTH, "--json", cwd=tmp_path,
        POSTLEDGER_DATABASE_URL=url, POSTLEDGER_ANALYSIS="nope.json",
    )  # fmt: skip
    assert answered.returncode == 0, answered.stdout + answered.stderr
    assert json.loads(answered.stdout)["month"] == MONTH


def test_postledger_analysis_shows_the_fields_or_every_problem(tmp_path: Path) -> None:
    shown = postledger("analysis", str(TRIAGE), "--json", cwd=REPO, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == load_analysis(str(TRIAGE)).item_schema()
    table = postledger("analysis", "examples.support_triage:SupportTriage", cwd=REPO, timeout=60)
    assert table.returncode == 0, table.stderr
    assert "support_triage" in table.stdout and "needs_reply" in table.stdout

    bad = tmp_path / "bad.json"
    document = json.loads(TRIAGE.read_text(encoding="utf-8"))
    document["properties"]["urgency"] = {"type": "string", "description": "How urgent."}
    bad.write_text(json.dumps(document), encoding="utf-8")
    refused = postledger("analysis", str(bad), cwd=tmp_path, timeout=60)
    assert refused.returncode == 2
    said = " ".join(refused.stderr.split())
    assert f"{bad}: field 'urgency': a string with no usable maxLength" in said
