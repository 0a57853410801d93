"""A JSON object read as it arrives, the items of one of its lists handed on one at a time: a
Message Batches create body (`{"requests": [...]}`, up to 256 MB) is never held whole.

It reads as `json.loads` of the whole body read: the body's encoding found from its first
bytes (`json.detect_encoding`), each value parsed by the same decoder, whitespace as JSON
allows it, and the last value of a key given twice is the one that counts. A document that is
not JSON, or not an object, fails: past the point where that is known nothing more is parsed.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Callable
from typing import Any

_BLANKS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
# A parse error this close to the end of what arrived may be a value cut by the chunk's end,
# not a wrong one; a number that ends this close to it may go on in the next chunk.
_NEAR_END = 8
_MORE, _FAILED = object(), object()  # what `_value` says instead of a value


class ListItems:
    """Pushed a document's bytes (`feed`, then `close`): each item of the list under `key` in
    the object it must be is handed to `on_item` as soon as it is whole; `on_list` is called
    as that list starts (again each time the key comes again: only the last one counts)."""

    def __init__(
        self, key: str, on_list: Callable[[], None], on_item: Callable[[Any], None]
    ) -> None:
        self.key, self.on_list, self.on_item = key, on_list, on_item
        self.failed = False  # not JSON, or not an object
        self.listed = False  # the key's last value is a list
        self._raw = bytearray()  # until the encoding is known
        self._decoder: codecs.IncrementalDecoder | None = None
        self._text = ""  # decoded and not yet parsed, from `_at` on
        self._at = 0
        # Decoded since, not yet parsed: a value cut by a chunk's end is parsed again only
        # once as much again arrived, so that a long one is not parsed once per chunk.
        self._pending: list[str] = []
        self._waiting = 0
        self._need = 0
        self._state = "start"
        self._named: str | None = None  # the key whose value is next

    def feed(self, chunk: bytes) -> None:
        if self.failed:
            return
        if self._decoder is None:
            self._raw += chunk
            if len(self._raw) < 4:
                return
            chunk, self._raw = bytes(self._raw), bytearray()
            self._decoder = _decoder_for(chunk)
        self._take(chunk, final=False)

    def close(self) -> bool:
        """Whether the document was an object whose `key` is a list."""
        if not self.failed:
            if self._decoder is None:
                self._decoder = _decoder_for(bytes(self._raw))
            self._take(bytes(self._raw), final=True)
        return not self.failed and self._state == "done" and self.listed

    def _take(self, chunk: bytes, *, final: bool) -> None:
        assert self._decoder is not None
        try:
            decoded = self._decoder.decode(chunk, final)
        except UnicodeDecodeError:
            self.failed = True
            return
        self._pending.append(decoded)
        self._waiting += len(decoded)
        if not final and self._waiting < self._need:
            return
        self._text = self._text[self._at :] + "".join(self._pending)
        self._at, self._pending, self._waiting, self._need = 0, [], 0, 0
        self._parse(eof=final)

    def _parse(self, *, eof: bool) -> None:
        while not self.failed:
            blanks = _BLANKS.match(self._text, self._at)
            self._at = blanks.end() if blanks else self._at
            if self._at >= len(self._text):
                if eof and self._state != "done":
                    self.failed = True
                return
            if not self._step(self._text[self._at], eof=eof):
                return

    def _step(self, char: str, *, eof: bool) -> bool:
        """One token further; False: it needs more of the document, or failed."""
        state = self._state
        if state == "start" or state == "done":  # an object, and nothing after it
            return self._expect(char, {"{": "first_key"} if state == "start" else {})
        if state in ("first_key", "key"):
            if char == "}" and state == "first_key":
                return self._expect(char, {"}": "done"})
            if char != '"':
                return self._expect(char, {})
            key = self._value(eof=eof)
            if key is _MORE or key is _FAILED:
                return False
            self._named, self._state = str(key), "colon"
            return True
        if state == "colon":
            return self._expect(char, {":": "value"})
        if state == "value":
            if self._named == self.key:
                self.listed = char == "["
                if self.listed:
                    self.on_list()
                    return self._expect(char, {"[": "first_item"})
            return self._whole(eof=eof, then="next_key", hand_on=False)
        if state in ("first_item", "item"):
            if char == "]" and state == "first_item":
                return self._expect(char, {"]": "next_key"})
            return self._whole(eof=eof, then="next_item", hand_on=True)
        if state == "next_item":
            return self._expect(char, {",": "item", "]": "next_key"})
        return self._expect(char, {",": "key", "}": "done"})  # next_key

    def _expect(self, char: str, then: dict[str, str]) -> bool:
        """A one-character token: the state it leads to, or the document fails."""
        if char not in then:
            self.failed = True
            return False
        self._state = then[char]
        self._at += 1
        return True

    def _whole(self, *, eof: bool, then: str, hand_on: bool) -> bool:
        value = self._value(eof=eof)
        if value is _MORE or value is _FAILED:
            return False
        if hand_on:
            self.on_item(value)
        self._state = then
        return True

    def _value(self, *, eof: bool) -> Any:
        """The value at `_at`, moving past it; `_MORE` when it may not have arrived whole."""
        text = self._text
        try:
            value, end = _DECODER.raw_decode(text, self._at)
        except json.JSONDecodeError as error:
            cut = error.pos >= len(text) - _NEAR_END or error.msg.startswith("Unterminated")
            if eof or not cut:
                self.failed = True
                return _FAILED
            self._need = len(text) - self._at
            return _MORE
        if not eof and isinstance(value, int | float) and len(text) - end < _NEAR_END:
            return _MORE  # `1` of `1.5`, `1e` of `1e3`: a number may go on
        self._at = end
        return value


def _decoder_for(start: bytes) -> codecs.IncrementalDecoder:
    """The decoder `json.loads` would decode the whole body with."""
    return codecs.getincrementaldecoder(json.detect_encoding(start))("surrogatepass")
