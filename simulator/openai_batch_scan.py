"""An OpenAI batch's input file, read line by line as the batch is made: first each line
checked (`simulator.openai_batch_rules`), as the create does before anything is made
(`scan_input`); then, for a batch to be made of it, what each line holds written to the
batch's lines file (`simulator.openai_batch_lines`), its posts answered by the model as they
are read (`read_lines`).

What stays in memory is what the batch and its one charge need: the custom_ids, the refused
lines' reasons, the running posts' ids (the charge log lists them) and token counts. The
charge is the one the whole output written at once made: the prompt's and every running
post's tokens in, the JSON list of every running post's item out (`simulator.model`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from simulator.analyses import chat_item_schema
from simulator.model import answerer, count_tokens, list_length, tokens_in
from simulator.openai_batch_lines import BatchLines, LineRecord
from simulator.openai_batch_rules import LineChecker, input_lines, too_many
from simulator.openai_chat import chat_input, json_mode
from simulator.openai_strict import strict_problem
from simulator.spool import Spool, discard


@dataclass
class ScannedInput:
    """An input file, read: its bad lines (any fails the batch) and its valid lines' custom_ids
    and refusals (`scan_input`); then, for a batch to be made of it, what its lines hold
    (`read_lines`). The model, prompt, schema and JSON mode are the first running line's (the
    first whose schema is not refused)."""

    source: Path
    bad_lines: list[dict[str, Any]] = field(default_factory=list)
    custom_ids: list[str] = field(default_factory=list)  # every valid line's, in order
    refused: dict[str, str] = field(default_factory=dict)  # by custom_id, OpenAI's message
    running: list[str] = field(default_factory=list)  # the custom_ids of the lines that run
    post_ids: list[str] = field(default_factory=list)  # the running posts', in order
    model: str = ""
    prompt: str = ""
    schema: dict[str, Any] | None = None
    json_mode: bool = True
    post_tokens: int = 0  # the running posts' text tokens, in all
    item_chars: int = 0  # the running posts' items' JSON, in all
    lines: BatchLines | None = None
    known: set[str] = field(default_factory=set)  # every post id of the file

    @property
    def input_tokens(self) -> int:
        return count_tokens(self.prompt) + self.post_tokens

    @property
    def output_tokens(self) -> int:
        return tokens_in(list_length(self.item_chars, len(self.post_ids)))


def scan_input(source: Path, endpoint: str) -> ScannedInput:
    """Check an input file, line by line, as the create checks it before anything is made."""
    scanned = ScannedInput(source)
    if (error := too_many(sum(1 for _ in input_lines(source)))) is not None:
        scanned.bad_lines.append(error)
        return scanned
    checker = LineChecker(endpoint)
    for number, text in enumerate(input_lines(source), start=1):
        request = checker.check(number, text)
        if request is None or checker.errors:
            continue  # once a line is bad the batch only fails validation: the rest is checked
        custom_id = str(request["custom_id"])
        scanned.custom_ids.append(custom_id)
        if problem := strict_problem(request["body"]):
            scanned.refused[custom_id] = problem
    scanned.bad_lines = checker.errors
    return scanned


def read_lines(scanned: ScannedInput, spool: Spool) -> BatchLines:
    """The lines file of a valid input (written once, read again by every batch made of it):
    each line's posts, and each running post answered. A line without `messages` fails
    here, as making its batch always did."""
    if scanned.lines is not None:
        return scanned.lines
    path, reader = spool.fresh("lines"), _Reader(scanned)
    try:
        with path.open("w", encoding="utf-8") as out:
            for text in input_lines(scanned.source):  # every line is valid: it was checked
                reader.add(json.loads(text), out)
    except BaseException:
        discard(path)
        raise
    prompt_tokens = count_tokens(scanned.prompt) if scanned.running else 0
    scanned.lines = BatchLines(path, prompt_tokens, frozenset(reader.dups))
    return scanned.lines


class _Reader:
    """Adds each line to what is known of the file, and writes its record."""

    def __init__(self, scanned: ScannedInput) -> None:
        self.scanned = scanned
        self.dups: set[str] = set()
        self._answer: Any = None

    def add(self, request: dict[str, Any], out: TextIO) -> None:
        scanned, body = self.scanned, request["body"]
        custom_id = str(request["custom_id"])
        prompt, posts = chat_input(body["messages"])
        post_ids = [post_id for post_id, _ in posts]
        for post_id in post_ids:
            if post_id in scanned.known:
                self.dups.add(post_id)
            scanned.known.add(post_id)
        if custom_id in scanned.refused:
            out.write(LineRecord(custom_id, True, post_ids, [], []).dumps() + "\n")
            return
        if not scanned.running:  # the first line that runs: the batch's model and analysis
            scanned.model, scanned.prompt = str(body.get("model", "")), prompt
            scanned.schema = chat_item_schema(body, prompt)
            scanned.json_mode = json_mode(body)
            self._answer = answerer(scanned.schema)
        scanned.running.append(custom_id)
        items = [self._answer(post_id, text) for post_id, text in posts]
        tokens = [count_tokens(text) for _, text in posts]
        scanned.post_ids.extend(post_ids)
        scanned.post_tokens += sum(tokens)
        # The items' own JSON: their list's, less its brackets and separators.
        listed = len(json.dumps(items, ensure_ascii=False))
        scanned.item_chars += listed - list_length(0, len(items))
        out.write(LineRecord(custom_id, False, post_ids, tokens, items).dumps() + "\n")
