"""A deterministic, realistic month of user posts.

Demos, tests and benchmarks need input that looks like the real thing (several languages, emoji,
URLs, a few very long reports) yet is identical on every run, so results can be compared. The
posts are about "Hearthly", a fictional smart thermostat with an app, a subscription and a filter
delivery service. Everything comes from `random.Random(seed)`: same arguments, same bytes.
"""

from __future__ import annotations

import calendar
import json
import random
import re
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["generate_posts", "write_posts"]


# The word pools and templates the posts are made of: data, kept apart from the code.
_WORDS: dict[str, Any] = json.loads(
    (Path(__file__).parent / "sample_words.json").read_text(encoding="utf-8")
)


def _tuples(value: Any) -> Any:
    """JSON's lists back as the tuples the generator was written with."""
    if isinstance(value, list):
        return tuple(_tuples(item) for item in value)
    if isinstance(value, dict):
        return {key: _tuples(item) for key, item in value.items()}
    return value


MAX_LONG_CHARS = 6000
LONG_SHARE = 0.05

_MONTH_RE = re.compile(r"(\d{4})-(\d{2})")
_MONTH_NAMES = (
    "",
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)

# --------------------------------------------------------------------------------------------
# Weights
# --------------------------------------------------------------------------------------------

_LANG_WEIGHTS: tuple[tuple[str, int], ...] = (
    ("en", 75),
    ("zh", 5),
    ("es", 5),
    ("de", 4),
    ("fr", 4),
    ("ja", 4),
    ("pt", 3),
)

_SOURCE_WEIGHTS: tuple[tuple[str, int], ...] = (
    ("forum", 35),
    ("social", 30),
    ("app-review", 20),
    ("support-ticket", 15),
)

_CATEGORY_WEIGHTS: dict[str, tuple[tuple[str, int], ...]] = _tuples(_WORDS["category_weights"])

# What a second paragraph may be, given the first one's category.
_FOLLOW_UPS: dict[str, tuple[str, ...]] = {
    "question": ("complaint", "question"),
    "complaint": ("question", "suggestion"),
    "praise": ("suggestion", "praise"),
    "suggestion": ("suggestion", "praise"),
    "announcement": ("question",),
    "offtopic": (),
}

# --------------------------------------------------------------------------------------------
# Short posts: templates and slot fillers per language
# --------------------------------------------------------------------------------------------

_TEMPLATES: dict[str, dict[str, tuple[str, ...]]] = _tuples(_WORDS["templates"])

_POOLS: dict[str, dict[str, tuple[str, ...]]] = _tuples(_WORDS["pools"])

_OPENERS: dict[str, tuple[str, ...]] = _tuples(_WORDS["openers"])

_CLOSERS: dict[str, tuple[str, ...]] = _tuples(_WORDS["closers"])

_EMOJI = ("🙂", "😅", "🔥", "👍", "😡", "🙏", "❄️", "🤔", "🎉", "😤", "💸", "🏠", "🥶", "🙄")
_EMOJI_BY_CATEGORY: dict[str, tuple[str, ...]] = {
    "question": ("🤔", "🙏", "😅"),
    "complaint": ("😡", "😤", "💸", "🥶", "🙄"),
    "praise": ("🙂", "👍", "🎉", "🔥", "🏠"),
    "suggestion": ("🙏", "🙂", "👍"),
    "announcement": ("📣", "👀", "🔧"),
    "offtopic": ("😅", "❄️", "☕", "🥶"),
}
_ALL_EMOJI = (*_EMOJI, "📣", "👀", "🔧", "☕", "😄", "😊")
_HASHTAGS = ("#hearthly", "#smarthome", "#heating", "#homeautomation")
_NO_SPACE_LANGS = frozenset({"zh", "ja"})


def _url(rng: random.Random) -> str:
    kind = rng.randrange(4)
    if kind == 0:
        return f"https://community.hearthly.example/t/{rng.randint(1000, 99999)}"
    if kind == 1:
        return f"https://help.hearthly.example/articles/{rng.randint(100, 9999)}"
    if kind == 2:
        return "https://status.hearthly.example"
    return f"https://img.example.net/{rng.randint(10**6, 10**7 - 1):x}.png"


