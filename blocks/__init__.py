"""Prefect Blocks that configure postledger, and how a flow run turns them into `Settings`."""

from __future__ import annotations

from blocks.ledger import PostledgerLedger
from blocks.upstream import PostledgerUpstream
from postledger.settings import Settings

BLOCK_TYPES = (PostledgerUpstream, PostledgerLedger)

__all__ = ["BLOCK_TYPES", "PostledgerLedger", "PostledgerUpstream", "settings_from_blocks"]


def settings_from_blocks(upstream: str | None = None, ledger: str | None = None) -> Settings:
    """The run's settings: what the named blocks say, the `POSTLEDGER_*` variables for the rest."""
    fields = {}
    if upstream:
        fields.update(PostledgerUpstream.load(upstream).settings_fields())
    if ledger:
        fields.update(PostledgerLedger.load(ledger).settings_fields())
    return Settings(**fields)


def register_block_types() -> None:
    """Make the block types known to the Prefect API (idempotent)."""
    for block_type in BLOCK_TYPES:
        block_type.register_type_and_schema()
