"""Where an analysis comes from: a name given in the settings, the flow's form or the command
line, turned into the one description (`Analysis`).

A reference is one of:
- empty or `default`: postledger's own analysis (`default.py`);
- a JSON Schema file, `path/to/analysis.json`;
- a pydantic model, `package.module:Model` (importable from the project folder) or
  `path/to/file.py:Model`;
- the JSON Schema itself, `{...}`: how a run hands the analysis it read to its tasks, so that
  every batch of a run asks the same question even if the file changes meanwhile.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from postledger.analysis.description import Analysis
from postledger.analysis.errors import AnalysisError, Problem
from postledger.analysis.reading import read_schema

DEFAULT = "default"
FORMS = (
    "name a JSON Schema file (analysis.json), a pydantic model (package.module:Model or "
    "file.py:Model), or leave it empty for the built-in analysis"
)


def load_analysis(reference: str | None, *, instructions: str | None = None) -> Analysis:
    """The analysis `reference` names, its instructions replaced by `instructions` if given;
    raises AnalysisError saying what is wrong and what to do."""
    reference = (reference or "").strip() or DEFAULT
    stamp = _stamp(reference)
    analysis = _loaded(reference, stamp).with_instructions(instructions)
    if not analysis.instructions.strip():
        where = "the instructions"
        fix = (
            "write them as the schema's \"description\" (in pydantic: the model's docstring), "
            "or set POSTLEDGER_PROMPT"
        )
        raise AnalysisError(_source(reference), [Problem(where, "they are empty", fix)])
    return analysis


def fields_version(analysis: Analysis) -> str:
    """The fingerprint's "schema" part: the built-in fields keep the version every earlier
    ledger holds ("1"), so that their completed work stays completed; others, a digest."""
    from postledger.analysis.default import DEFAULT_FIELDS_VERSION

    if set(analysis.fields) == set(load_analysis(None).fields):  # in any order
        return DEFAULT_FIELDS_VERSION
    return analysis.fields_digest()


def _stamp(reference: str) -> tuple[int, int] | None:
    """A file's version: a file changed between two runs of one process is read again."""
    module, colon, _ = reference.rpartition(":")
    path = Path(module) if colon and module.endswith(".py") else Path(reference)
    if reference == DEFAULT or reference.startswith("{"):
        return None
    try:
        status = path.stat()
    except (OSError, ValueError):
        return None
    return status.st_mtime_ns, status.st_size


@functools.lru_cache(maxsize=32)
def _loaded(reference: str, stamp: tuple[int, int] | None) -> Analysis:
    source = _source(reference)
    if reference == DEFAULT:
        from postledger.analysis.default import PostAnalysis

        return read_schema(PostAnalysis.model_json_schema(), source, name="post_analysis")
    if reference.startswith("{"):
        return read_schema(_json(reference, source), source, name="analysis")
    if reference.lower().endswith(".json"):
        return _from_file(Path(reference))
    module, colon, attribute = reference.rpartition(":")
    if colon and module and attribute:
        return _from_model(module, attribute, reference)
    raise AnalysisError(reference, [Problem("the name", "it is neither a file nor a model", FORMS)])


def _source(reference: str) -> str:
    if reference == DEFAULT:
        return "the built-in analysis"
    return "the analysis given inline" if reference.startswith("{") else reference


def _from_file(path: Path) -> Analysis:
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise AnalysisError(source, [Problem("the file", "there is no such file", FORMS)]) from None
    except (OSError, ValueError) as exc:  # a folder, no access, not UTF-8, a NUL in the name
        fix = "save it as UTF-8 text the project can read"
        raise AnalysisError(
            source, [Problem("the file", f"it cannot be read ({exc})", fix)]
        ) from None
    return read_schema(_json(text, source), source, name=path.stem)


def _json(text: str, source: str) -> Any:
    try:
        return json.loads(text)
    except RecursionError:
        what = "it is nested too deeply to read"
        raise AnalysisError(
            source, [Problem("the text", what, "write one flat JSON Schema")]
        ) from None
    except ValueError as exc:
        where = f"line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else "the text"
        what = f"it is not JSON ({exc.msg if isinstance(exc, json.JSONDecodeError) else exc})"
        raise AnalysisError(
            source, [Problem(where, what, "write one JSON Schema object")]
        ) from None


def _from_model(module: str, attribute: str, reference: str) -> Analysis:
    try:
        found = getattr(_module(module), attribute)
    except AttributeError:
        what = f"{module} has no {attribute}"
        raise AnalysisError(
            reference, [Problem("the model", what, "check the name after the colon")]
        ) from None
    schema_of = getattr(found, "model_json_schema", None)
    if not isinstance(found, type) or not callable(schema_of):
        what = f"{attribute} is not a pydantic model"
        fix = "name a class that derives from pydantic.BaseModel"
        raise AnalysisError(reference, [Problem("the model", what, fix)])
    try:
        schema = schema_of()
    except Exception as exc:  # noqa: BLE001 - the user's model; say what it raised
        what = f"its JSON Schema cannot be made ({type(exc).__name__}: {exc})"
        fix = "use the field types docs/analysis.md lists"
        raise AnalysisError(reference, [Problem("the model", what, fix)]) from None
    return read_schema(schema, reference, name=attribute)


def _module(module: str) -> Any:
    """The module of a `module:Model` reference: a file path, or a dotted name importable from
    the project folder (the current directory), as `uvicorn app:app` finds it."""
    try:
        if module.endswith(".py"):
            path = Path(module)
            spec = importlib.util.spec_from_file_location(f"postledger_analysis_{path.stem}", path)
            if spec is None or spec.loader is None or not path.is_file():
                raise FileNotFoundError(module)
            loaded = importlib.util.module_from_spec(spec)
            # Registered first: pydantic resolves a model's annotations through its module.
            sys.modules[spec.name] = loaded
            spec.loader.exec_module(loaded)
            return loaded
        if "" not in sys.path and str(Path.cwd()) not in sys.path:
            sys.path.insert(0, str(Path.cwd()))
        return importlib.import_module(module)
    except FileNotFoundError:
        raise AnalysisError(
            module, [Problem("the model", "there is no such file", FORMS)]
        ) from None
    except ImportError as exc:
        what = f"it cannot be imported ({exc})"
        fix = "run from the project folder, or give the file's path (file.py:Model)"
        raise AnalysisError(module, [Problem("the model", what, fix)]) from None
    except (Exception, SystemExit) as exc:  # the user's module failed (or exited) as it loaded
        what = f"importing it raised {type(exc).__name__}: {exc}"
        raise AnalysisError(module, [Problem("the model", what, "fix the module")]) from None