_DYNAMIC: dict[str, Callable[[random.Random], str]] = {
    "version": lambda r: f"4.{r.randint(8, 14)}.{r.randint(0, 4)}",
    "firmware": lambda r: f"{r.randint(2, 3)}.{r.randint(0, 9)}.{r.randint(0, 20)}",
    "temp": lambda r: str(r.randint(18, 23)),
    "days": lambda r: str(r.choice((10, 14, 20, 30, 45, 60, 90))),
    "hours": lambda r: str(r.randint(2, 12)),
    "wait": lambda r: str(r.randint(4, 12)),
    "order": lambda r: f"HL-{r.randint(100000, 999999)}",
    "price": lambda r: r.choice(("4.99", "5.99", "6.49", "7.99")),
    "percent": lambda r: str(r.randint(8, 35)),
    "months": lambda r: str(r.randint(3, 18)),
    "n": lambda r: str(r.randint(2, 6)),
    "url": _url,
    "thread": lambda r: f"https://community.hearthly.example/t/{r.randint(1000, 99999)}",
    "thread2": lambda r: f"https://community.hearthly.example/t/{r.randint(1000, 99999)}",
    "emoji": lambda r: r.choice(_EMOJI),
}

_FORMATTER = string.Formatter()


def _fill(
    rng: random.Random, template: str, lang: str, fixed: Mapping[str, str] | None = None
) -> str:
    """Fill `{slot}`s in template order, so the random draws are always the same."""
    values: dict[str, str] = dict(fixed or {})
    pools = _POOLS.get(lang, {})
    for _, name, _, _ in _FORMATTER.parse(template):
        if not name or name in values:
            continue
        if name in _DYNAMIC:
            values[name] = _DYNAMIC[name](rng)
        elif name in pools:
            values[name] = rng.choice(pools[name])
        else:
            values[name] = rng.choice(_POOLS["en"][name])
    return template.format(**values)


def _weighted(rng: random.Random, options: Sequence[tuple[str, int]]) -> str:
    names = [name for name, _ in options]
    weights = [weight for _, weight in options]
    return rng.choices(names, weights=weights, k=1)[0]


def _stars(n: int) -> str:
    return "★" * n + "☆" * (5 - n)


def _short_text(rng: random.Random, lang: str, source: str) -> str:
    category = _weighted(rng, _CATEGORY_WEIGHTS[source])
    templates = _TEMPLATES[lang]
    first = rng.choice(templates[category])
    paragraphs = [_fill(rng, first, lang)]
    follow_ups = _FOLLOW_UPS[category]
    if follow_ups and rng.random() < 0.2:
        follow = rng.choice(follow_ups)
        choices = [t for t in templates[follow] if t != first]
        paragraphs.append(_fill(rng, rng.choice(choices), lang))
    glue = "" if lang in _NO_SPACE_LANGS else " "
    body = ("\n\n" if rng.random() < 0.6 else glue).join(paragraphs)

    if source in ("forum", "support-ticket") and rng.random() < 0.35:
        opener = rng.choice(_OPENERS[lang])
        sep = "\n\n" if opener.endswith(",") or rng.random() < 0.5 else glue
        body = opener + sep + body
    if source != "app-review" and rng.random() < 0.3:
        sep = "\n\n" if rng.random() < 0.4 else glue
        body = body + sep + rng.choice(_CLOSERS[lang])
    if "{url}" not in first and rng.random() < 0.07:
        label = "Link" if lang == "en" else "🔗"
        body += f"\n\n{label}: {_url(rng)}"
    if rng.random() < (0.35 if source == "social" else 0.08):
        emoji = rng.choice(_EMOJI_BY_CATEGORY[category])
        if not any(e in body for e in _ALL_EMOJI):
            body += glue + emoji
    if source == "social" and rng.random() < 0.4:
        body += " " + " ".join(rng.sample(_HASHTAGS, rng.randint(1, 2)))
    if source == "app-review":
        if category == "complaint":
            rating = rng.randint(1, 2)
        elif category == "praise":
            rating = rng.randint(4, 5)
        else:
            rating = rng.randint(3, 4)
        body = f"{_stars(rating)} {body}"
    return body


# --------------------------------------------------------------------------------------------
# Long posts (English, multi-paragraph): bug reports, reviews, feature proposals
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Month:
    year: int
    month: int
    days: int

    def day(self, rng: random.Random) -> int:
        return rng.randint(1, self.days)

    def date(self, day: int) -> str:
        return f"{day} {_MONTH_NAMES[self.month]}"

    @property
    def name(self) -> str:
        return _MONTH_NAMES[self.month]


