"""Fingerprints of a post's input (`postledger/batches/posts.py`): what a result depends on, so
that a changed input is recognised as new work.

Rules proved: R25 (a change of text, model, prompt or output schema is new work: it changes the
fingerprint, and the changed part can be named; the same input always gives the same
fingerprint, so an unchanged post's result is reused), R2 (a fingerprint fits the ledger's
record of the post).
"""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from postledger.analysis import Analysis, load_analysis
from postledger.analysis.default import DEFAULT_FIELDS_VERSION
from postledger.batches.posts import changed_parts, legacy_fingerprint
from postledger.batches.posts import fingerprint as fingerprint_of
from postledger.batches.posts import input_parts as input_parts_of

# Examples are cheap; no deadline and no example database: the machine is shared, and
# nothing is written outside the test run.
QUICK = settings(
    max_examples=100, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)

TEXT, MODEL, PROMPT = "The app crashes when I upload a photo.", "sim-analyst-1", "Analyse it."
# Its fingerprint, as the version before the month's part was serialized once made it.
KNOWN = "c6e2556af4b7823f43b17bc88bb2ce7ffd94fb7d99a5600d6778b2b588f03eec"


def asked(prompt: str) -> Analysis:
    """The built-in analysis with `prompt` as its instructions (the prompt's part)."""
    return load_analysis(None, instructions=prompt)


def fingerprint(text: str, model: str, prompt: str) -> str:
    return fingerprint_of(text, model, asked(prompt))


def input_parts(text: str, model: str, prompt: str) -> dict[str, str]:
    return input_parts_of(text, model, asked(prompt))


def test_the_same_input_gives_the_same_fingerprint() -> None:
    assert fingerprint(TEXT, MODEL, PROMPT) == fingerprint(TEXT, MODEL, PROMPT)
    assert input_parts(TEXT, MODEL, PROMPT) == input_parts(TEXT, MODEL, PROMPT)


@pytest.mark.parametrize(
    ("text", "model", "prompt", "changed"),
    [
        (TEXT + "!", MODEL, PROMPT, "text"),
        (TEXT + " ", MODEL, PROMPT, "text"),  # no normalising: any change is a change
        (TEXT.lower(), MODEL, PROMPT, "text"),
        (TEXT, "sim-analyst-2", PROMPT, "model"),
        (TEXT, MODEL, PROMPT + " Be brief.", "the analysis's instructions"),
        (TEXT + ".", MODEL, PROMPT + ".", "text, the analysis's instructions"),
        (TEXT + ".", "other", PROMPT + ".", "text, model, the analysis's instructions"),
    ],
)
def test_a_change_of_text_model_or_prompt_changes_the_fingerprint_and_is_named(
    text: str, model: str, prompt: str, changed: str
) -> None:
    assert fingerprint(text, model, prompt) != fingerprint(TEXT, MODEL, PROMPT)
    old = input_parts(TEXT, MODEL, PROMPT)
    assert changed_parts(old, input_parts(text, model, prompt)) == changed


def test_the_output_schema_version_is_part_of_the_fingerprint() -> None:
    parts = input_parts(TEXT, MODEL, PROMPT)
    assert parts["schema"] == DEFAULT_FIELDS_VERSION
    older = {**parts, "schema": "0"}
    assert changed_parts(older, parts) == "the analysis's fields"


def test_the_parts_keep_the_model_and_digests_of_the_text_and_prompt_not_the_texts() -> None:
    parts = input_parts(TEXT, MODEL, PROMPT)
    assert set(parts) == {"text", "model", "prompt", "schema"}
    assert parts["model"] == MODEL
    assert TEXT not in parts.values() and PROMPT not in parts.values()


def test_a_record_without_parts_can_only_say_that_something_changed() -> None:
    assert changed_parts(None, input_parts(TEXT, MODEL, PROMPT)) == "text, model or analysis"
    assert changed_parts({}, input_parts(TEXT, MODEL, PROMPT)) == "text, model or analysis"


def test_equal_parts_with_a_different_fingerprint_are_reported_as_the_fingerprint() -> None:
    parts = input_parts(TEXT, MODEL, PROMPT)
    assert changed_parts(parts, dict(parts)) == "fingerprint"


def test_a_legacy_fingerprint_is_stable_and_never_mistaken_for_a_current_one() -> None:
    legacy = legacy_fingerprint(TEXT, MODEL, PROMPT)
    assert legacy == legacy_fingerprint(TEXT, MODEL, PROMPT)
    assert legacy != fingerprint(TEXT, MODEL, PROMPT)
    assert legacy != legacy_fingerprint(TEXT + "!", MODEL, PROMPT)


def test_the_legacy_fingerprint_keeps_its_parts_apart() -> None:
    assert legacy_fingerprint("ab", "c", PROMPT) != legacy_fingerprint("a", "bc", PROMPT)


# No NUL: the input refuses it (the ledger cannot store it), and the legacy digest separates
# its parts with one. Instructions are never empty and have no spaces around them: an analysis
# takes them stripped, and empty ones are its own.
chars = st.characters(codec="utf-8", exclude_characters="\x00")
inputs = st.tuples(
    st.text(chars, min_size=1, max_size=60),
    st.text(chars, max_size=20),
    st.text(chars, min_size=1, max_size=60).filter(lambda p: p == p.strip() != ""),
)


@QUICK
@given(inputs)
def test_a_fingerprint_fits_the_ledgers_column_as_hex(parts: tuple[str, str, str]) -> None:
    digest = fingerprint(*parts)
    assert len(digest) == 64
    int(digest, 16)


@QUICK
@given(inputs, inputs)
def test_two_inputs_share_a_fingerprint_exactly_when_they_are_the_same(
    first: tuple[str, str, str], second: tuple[str, str, str]
) -> None:
    assert (fingerprint(*first) == fingerprint(*second)) == (first == second)
    assert (legacy_fingerprint(*first) == legacy_fingerprint(*second)) == (first == second)
    if first != second:
        named = changed_parts(input_parts(*first), input_parts(*second)).split(", ")
        words = ("text", "model", "the analysis's instructions")
        differing = [n for n, a, b in zip(words, first, second, strict=True) if a != b]
        assert named == differing


@QUICK
@given(inputs)
def test_a_fingerprint_is_the_digest_every_ledger_has_stored(parts: tuple[str, str, str]) -> None:
    # The SHA-256 of the parts as JSON with sorted keys: a ledger written by any earlier
    # version keeps its unchanged posts' results (the month's part is serialized once now).
    stored = json.dumps(input_parts(*parts), sort_keys=True)
    assert fingerprint(*parts) == hashlib.sha256(stored.encode("utf-8")).hexdigest()


def test_a_known_input_keeps_its_known_fingerprint() -> None:
    # Written down once: a change of how fingerprints are made breaks every ledger's reuse.
    assert input_parts(TEXT, MODEL, PROMPT)["schema"] == DEFAULT_FIELDS_VERSION == "1"
    assert fingerprint(TEXT, MODEL, PROMPT) == KNOWN
