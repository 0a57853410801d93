"""The paid AI service a deployment talks to, as a Prefect Block: edited in the UI, shared by
every run, its API key stored as a secret (shown masked, never logged)."""

from __future__ import annotations

from typing import Any, ClassVar

from prefect.blocks.core import Block
from pydantic import Field, SecretStr

from postledger.settings import Price, UpstreamKind

# Block field -> Settings field, where the names differ.
_SETTING_OF = {
    "kind": "upstream_kind",
    "base_url": "upstream_url",
    "name": "upstream_name",
    "honours_idempotency_keys": "upstream_idempotent",
}


class PostledgerUpstream(Block):
    """Where postledger sends batches, with what model and prompt, and what it costs.

    Every field left empty falls back to the `POSTLEDGER_*` variable of the process that runs
    the flow (then to postledger's default), so one block can serve workers whose environment
    holds, say, the secret. A field that is set always wins.
    """

    _block_type_name: ClassVar[str] = "Postledger Upstream"
    _block_type_slug: ClassVar[str] = "postledger-upstream"
    _description: ClassVar[str] = (
        "The paid AI service postledger sends batches to: protocol, address, API key, model, "
        "prompt, timeouts and prices. Empty fields: the worker's POSTLEDGER_* variables."
    )

    kind: UpstreamKind | None = Field(
        default=None,
        description="The protocol: task_api (the bundled simulator's async task API), "
        "openai_chat (OpenAI-compatible chat completions), openai_batch (OpenAI Batch API), "
        "anthropic_messages (Anthropic's Messages API), anthropic_batch (Anthropic's Message "
        "Batches API). See docs/upstreams.md.",
    )
    base_url: str | None = Field(
        default=None,
        description="e.g. https://api.openai.com/v1 (OpenAI kinds: with /v1), "
        "https://api.anthropic.com (Anthropic's kinds: the root)",
    )
    name: str | None = Field(
        default=None,
        description="Stable name of this upstream, the key of its circuit breaker; default: "
        "host:port of the base URL.",
    )
    api_key: SecretStr | None = Field(
        default=None, description="Sent as Authorization: Bearer (Anthropic's kinds: x-api-key)."
    )
    model: str | None = Field(default=None, description="Model name, e.g. gpt-4o-mini.")
    prompt: str | None = Field(
        default=None,
        description="Replaces the instructions of the analysis each post is asked "
        "(the run's analysis parameter, else POSTLEDGER_ANALYSIS, else the built-in one).",
    )
    honours_idempotency_keys: bool | None = Field(
        default=None,
        description="task_api: the service honours Idempotency-Key, so a create may be retried "
        "safely. If not, an unanswered create is never resent without a person's yes.",
    )
    connect_timeout: float | None = Field(default=None, gt=0, description="Seconds.")
    read_timeout: float | None = Field(default=None, gt=0, description="Seconds.")
    chat_timeout: float | None = Field(
        default=None,
        gt=0,
        description="openai_chat, anthropic_messages: seconds to wait for one answer.",
    )
    max_output_tokens: int | None = Field(
        default=None, ge=1, description="Anthropic's kinds: max_tokens of each request."
    )
    poll_interval: float | None = Field(
        default=None, gt=0, description="Seconds between polls of an upstream task."
    )
    task_deadline: float | None = Field(
        default=None, gt=0, description="Seconds to wait for one upstream task."
    )
    completion_window: str | None = Field(
        default=None, description="openai_batch: the completion window of each upstream batch."
    )
    json_schema: bool | None = Field(
        default=None,
        description="OpenAI kinds: ask for output by JSON schema (strict); off: json_object, "
        "for servers without structured outputs.",
    )
    prices: dict[str, Price] | None = Field(
        default=None,
        description="Per model, per million tokens, in micro-units (1 000 000 = 1 unit of "
        'currency): {"gpt-4o-mini": {"input": 150000, "output": 600000}}.',
    )

    def settings_fields(self) -> dict[str, Any]:
        """The `Settings` fields this block sets; empty ones are left to the environment."""
        return {
            _SETTING_OF.get(field, field): value
            for field in type(self).model_fields
            if (value := getattr(self, field)) is not None
        }
