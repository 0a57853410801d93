"""How to continue after a failure of each kind, in words a person acts on: the status
command, the report and the Prefect UI show them. Plain strings over the enum, so a reader that
imports no ORM can show them."""

from __future__ import annotations

import re

from postledger.record.kinds import FailureKind

CONTINUE_HINTS: dict[FailureKind, str | None] = {
    # A shortened post is new input and starts over by itself; a raised limit changes no post.
    FailureKind.TOO_LONG: "shorten the post and run again, or raise POSTLEDGER_MAX_BATCH_CHARS "
    "and `postledger retry --kind too_long`",
    FailureKind.AUTH: "fix the API key (POSTLEDGER_API_KEY), then `postledger retry --kind auth`",
    FailureKind.QUOTA: "add balance or raise the quota, then `postledger retry --kind quota`",
    FailureKind.PERMISSION: "grant the key access to the model, then "
    "`postledger retry --kind permission`",
    FailureKind.TRANSPORT: "the request never reached the upstream; `postledger retry --kind "
    "transport` sends the posts again",
    FailureKind.TASK_UNKNOWN: "the upstream lost the task; `postledger retry --kind task_unknown`"
    " sends the posts again and may pay twice",
    FailureKind.ATTEMPTS_EXHAUSTED: "`postledger retry --kind attempts_exhausted` allows more "
    "paid attempts",
    FailureKind.BATCH_INVALID: "`postledger retry --kind batch_invalid` sends them again (paid)",
    FailureKind.INVALID_ITEM: "`postledger retry --kind invalid_item` sends them again (paid)",
    FailureKind.MISSING_ITEM: "`postledger retry --kind missing_item` sends them again (paid)",
    FailureKind.UPSTREAM_FAILED: "`postledger retry --kind upstream_failed` sends them again",
    FailureKind.REJECTED: "check the request the upstream refused, then "
    "`postledger retry --kind rejected`",
    FailureKind.RATE_LIMITED: "`postledger retry --kind rate_limited` once the limit is lifted",
}
FINAL = "nothing: it is final"
_QUOTED_COMMAND = re.compile(r"`([^`]+)`")


def next_step(kind: FailureKind | None) -> str:
    """How to continue after failures of `kind`, short and plain: for a place that shows one
    line of text and no markdown (a table in the Prefect UI). The command alone, where the
    hint names one; what it takes first stays the hint's to say."""
    hint = CONTINUE_HINTS.get(kind) if kind is not None else None
    if hint is None:
        return FINAL
    quoted = _QUOTED_COMMAND.search(hint)
    return quoted.group(1) if quoted else hint
