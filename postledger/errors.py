"""The root of every error postledger raises on purpose.

Each error is named for what went wrong and sits directly under `PostledgerError`, where it is
raised (`postledger.record.db.LedgerUnavailable`, `postledger.batches.posts.InputError`, ...):
one flat family, except the upstream's errors, a small tree of their own
(`postledger.upstreams.errors`). Each message says what happened and what to do. A failure
that is expected and handled (a batch held by the breaker or the budget, a read with no
verdict) is not an error: it is a value the caller decides on. Anything else that escapes is
a bug in postledger, and its traceback is for us.
"""

from __future__ import annotations

__all__ = ["PostledgerError"]


class PostledgerError(Exception):
    """Something postledger cannot do as asked; the message says why and what to do."""