_REPORT_CONTEXT: tuple[str, ...] = _tuples(_WORDS["report_context"])
_REPORT_SYMPTOM: tuple[str, ...] = _tuples(_WORDS["report_symptom"])
_REPORT_EVENTS: tuple[str, ...] = _tuples(_WORDS["report_events"])
_REPORT_TRIED: tuple[str, ...] = _tuples(_WORDS["report_tried"])
_REPORT_OBSERVATIONS: tuple[str, ...] = _tuples(_WORDS["report_observations"])
_REPORT_UPDATES: tuple[str, ...] = _tuples(_WORDS["report_updates"])
_REPORT_ASK: tuple[str, ...] = _tuples(_WORDS["report_ask"])
_LOG_LINES: tuple[tuple[str, str, str], ...] = _tuples(_WORDS["log_lines"])

_REVIEW_SECTIONS: tuple[str, ...] = _tuples(_WORDS["review_sections"])
_REVIEW_EXTRAS: tuple[str, ...] = _tuples(_WORDS["review_extras"])

_PROPOSAL_SECTIONS: tuple[str, ...] = _tuples(_WORDS["proposal_sections"])
_PROPOSAL_BEHAVIOUR: tuple[str, ...] = _tuples(_WORDS["proposal_behaviour"])
_PROPOSAL_EXTRAS: tuple[str, ...] = _tuples(_WORDS["proposal_extras"])

_LONG_POOLS: dict[str, tuple[str, ...]] = _tuples(_WORDS["long_pools"])


def _fill_long(rng: random.Random, template: str, month: _Month, fixed: dict[str, str]) -> str:
    """Fill a long-post template; `fixed` keeps slots (device, version, ...) stable per post."""
    values = {"month_name": month.name, **fixed}
    for _, name, _, _ in _FORMATTER.parse(template):
        if name == "date" and "date" not in values:
            values["date"] = month.date(month.day(rng))
        elif name in _LONG_POOLS and name not in values:
            values[name] = rng.choice(_LONG_POOLS[name])
    return _fill(rng, template, "en", values)


def _post_facts(rng: random.Random) -> dict[str, str]:
    """The details one author repeats throughout a long post."""
    return {
        "device": rng.choice(_POOLS["en"]["device"]),
        "version": _DYNAMIC["version"](rng),
        "firmware": _DYNAMIC["firmware"](rng),
        "room": rng.choice(_POOLS["en"]["room"]),
        "city": rng.choice(_POOLS["en"]["city"]),
        "phone": rng.choice(_POOLS["en"]["phone"]),
        "problem": rng.choice(_LONG_POOLS["problem"]),
        "wish": rng.choice(_LONG_POOLS["wish"]),
        "months": _DYNAMIC["months"](rng),
    }


def _log_block(rng: random.Random, month: _Month, facts: Mapping[str, str]) -> str:
    day = month.day(rng)
    seconds = rng.randint(0, 20 * 3600)
    lines = []
    for _ in range(rng.randint(5, 14)):
        seconds += rng.randint(1, 900)
        hh, rest = divmod(seconds, 3600)
        mm, ss = divmod(rest, 60)
        level, component, message = rng.choice(_LOG_LINES)
        message = message.format(
            rssi=rng.randint(55, 88),
            ch=rng.choice((1, 6, 11)),
            n=rng.randint(1, 9),
            temp=rng.randint(16, 22),
            cycles=rng.randint(2000, 40000),
            pct=rng.randint(5, 100),
        )
        stamp = f"{month.year:04d}-{month.month:02d}-{day:02d}T{hh:02d}:{mm:02d}:{ss:02d}Z"
        lines.append(f"{stamp} {level:<5} {component}: {message}")
    intro = rng.choice(
        (
            f"Excerpt from the diagnostics export (firmware {facts['firmware']}):",
            f"Another chunk of the log, from {month.date(day)}:",
            "Log lines around one of the drops (times are UTC):",
        )
    )
    return intro + "\n\n" + "\n".join(lines)


