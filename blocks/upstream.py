"""The paid AI service a deployment talks to, as a Prefect Block: edited in the UI, shared by
every run, its API key stored as a secret (shown masked, never logged)."""

from __future__ import annotations

from typing import Any, ClassVar

from prefect.blocks.core import Block
from pydantic import Field, SecretStr

from postledger.settings import DEFAULT_PROMPT, UpstreamKind
from postledger.spend import DEFAULT_PRICES, Price


class PostledgerUpstream(Block):
    """Where postledger sends batches, with what model and prompt, and what it costs.

    Fields left empty fall back to the `POSTLEDGER_*` variables of the process that runs the
    flow, so one block can serve several workers with different secrets in their environment.
    """

    _block_type_name: ClassVar[str] = "Postledger Upstream"
    _block_type_slug: ClassVar[str] = "postledger-upstream"
    _description: ClassVar[str] = (
        "The paid AI service postledger sends batches to: protocol, address, API key, model, "
        "prompt, timeouts and prices."
    )

    kind: UpstreamKind = Field(
        default=UpstreamKind.TASK_API,
        description="The protocol: task_api (the bundled simulator's async task API), "
        "openai_chat (OpenAI-compatible chat completions), openai_batch (OpenAI Batch API). "
        "See docs/upstreams.md.",
    )
    base_url: str | None = Field(
        default=None, description="e.g. https://api.openai.com/v1 (OpenAI kinds: with /v1)"
    )
    name: str | None = Field(
        default=None,
        description="Stable name of this upstream, the key of its circuit breaker; default: "
        "host:port of the base URL.",
    )
    api_key: SecretStr | None = Field(default=None, description="Sent as Authorization: Bearer.")
    model: str | None = Field(default=None, description="Model name, e.g. gpt-4o-mini.")
    prompt: str = Field(default=DEFAULT_PROMPT, description="The instructions sent with a batch.")
    honours_idempotency_keys: bool = Field(
        default=True,
        description="The service honours Idempotency-Key, so a create may be retried safely. "
        "If not, an unanswered create is never resent without a person's yes.",
    )
    connect_timeout: float = Field(default=5.0, gt=0, description="Seconds.")
    read_timeout: float = Field(default=30.0, gt=0, description="Seconds.")
    task_deadline: float = Field(
        default=3600.0, gt=0, description="Seconds to wait for one upstream task."
    )
    completion_window: str = Field(
        default="24h", description="openai_batch: the completion window of each upstream batch."
    )
    json_schema: bool = Field(
        default=True,
        description="openai_chat / openai_batch: ask for output by JSON schema (strict); off: "
        "json_object, for servers without structured outputs.",
    )
    prices: dict[str, Price] = Field(
        default_factory=lambda: dict(DEFAULT_PRICES),
        description="Per model, per million tokens, in micro-units (1 000 000 = 1 unit of "
        'currency): {"gpt-4o-mini": {"input": 150000, "output": 600000}}.',
    )

    def settings_fields(self) -> dict[str, Any]:
        """The `Settings` fields this block sets; empty ones are left to the environment."""
        fields: dict[str, Any] = {
            "upstream_kind": self.kind,
            "prompt": self.prompt,
            "upstream_idempotent": self.honours_idempotency_keys,
            "connect_timeout": self.connect_timeout,
            "read_timeout": self.read_timeout,
            "task_deadline": self.task_deadline,
            "prices": self.prices,
            "completion_window": self.completion_window,
            "json_schema": self.json_schema,
        }
        optional = {
            "upstream_url": self.base_url,
            "upstream_name": self.name,
            "api_key": self.api_key,
            "model": self.model,
        }
        fields.update({key: value for key, value in optional.items() if value is not None})
        return fields
