"""Blocks configure a run; `postledger setup`'s Prefect side is idempotent."""

from __future__ import annotations

import pytest
from prefect import get_client
from pydantic import SecretStr

from blocks import BlockNotFound, PostledgerLedger, PostledgerUpstream, settings_from_blocks
from flows.limits import tag_limit_name
from flows.setup import prepare_prefect
from postledger.defaults import Price
from postledger.settings import UpstreamKind


def test_setup_twice_changes_nothing_the_first_made(prefect_harness: None) -> None:
    first = prepare_prefect(tag_limit=2, work_pool="pool-a")
    second = prepare_prefect(tag_limit=5, work_pool="pool-a")
    assert "work pool pool-a (process) created" in first
    assert "work pool pool-a (process) already there" in second
    assert "tag limit tag:ai-batch = 2 (left as it was; asked for 5)" in second
    with get_client(sync_client=True) as client:
        assert client.read_global_concurrency_limit_by_name(tag_limit_name()).limit == 2
        assert client.read_work_pool("pool-a").type == "process"
        slugs = {t.slug for t in client.read_block_types()}
    assert {"postledger-upstream", "postledger-ledger"} <= slugs


def test_blocks_fill_the_settings_and_the_environment_fills_the_rest(
    prefect_harness: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POSTLEDGER_MAX_ATTEMPTS", "7")  # in no block: comes from the env
    monkeypatch.setenv("POSTLEDGER_MODEL", "env-model")  # the block says otherwise: it wins
    monkeypatch.setenv("POSTLEDGER_CONNECT_TIMEOUT", "7")  # a block field left empty
    monkeypatch.setenv("POSTLEDGER_TASK_DEADLINE", "90000")  # e.g. a long batch window
    PostledgerUpstream(
        kind=UpstreamKind.OPENAI_CHAT,
        base_url="http://upstream.example:9000/",
        api_key=SecretStr("fake-key-block-secret"),
        model="block-model",
        honours_idempotency_keys=False,
        prices={"block-model": Price(input=1, output=2)},
    ).save("t-upstream", overwrite=True)
    PostledgerLedger(
        database_url=SecretStr("postgresql+psycopg://u:pw-secret@db/ledger"), max_cost=123
    ).save("t-ledger", overwrite=True)

    settings = settings_from_blocks("t-upstream", "t-ledger")
    assert settings.upstream_url == "http://upstream.example:9000"
    assert settings.api_key is not None
    assert settings.api_key.get_secret_value() == "fake-key-block-secret"
    assert (settings.model, settings.upstream_idempotent) == ("block-model", False)
    assert settings.upstream_kind is UpstreamKind.OPENAI_CHAT
    assert settings.price() == Price(input=1, output=2, discount_percent=0)  # chat: list price
    # Saved whole by the block, the price's unset discount is still the kind's on a Batch API.
    at_batch = settings.price(UpstreamKind.OPENAI_BATCH)
    assert at_batch is not None and at_batch.discount() == 50
    assert settings.database_url == "postgresql+psycopg://u:pw-secret@db/ledger"
    assert (settings.max_cost, settings.max_attempts) == (123, 7)
    assert (settings.connect_timeout, settings.task_deadline) == (7, 90000)
    assert settings.breaker_name() == "upstream.example:9000"
    # The secrets are masked wherever the block is shown.
    shown = repr(PostledgerUpstream.load("t-upstream")) + repr(PostledgerLedger.load("t-ledger"))
    assert "fake-key-block-secret" not in shown and "pw-secret" not in shown


def test_a_block_that_does_not_exist_is_named_with_what_to_do(prefect_harness: None) -> None:
    with pytest.raises(BlockNotFound, match="no postledger-upstream block named 'nope'.*create"):
        settings_from_blocks(upstream="nope")
