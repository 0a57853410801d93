"""Cut the parts of OpenAI's OpenAPI document that postledger's OpenAI adapters use out of the
whole document, into `openapi.json` beside this file (see SOURCE.md):

    python tests/data/openai_openapi/extract.py path/to/openai-openapi/openapi.json REVISION

The operations below, and every component they reach through `$ref`, are kept unchanged.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

# (path, method): what the adapters send (openai_chat, openai_batch), and nothing else.
OPERATIONS = [
    ("/chat/completions", "post"),
    ("/files", "post"),
    ("/files/{file_id}/content", "get"),
    ("/batches", "post"),
    ("/batches", "get"),
    ("/batches/{batch_id}", "get"),
    ("/batches/{batch_id}/cancel", "post"),
]
# A Batch API file's lines carry a chat request's body and, in the output, a chat response's
# (this revision of the document has no schema for the lines' envelopes).
LINE_SCHEMAS = ["CreateChatCompletionRequest", "CreateChatCompletionResponse"]


def refs(node: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/"):
            found.add(ref)
        for value in node.values():
            found |= refs(value)
    elif isinstance(node, list):
        for value in node:
            found |= refs(value)
    return found


def subset(whole: dict[str, Any], revision: str) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for path, method in OPERATIONS:
        item = whole["paths"][path]
        kept = paths.setdefault(path, {k: v for k, v in item.items() if k == "parameters"})
        operation = dict(item[method])
        operation.pop("x-oaiMeta", None)  # documentation examples: large, never validated
        kept[method] = operation
    components: dict[str, dict[str, Any]] = {}
    todo = refs(paths) | {f"#/components/schemas/{name}" for name in LINE_SCHEMAS}
    while todo:
        ref = todo.pop()
        _, _, section, name = ref.split("/", 3)
        if name in components.get(section, {}):
            continue
        node = whole["components"][section][name]
        components.setdefault(section, {})[name] = node
        todo |= refs(node)
    return {
        "openapi": whole["openapi"],
        "info": {**whole["info"], "x-postledger-subset-of": f"openai/openai-openapi@{revision}"},
        "servers": whole.get("servers", []),
        "paths": paths,
        "components": {k: dict(sorted(v.items())) for k, v in sorted(components.items())},
    }


def main() -> None:
    source, revision = Path(sys.argv[1]), sys.argv[2]
    whole = json.loads(source.read_text(encoding="utf-8"))
    out = Path(__file__).with_name("openapi.json")
    out.write_text(json.dumps(subset(whole, revision), indent=1, sort_keys=False) + "\n")
    print(f"wrote {out} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
