"""What a paid call used, by the class of token it is billed at.

Each upstream client says its provider's usage in the ledger's words, one dict per answer:

    {"input_tokens": 812,         # input read fresh: the full input rate
     "cached_input_tokens": 1152, # input read from the provider's prompt cache
     "cache_write_tokens": 0,     # input written to the cache (Anthropic bills it above input)
     "output_tokens": 140}

OpenAI counts cached tokens inside `prompt_tokens` (`prompt_tokens_details.cached_tokens`);
Anthropic counts them apart from `input_tokens` (`cache_read_input_tokens`,
`cache_creation_input_tokens`). The clients turn both into these words (`openai_usage`,
`anthropic_usage`), so that spend is computed one way. A usage saved before the cache classes
existed has only input and output: its cached classes are zero.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Usage:
    input: int
    output: int
    cached_input: int = 0
    cache_write: int = 0

    def words(self) -> dict[str, int]:
        """The usage in the ledger's words."""
        return {
            "input_tokens": self.input,
            "cached_input_tokens": self.cached_input,
            "cache_write_tokens": self.cache_write,
            "output_tokens": self.output,
        }

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input + other.input,
            self.output + other.output,
            self.cached_input + other.cached_input,
            self.cache_write + other.cache_write,
        )


def usage_of(words: Mapping[str, Any] | None) -> Usage | None:
    """The usage the ledger's words say; None when they are not a usage (the cost is then
    left to the estimate)."""
    if words and "input_tokens" not in words and "prompt_tokens" in words:
        words = openai_usage(words)  # an OpenAI usage as it came (a task API's, say)
    if not words:
        return None
    try:
        usage = Usage(
            input=int(words["input_tokens"]),
            # A usage naming its output the other way, as before the cache classes.
            output=int(_first(words, "output_tokens", "completion_tokens")),
            cached_input=int(words.get("cached_input_tokens") or 0),
            cache_write=int(words.get("cache_write_tokens") or 0),
        )
    except (KeyError, TypeError, ValueError):
        return None
    if min(usage.input, usage.output, usage.cached_input, usage.cache_write) < 0:
        return None
    return usage


def openai_usage(raw: Any) -> dict[str, int] | None:
    """An OpenAI chat completion's `usage` in the ledger's words: its cached tokens are part of
    `prompt_tokens`, and are taken out of the fresh input."""
    if not isinstance(raw, dict):
        return None
    try:
        prompt = int(raw["prompt_tokens"])
        output = int(_first(raw, "completion_tokens", "output_tokens"))
        details = raw.get("prompt_tokens_details")
        cached = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
    except (KeyError, TypeError, ValueError):
        return None
    cached = min(max(cached, 0), prompt) if prompt >= 0 else 0
    return Usage(prompt - cached, output, cached_input=cached).words()


def anthropic_usage(raw: Any) -> dict[str, int] | None:
    """An Anthropic message's `usage` in the ledger's words: cache reads and writes are
    counted apart from `input_tokens` there, and billed at their own rates."""
    if not isinstance(raw, dict):
        return None
    try:
        return Usage(
            input=int(raw["input_tokens"]),
            output=int(raw["output_tokens"]),
            cached_input=int(raw.get("cache_read_input_tokens") or 0),
            cache_write=int(raw.get("cache_creation_input_tokens") or 0),
        ).words()
    except (KeyError, TypeError, ValueError):
        return None


def _first(words: Mapping[str, Any], *names: str) -> Any:
    """The value of the first of `names` that `words` has (KeyError: none)."""
    for name in names:
        if name in words:
            return words[name]
    raise KeyError(names[0])
