"""What an ended OpenAI batch gave the ledger batch's one request, as the adapter reads its
output and error files. (The Batch API over HTTP: tests/flow/test_faults.py and
tests/flow/test_openai_batch.py.)"""

from __future__ import annotations

import json
from typing import Any

from postledger.upstreams.calls import Delivered, NoVerdict, NoVerdictReason, UpstreamFailed
from postledger.upstreams.openai_batch import line_result

GOOD = {"results": [{"id": "a", "category": "praise", "sentiment": "positive", "summary": "ok"}]}


def answered(content: Any) -> dict[str, Any]:
    body = {
        "choices": [{"message": {"content": json.dumps(content)}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5},
    }
    return {"custom_id": "2026-10-b0001", "response": {"status_code": 200, "body": body}}


def errored(code: str, status_code: int | None = None) -> dict[str, Any]:
    error = {"code": code, "message": "no"}
    if status_code is None:
        return {"custom_id": "2026-10-b0001", "response": None, "error": error}
    response = {"status_code": status_code, "body": {"error": error}}
    return {"custom_id": "2026-10-b0001", "response": response, "error": None}


def test_the_answered_line_is_the_batch_output_with_its_usage() -> None:
    got = line_result([answered(GOOD)], "completed")
    assert isinstance(got, Delivered) and json.loads(got.output) == GOOD
    assert got.usage == {
        "input_tokens": 10,
        "cached_input_tokens": 0,
        "cache_write_tokens": 0,
        "output_tokens": 5,
    }


def test_a_request_that_failed_upstream_is_taken_as_billed() -> None:
    got = line_result([errored("server_error", 500)], "completed")
    assert isinstance(got, UpstreamFailed) and got.billed
    assert "server_error" in got.reason


def test_a_request_that_never_ran_is_not_billed() -> None:
    for code, status in (("batch_expired", "expired"), ("batch_cancelled", "cancelled")):
        got = line_result([errored(code)], status)
        assert isinstance(got, UpstreamFailed) and not got.billed
        assert code in got.reason and "not billed" in got.reason


def test_an_ended_batch_without_the_line_has_no_verdict_for_it() -> None:
    """A line the output and error files lack (a cut file, a file read short) says nothing:
    the request may have run and been billed. The batch waits and is read again."""
    for status in ("completed", "expired", "cancelled"):
        got = line_result([], status)
        assert isinstance(got, NoVerdict) and got.reason is NoVerdictReason.RESULTS_INCOMPLETE


def test_an_answered_line_that_is_not_a_completion_has_no_verdict() -> None:
    line = {"custom_id": "2026-10-b0001", "response": {"status_code": 200, "body": {"x": 1}}}
    got = line_result([line], "completed")
    assert isinstance(got, NoVerdict) and got.reason is NoVerdictReason.NOT_THE_ANSWER


def test_a_completion_with_no_text_is_the_upstreams_billed_answer_with_its_usage() -> None:
    body = {
        "choices": [{"message": {"content": None, "refusal": "no"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 1},
    }
    line = {"custom_id": "2026-10-b0001", "response": {"status_code": 200, "body": body}}
    got = line_result([line], "completed")
    assert isinstance(got, UpstreamFailed) and got.billed
    assert got.usage == {
        "input_tokens": 10,
        "cached_input_tokens": 0,
        "cache_write_tokens": 0,
        "output_tokens": 1,
    }


def test_a_batch_made_before_one_line_per_batch_is_read_a_line_per_post() -> None:
    """An upstream batch made by an earlier postledger (one line per post) and still running
    across the upgrade: each line answers for its own post, the usage of every line counts,
    and the model's text never decides which post an answer belongs to."""

    def line(custom_id: str, content: object) -> dict[str, object]:
        return {**answered(content), "custom_id": custom_id}

    good = {"id": "a", "category": "praise", "sentiment": "positive", "summary": "ok"}
    got = line_result(
        [
            line("a", [good]),
            line("b", {**good, "id": "c"}),  # names another post: b's error, never c's result
            line("c", {**good, "id": "c"}),  # a bare object (json_object mode) is fine
            line("d", [good, good]),  # two items for one post
            errored("server_error", 500) | {"custom_id": "e"},
        ],
        "completed",
    )
    assert isinstance(got, Delivered)
    items = {item["id"]: item for item in json.loads(got.output)}
    assert items["a"] == good and items["c"]["category"] == "praise"
    assert "names post 'c'" in items["b"]["error"]
    assert "not one item" in items["d"]["error"]
    assert "server_error" in items["e"]["error"]
    assert got.usage == {
        "input_tokens": 40,
        "cached_input_tokens": 0,
        "cache_write_tokens": 0,
        "output_tokens": 20,
    }
