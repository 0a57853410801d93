"""The OpenAI Batch API's output file, as the adapter assembles it into one answer per post.
(The Batch API over HTTP: tests/flow/test_faults.py and tests/flow/test_openai_batch.py.)"""

from __future__ import annotations


def test_a_line_answers_for_its_own_post_only() -> None:
    """The model's text never decides which post an answer belongs to: its custom_id does."""
    import json

    from postledger.upstreams.openai_batch import assemble

    def line(custom_id: str, content: object) -> dict[str, object]:
        body = {
            "choices": [{"message": {"content": json.dumps(content)}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5},
        }
        return {"custom_id": custom_id, "response": {"status_code": 200, "body": body}}

    good = {"id": "a", "category": "praise", "sentiment": "positive", "summary": "ok"}
    raw, usage = assemble(
        [
            line("a", [good]),
            line("b", {**good, "id": "c"}),  # names another post: b's error, never c's result
            line("c", {**good, "id": "c"}),  # a bare object (json_object mode) is fine
            line("d", [good, good]),  # two items for one post
        ],
        "completed",
    )
    items = {item["id"]: item for item in json.loads(raw)}
    assert items["a"] == good and items["c"]["category"] == "praise"
    assert "names post 'c'" in items["b"]["error"]
    assert "not one item" in items["d"]["error"]
    assert usage == {"input_tokens": 40, "output_tokens": 20}
