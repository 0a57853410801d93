"""Before a month's first trip: its posts read and checked, the configuration checked, and what
earlier runs left (spilled records, saved outputs, interrupted batches) taken back.

What is checked before a run marks anything `running`: the upstream, its key, the price a
budget needs, and where the spill files go. A configuration error found here touches nothing
and ends the run with the fix; found later, it would leave paid-looking batches behind (R33).
"""

from __future__ import annotations

import os

from sqlalchemy.engine import make_url

from postledger.analysis import AnalysisError
from postledger.batches.posts import (
    CheckedPosts,
    InputError,
    Post,
    check_posts,
    default_posts_path,
    load_posts,
    parse_month,
    previous_month,
    read_posts,
)
from postledger.errors import PostledgerError
from postledger.guards.spend import unpriced_budget
from postledger.recovery.interrupted import (
    Adoption,
    adopt_orphans,
    finish_saved_outputs,
    import_spills,
)
from postledger.recovery.steps import (
    Coverage,
    RecoveryAction,
    RecoveryPlan,
    coverage,
    recovery_plan,
)
from postledger.settings import Settings
from postledger.upstreams import UpstreamNotConfigured, check_configured, needs_key

__all__ = [
    "Adoption",
    "AnalysisError",
    "CheckedPosts",
    "Coverage",
    "InputError",
    "NotReady",
    "Post",
    "RecoveryAction",
    "RecoveryPlan",
    "adopt_orphans",
    "check_posts",
    "check_ready",
    "coverage",
    "default_posts_path",
    "finish_saved_outputs",
    "import_spills",
    "load_posts",
    "parse_month",
    "previous_month",
    "problems_of",
    "read_posts",
    "recovery_plan",
]


class NotReady(PostledgerError):
    """The run cannot start as configured; the message lists each problem with its fix."""


def problems_of(settings: Settings) -> list[str]:
    """Every configuration problem that would stop a batch, each saying what to change."""
    problems = []
    try:
        check_configured(settings)
    except UpstreamNotConfigured as exc:
        problems.append(str(exc))
    if needs_key(settings) and settings.api_key is None:
        problems.append(
            f"no API key for {settings.upstream_url}: set POSTLEDGER_API_KEY, or the api_key "
            "of the postledger-upstream block"
        )
    if settings.max_cost is not None and settings.price() is None:
        problems.append(unpriced_budget(settings.model))
    problems += _spill_problems(settings)
    return problems


def check_ready(settings: Settings) -> None:
    """Raise `NotReady` if any problem would stop a batch."""
    if problems := problems_of(settings):
        raise NotReady("; and ".join(problems))


def _spill_problems(settings: Settings) -> list[str]:
    url = make_url(settings.resolved_database_url(create_folder=False))
    if url.get_backend_name() != "sqlite" and not settings.spill_path:
        return [
            "the ledger is a shared database, so runs may happen on different machines, but no "
            "spill location is set: set POSTLEDGER_SPILL_PATH (or the ledger block's "
            "spill_path) to a folder every worker can write and the next run can read, such "
            "as a shared volume. It keeps what a paid batch learns while the ledger cannot be "
            "written"
        ]
    base = settings.resolved_spill_path()
    folder = base if base.is_dir() else base.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return [f"the spill folder {folder} cannot be made ({exc}): set POSTLEDGER_SPILL_PATH"]
    if not os.access(folder, os.W_OK):
        return [f"the spill folder {folder} is not writable: fix it or set POSTLEDGER_SPILL_PATH"]
    return []
