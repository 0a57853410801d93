"""The simulator's "model": a deterministic analysis derived from the post text alone.

Good enough to look like an answer, cheap enough to run thousands of times, and the same text
always gives the same answer, so tests can compare results across runs. The default analysis
(its category, sentiment and summary) is answered by `analyse`, word for word as before an
analysis could be chosen; any other analysis field by field (`simulator.answers`).
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable, Sequence
from typing import Any, TypedDict

from postledger.analysis.default import Category, Sentiment
from simulator.analyses import analysis_of, is_default
from simulator.answers import SUMMARY_CHARS, answer_item, cut, first_sentence

_QUESTION = re.compile(
    r"\?|？|¿|^(how|why|what|when|where|can|does|is|are|do|should|which)\b|怎么|如何|吗|什么"
    r"|^(wie|warum|comment|pourquoi|como|cómo|qué|por qué)\b|どう|ですか",
    re.IGNORECASE,
)
_SUGGESTION = re.compile(
    r"\b(should|would be (nice|great)|please add|feature request|suggest|wish|idea)\b"
    r"|建议|希望|sugerencia|sugiero|vorschlag|wäre schön|suggestion|ce serait bien|提案|sugest",
    re.IGNORECASE,
)
_NEWS = re.compile(
    r"\b(announc\w*|released?|launch\w*|now available|version \d|update \d|changelog)\b"
    r"|发布|上线|lanzamiento|veröffentlicht|disponible|リリース|lançamento",
    re.IGNORECASE,
)
_POSITIVE = re.compile(
    r"\b(love|great|thanks?|thank you|awesome|excellent|amazing|perfect|happy|good|fast|"
    r"recommend|works)\b|喜欢|好用|谢谢|很棒|excelente|gracias|genial|toll|super|danke|"
    r"génial|merci|parfait|最高|ありがとう|obrigad|ótimo|😍|👍|❤️",
    re.IGNORECASE,
)
_NEGATIVE = re.compile(
    r"\b(broken|crash\w*|refund|terrible|worst|angry|disappointed|slow|bug|bugs|error|fail\w*|"
    r"never|late|missing|scam|useless|annoying|problem)\b|差|失望|问题|崩溃|退款|malo|fatal|"
    r"problema|schlecht|fehler|kaputt|nul|problème|déçu|問題|最悪|ruim|péssimo|😡|👎",
    re.IGNORECASE,
)


class ModelItem(TypedDict):
    id: str
    category: str
    sentiment: str
    summary: str


def analyse(post_id: str, text: str) -> ModelItem:
    positive = len(_POSITIVE.findall(text))
    negative = len(_NEGATIVE.findall(text))
    sentiment = (
        Sentiment.POSITIVE
        if positive > negative
        else Sentiment.NEGATIVE
        if negative > positive
        else Sentiment.NEUTRAL
    )
    if _NEWS.search(text):
        category = Category.NEWS
    elif _SUGGESTION.search(text):
        category = Category.SUGGESTION
    elif _QUESTION.search(text.strip()):
        category = Category.QUESTION
    elif sentiment is Sentiment.NEGATIVE:
        category = Category.COMPLAINT
    elif sentiment is Sentiment.POSITIVE:
        category = Category.PRAISE
    else:
        category = Category.OTHER
    return ModelItem(
        id=post_id, category=category.value, sentiment=sentiment.value, summary=summarise(text)
    )


def summarise(text: str) -> str:
    return cut(first_sentence(text), SUMMARY_CHARS)


def answerer(schema: dict[str, Any] | None = None) -> Callable[[str, str], Any]:
    """What answers one post (its id, its text) in the shape of the item schema the request
    carried (`simulator.analyses`; none: the default analysis)."""
    analysis = analysis_of(schema)
    if is_default(analysis):
        return analyse
    return functools.partial(answer_item, analysis)


def write_output(posts: Sequence[tuple[str, str]], schema: dict[str, Any] | None = None) -> str:
    """The text the model "writes" for a batch: a JSON list, one item per post (`answerer`)."""
    answer = answerer(schema)
    return json.dumps([answer(pid, text) for pid, text in posts], ensure_ascii=False)


def list_length(lengths: int, count: int) -> int:
    """The length of a JSON list (`json.dumps`'s ", " between items) of `count` items whose
    own JSON is `lengths` characters in all: a batch's output is counted without being
    written whole."""
    return 2 + lengths + 2 * max(0, count - 1)


def count_tokens(text: str) -> int:
    """A rough, deterministic token count (~4 characters per token), like a tokenizer's."""
    return tokens_in(len(text))


def tokens_in(length: int) -> int:
    """`count_tokens` of a text of this many characters."""
    return max(1, math.ceil(length / 4))
