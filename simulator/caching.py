"""The simulator's prompt cache: deterministic, one per simulator (emptied by `POST
/_sim/reset`), so that tests can say exactly which request reads its instructions from the
cache and what that saves.

An entry is a (model, prefix text) pair; it lives `LIFETIME` seconds (monotonic) after its
last use, and a hit is a use. A prefix under `MIN_TOKENS` tokens (by the simulator's own
`count_tokens`) is never cached, as neither provider caches one. The prefix is a request's
instructions (its system prompt); the providers differ in how it is cached and billed:

- OpenAI (chat completions, Batch API lines, the task API): automatically. A miss records the
  prefix, free (OpenAI does not bill cache writes); a hit reads it in 128-token steps from
  1024 (`openai_read`).
- Anthropic (Messages, Message Batches): only where the request marks it, a system text block
  with `cache_control` (`anthropic_prefix`): the prefix is the system text up to and including
  the last marked block. A miss writes all of it (billed above input), a hit reads all of it.

Which request is first is the order the simulator makes their tasks in (an OpenAI batch: the
order its lines are answered), so the same requests always meet the cache alike.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from simulator.model import count_tokens

LIFETIME = 300.0  # seconds since last use (Anthropic's 5 minutes; OpenAI's "5 to 10")
MIN_TOKENS = 1024
OPENAI_STEP = 128


@dataclass(frozen=True)
class Prefix:
    """What of a request's input may be cached. `marked`: Anthropic's cache, which the
    request asked for (written and read); else OpenAI's automatic one (read only)."""

    text: str
    marked: bool = False


@dataclass(frozen=True)
class CacheUse:
    """The input tokens one request read from the cache, and wrote to it."""

    read: int = 0
    written: int = 0


NO_CACHE = CacheUse()


class PromptCache:
    """The entries, by (model, digest of the prefix): a batch's 20 000 requests share a
    prefix of kilobytes, and the cache keeps it once, as 32 bytes."""

    def __init__(self) -> None:
        self._last_used: dict[tuple[str, bytes], float] = {}

    def use(self, model: str, text: str, now: float) -> bool:
        """Whether the prefix was cached at `now` (a hit); either way it is, from `now` on."""
        self._expire(now)
        key = (model, hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest())
        hit = key in self._last_used
        self._last_used[key] = now
        return hit

    def holds(self, model: str, text: str, now: float) -> bool:
        """Whether the prefix is cached at `now` (without using it)."""
        key = (model, hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest())
        last = self._last_used.get(key)
        return last is not None and now - last < LIFETIME

    def clear(self) -> None:
        self._last_used.clear()

    def _expire(self, now: float) -> None:
        # Few entries (one per distinct long prompt): each use can afford to look at all.
        gone = [key for key, last in self._last_used.items() if now - last >= LIFETIME]
        for key in gone:
            del self._last_used[key]


def cache_use(cache: PromptCache, model: str, prefix: Prefix | None, now: float) -> CacheUse:
    """What one request of `model` with this cacheable prefix reads from and writes to the
    cache at `now`, the cache updated (a request with no prefix, or a short one: nothing)."""
    if prefix is None:
        return NO_CACHE
    tokens = count_tokens(prefix.text)
    if tokens < MIN_TOKENS:
        return NO_CACHE
    hit = cache.use(model, prefix.text, now)
    if prefix.marked:
        return CacheUse(read=tokens) if hit else CacheUse(written=tokens)
    return CacheUse(read=openai_read(tokens)) if hit else NO_CACHE


def openai_read(tokens: int) -> int:
    """The tokens of a cached prefix an OpenAI hit reads: 1024, then whole 128-token steps."""
    return min(tokens, MIN_TOKENS + OPENAI_STEP * ((tokens - MIN_TOKENS) // OPENAI_STEP))


def anthropic_prefix(system: Any) -> Prefix | None:
    """The prefix an Anthropic request asked to cache: its system text blocks up to and
    including the last one with `cache_control` (its `ttl` is not simulated: 5 minutes);
    None when no block has one. (A `cache_control` elsewhere, on a tool or a message, is
    not simulated.) Joined as `simulator.anthropic_api.system_text` joins the whole
    system, so that the prefix is the start of the prompt it counts."""
    if not isinstance(system, list):
        return None
    blocks = [block for block in system if isinstance(block, dict)]
    marked = [index for index, block in enumerate(blocks) if _marked(block)]
    if not marked:
        return None
    text = "".join(block.get("text", "") for block in blocks[: marked[-1] + 1])
    return Prefix(text, marked=True)


def _marked(block: dict[str, Any]) -> bool:
    control = block.get("cache_control")
    return isinstance(control, dict) and control.get("type") == "ephemeral"