def _bullets(rng: random.Random, items: Sequence[str], low: int, high: int) -> list[str]:
    picked = sorted(rng.sample(range(len(items)), rng.randint(low, min(high, len(items)))))
    return [items[i] for i in picked]


def _report_sections(rng: random.Random, month: _Month) -> tuple[list[str], list[str], str]:
    facts = _post_facts(rng)
    title = _fill_long(
        rng,
        rng.choice(
            (
                "Long write-up: {device} {problem} since {version} (what I've tried so far)",
                "[Detailed report] {device} {problem}, {month_name} edition",
                "{device} {problem}: full timeline, logs and everything I tried",
            )
        ),
        month,
        facts,
    )
    title = title[0].upper() + title[1:]
    events = _bullets(rng, _REPORT_EVENTS, 4, 9)
    moments = sorted((month.day(rng), rng.randint(0, 23), rng.randint(0, 59)) for _ in events)
    timeline = "Timeline so far:\n" + "\n".join(
        f"- {month.date(d)}, {hh:02d}:{mm:02d}: " + _fill_long(rng, e, month, facts)
        for (d, hh, mm), e in zip(moments, events, strict=True)
    )
    tried = "Things I have already tried:\n" + "\n".join(
        "- " + _fill_long(rng, t, month, facts) for t in _bullets(rng, _REPORT_TRIED, 4, 9)
    )
    sections = [
        title,
        _fill_long(rng, rng.choice(_REPORT_CONTEXT), month, facts),
        _fill_long(rng, rng.choice(_REPORT_SYMPTOM), month, facts),
        timeline,
        tried,
        _log_block(rng, month, facts),
    ]
    observations = [
        _fill_long(rng, o, month, facts) for o in _bullets(rng, _REPORT_OBSERVATIONS, 2, 8)
    ]
    rng.shuffle(observations)
    sections.append(observations.pop())
    updates = _bullets(rng, _REPORT_UPDATES, 2, len(_REPORT_UPDATES))
    update_days = sorted(month.day(rng) for _ in updates)
    extras = observations[:2] + [_log_block(rng, month, facts)] + observations[2:]
    extras += [_log_block(rng, month, facts) for _ in range(2)]
    extras += [
        f"Update ({month.date(d)}): " + _fill_long(rng, u, month, facts)
        for d, u in zip(update_days, updates, strict=True)
    ]
    ending = (
        _fill_long(rng, rng.choice(_REPORT_ASK), month, facts)
        + "\n\n"
        + rng.choice(
            ("Thanks for reading this far.", "Sorry for the wall of text, and thanks.", "Cheers")
        )
    )
    return sections, extras, ending


def _review_sections(rng: random.Random, month: _Month) -> tuple[list[str], list[str], str]:
    facts = _post_facts(rng)
    rating = rng.randint(3, 5)
    facts["stars"] = _stars(rating)
    title = _fill_long(
        rng,
        rng.choice(
            (
                "{stars} Long review: {months} months with the {device} and Hearthly Plus",
                "{stars} Honest review after {months} months (long, sorry)",
            )
        ),
        month,
        facts,
    )
    sections = [title] + [_fill_long(rng, s, month, facts) for s in _REVIEW_SECTIONS]
    extras = [_fill_long(rng, e, month, facts) for e in _REVIEW_EXTRAS]
    rng.shuffle(extras)
    ending = (
        f"Verdict: {rating} out of 5. It does the core job, heating the house when we need it and "
        "not when we don't, really well. The rest is polish, and the polish is getting better "
        "with every update."
    )
    return sections, extras, ending


def _proposal_sections(rng: random.Random, month: _Month) -> tuple[list[str], list[str], str]:
    facts = _post_facts(rng)
    title = f"Feature proposal: {facts['wish']} (with a rough design)"
    behaviour = "Proposed behaviour:\n" + "\n".join(
        "- " + b for b in _bullets(rng, _PROPOSAL_BEHAVIOUR, 3, 6)
    )
    body = [_fill_long(rng, s, month, facts) for s in _PROPOSAL_SECTIONS]
    sections = [title, body[0], body[1], behaviour, body[2], body[3], body[4]]
    extras = [_fill_long(rng, e, month, facts) for e in _PROPOSAL_EXTRAS]
    rng.shuffle(extras)
    return sections, extras, body[5]


