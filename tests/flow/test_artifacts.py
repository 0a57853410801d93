"""The month's failures table in the Prefect UI (`flows/artifacts.py`): a new version only when
what it shows changed, within a run and from one run of the month to the next, read back
through the Prefect client; and a "how to continue" the UI can show in its one line of plain
text, with the full advice in the description, which the UI renders as markdown."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from postledger.ledger import Ledger
from postledger.record.models import FailureKind, PostStatus
from tests.support.months import posts_file
from tests.support.simulators import Sim

pytestmark = pytest.mark.usefixtures("fast_retries")
FAST_TIMINGS = {"poll_wait": "0.5"}
# A month of its own: the worker's Prefect server is shared by the session's tests, and a
# version another test left under the key would be the one compared with.
MONTH = "2027-04"
KEY = f"postledger-{MONTH}-failures"


def versions() -> list[Any]:
    """Every version of the failures table, oldest first."""
    from prefect import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.client.schemas.sorting import ArtifactSort

    with get_client(sync_client=True) as client:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[KEY])),
            sort=ArtifactSort.CREATED_DESC,
        )
    return found[::-1]


def run_month(tmp_path: Path, n: int) -> None:
    from flows.monthly import monthly_posts

    path = posts_file(tmp_path / f"{MONTH}.jsonl", n)  # the first lines stay the same
    monthly_posts(month=MONTH, posts_path=str(path))


def test_the_failures_table_gets_a_version_only_when_it_changes(
    prefect_harness: None, sim: Sim, ledger: Ledger, tmp_path: Path
) -> None:
    run_month(tmp_path, 10)
    (first,) = versions()  # updated at the start, after batches and at the end: one version
    assert json.loads(first.data) == []
    assert first.description == f"No failed posts of {MONTH}."

    run_month(tmp_path, 10)  # nothing changed: the month's latest version still says it
    assert [v.id for v in versions()] == [first.id]

    # One more post, in a batch of its own whose output is never usable: it fails.
    sim.set_faults([{"on": "output", "fault": "not_json", "p": 1.0}])
    run_month(tmp_path, 11)
    (failed,) = ledger.posts(MONTH, PostStatus.FAILED)
    assert (failed.post_id, failed.failure_kind) == ("p010", FailureKind.BATCH_INVALID)
    old, new = versions()
    assert old.id == first.id
    (row,) = json.loads(new.data)
    assert row == {
        "kind": "batch_invalid",
        "posts": 1,
        "a reason": failed.failure_reason,
        # The command alone, plain: the UI shows it as it is, on one line.
        "how to continue": "postledger retry --kind batch_invalid",
    }
    # The full advice is in the description, as markdown (the command as code).
    assert new.description == (
        f"1 failed post of {MONTH}, by kind. How to continue:\n\n"
        "- **batch_invalid**: `postledger retry --kind batch_invalid` sends them again (paid)"
    )

    sim.clear_faults()
    run_month(tmp_path, 11)  # the failed post stays failed: the table is the same
    assert [v.id for v in versions()] == [old.id, new.id]
