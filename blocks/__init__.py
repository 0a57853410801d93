"""Prefect Blocks that configure postledger, and how a flow run turns them into `Settings`."""

from __future__ import annotations

from typing import TypeVar, cast

from blocks.ledger import PostledgerLedger
from blocks.upstream import PostledgerUpstream
from postledger.errors import PostledgerError
from postledger.settings import Settings

BLOCK_TYPES = (PostledgerUpstream, PostledgerLedger)
B = TypeVar("B", PostledgerUpstream, PostledgerLedger)


class BlockNotFound(PostledgerError):
    """A flow run names a block that does not exist."""


__all__ = [
    "BLOCK_TYPES",
    "BlockNotFound",
    "PostledgerLedger",
    "PostledgerUpstream",
    "settings_from_blocks",
]


def settings_from_blocks(upstream: str | None = None, ledger: str | None = None) -> Settings:
    """The run's settings: what the named blocks say, the `POSTLEDGER_*` variables for the rest."""
    fields = {}
    if upstream:
        fields.update(_load(PostledgerUpstream, upstream).settings_fields())
    if ledger:
        fields.update(_load(PostledgerLedger, ledger).settings_fields())
    return Settings(**fields)


def _load(block_type: type[B], name: str) -> B:
    try:
        # `load` is sync here (no event loop in a flow's thread); its type says "or awaitable".
        return cast(B, block_type.load(name))
    except ValueError as exc:
        if "Unable to find block document" not in str(exc):
            raise
        slug = block_type.get_block_type_slug()
        raise BlockNotFound(
            f"no {slug} block named {name!r} on this Prefect server: create it in the UI "
            f"(Blocks, +) or in Python ({block_type.__name__}(...).save({name!r})), or leave "
            "the parameter empty to use the POSTLEDGER_* variables"
        ) from None


def register_block_types() -> None:
    """Make the block types known to the Prefect API (idempotent)."""
    for block_type in BLOCK_TYPES:
        block_type.register_type_and_schema()