_LONG_KINDS: tuple[
    tuple[
        str,
        int,
        tuple[str, ...],
        Callable[[random.Random, _Month], tuple[list[str], list[str], str]],
    ],
    ...,
] = (
    ("report", 5, ("forum", "support-ticket"), _report_sections),
    ("review", 3, ("app-review", "forum"), _review_sections),
    ("proposal", 2, ("forum",), _proposal_sections),
)


def _long_post(rng: random.Random, month: _Month) -> tuple[str, str]:
    """Return (text, source) for a multi-paragraph post of roughly 1,600-6,000 characters."""
    kind = _weighted(rng, [(name, weight) for name, weight, _, _ in _LONG_KINDS])
    _, _, sources, build = next(k for k in _LONG_KINDS if k[0] == kind)
    source = rng.choice(sources)
    sections, extras, ending = build(rng, month)
    target = rng.randint(1600, MAX_LONG_CHARS - 200)
    text = "\n\n".join(sections)
    room = MAX_LONG_CHARS - len(ending) - 2
    for extra in extras:
        if len(text) + len(ending) >= target or len(text) + 2 + len(extra) > room:
            break
        text += "\n\n" + extra
    return text + "\n\n" + ending, source


# --------------------------------------------------------------------------------------------
# Month, author, timestamp
# --------------------------------------------------------------------------------------------


def _parse_month(month: str) -> _Month:
    match = _MONTH_RE.fullmatch(month) if isinstance(month, str) else None
    if match is None or not 1 <= int(match.group(2)) <= 12 or int(match.group(1)) < 1:
        raise ValueError(f"month must look like 2026-10 (YYYY-MM, month 01-12), got {month!r}")
    year, number = int(match.group(1)), int(match.group(2))
    return _Month(year, number, calendar.monthrange(year, number)[1])


_HANDLE_NAMES: dict[str, tuple[str, ...]] = _tuples(_WORDS["handle_names"])
_HANDLE_NOUNS = (
    "home",
    "heat",
    "cozy",
    "coffee",
    "north",
    "garden",
    "retro",
    "pixel",
    "bike",
    "owl",
    "maker",
    "fox",
    "tea",
    "cat",
)


def _author(rng: random.Random, lang: str) -> str:
    first = rng.choice(_HANDLE_NAMES[lang])
    noun = rng.choice(_HANDLE_NOUNS)
    style = rng.randrange(5)
    if style == 0:
        return f"{first}{rng.randint(1, 99)}"
    if style == 1:
        return f"{first}_{noun}"
    if style == 2:
        return f"{noun}.{first}"
    if style == 3:
        return f"{first}.{rng.choice(string.ascii_lowercase)}"
    return f"{noun}{rng.choice(_HANDLE_NOUNS)}{rng.randint(1, 999)}"


def _timestamp(rng: random.Random, month: _Month) -> str:
    offset = rng.randrange(month.days * 86400)
    day, rest = divmod(offset, 86400)
    hh, rest = divmod(rest, 3600)
    mm, ss = divmod(rest, 60)
    return f"{month.year:04d}-{month.month:02d}-{day + 1:02d}T{hh:02d}:{mm:02d}:{ss:02d}Z"


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------


def generate_posts(month: str, count: int, seed: int) -> list[dict[str, str]]:
    """Return `count` posts dated inside `month` ("YYYY-MM"); same arguments, same posts."""
    parsed = _parse_month(month)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be a whole number of at least 1, got {count!r}")
    rng = random.Random(seed)
    posts: list[dict[str, str]] = []
    for i in range(1, count + 1):
        if rng.random() < LONG_SHARE:
            lang = "en"
            text, source = _long_post(rng, parsed)
        else:
            lang = _weighted(rng, _LANG_WEIGHTS)
            source = _weighted(rng, _SOURCE_WEIGHTS)
            text = _short_text(rng, lang, source)
        posts.append(
            {
                "id": f"p-{month}-{i:05d}",
                "text": text,
                "author": _author(rng, lang),
                "created_at": _timestamp(rng, parsed),
                "lang": lang,
                "source": source,
            }
        )
    return posts


def write_posts(path: Path, posts: list[dict[str, str]]) -> None:
    """Write `posts` as UTF-8 JSON Lines (one object per line), creating parent folders."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="\n") as handle:
        for post in posts:
            handle.write(json.dumps(post, ensure_ascii=False) + "\n")
