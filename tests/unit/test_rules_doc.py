"""docs/rules.md is the account of every rule (its "How references work"): every rule number
cited anywhere in the repository, "(R20)" or a range "R22–R24", has its anchor there; and no
text a user reads cites one — the command line's help, flow descriptions, log and error
messages, and the README. (The Prefect UI's pause forms and questions and the Blocks' forms,
which need Prefect: tests/flow/test_rules_doc_forms.py.)"""

from __future__ import annotations

import ast
import functools
import re
import shutil
import subprocess

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from cli.app import app
from tests.support.repo import REPO

RULES = REPO / "docs" / "rules.md"
RULE_NUMBER = re.compile(r"\bR(\d{1,2})\b")
RULE_RANGE = re.compile(r"\bR(\d{1,2})\s*[–—-]\s*R(\d{1,2})\b")
ANCHOR = re.compile(r'<a id="(r\d+)"></a>')
NOT_SCANNED = {"uv.lock"}
# Decorators whose function's docstring a user reads: a flow's is its description in the
# Prefect UI (`@flow`), a typer command's is its --help (`@app.command()`, `@app.callback()`).
FLOW_DECORATOR = "flow"
COMMAND_DECORATORS = (".command", ".callback")
# Classes whose docstring a user reads: the schema of a Resume form or of a Block's form.
USER_FACING_BASES = {"RunInput", "Block"}


@functools.cache
def tracked_files() -> dict[str, str]:
    """Every tracked text file (but uv.lock), by its path in the repository."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout: the tracked files are unknown")
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.decode()
    texts = {}
    for name in listed.split("\0"):
        path = REPO / name
        if not name or name in NOT_SCANNED or not path.is_file():
            continue  # (a tracked file deleted in the work tree has nothing to cite)
        data = path.read_bytes()
        if b"\0" in data:
            continue
        try:
            texts[name] = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
    return texts


def anchors() -> list[str]:
    return ANCHOR.findall(RULES.read_text(encoding="utf-8"))


def cited(text: str) -> list[tuple[int, str]]:
    """(line, anchor) for every rule number in `text`, and every number inside a range."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        found += [(number, f"r{n}") for n in RULE_NUMBER.findall(line)]
        for low, high in RULE_RANGE.findall(line):
            found += [(number, f"r{n}") for n in range(int(low) + 1, int(high))]
    return found


# --- (a) every citation resolves -----------------------------------------------------------


def test_the_anchors_are_unique_and_keep_r1_to_r30() -> None:
    found = anchors()
    assert len(found) == len(set(found)), "an anchor is defined twice in docs/rules.md"
    assert {f"r{n}" for n in range(1, 31)} <= set(found)


def test_every_cited_rule_number_has_its_anchor() -> None:
    known = set(anchors())
    files = tracked_files()
    assert "docs/rules.md" in files and "README.md" in files
    missing = [
        f"{name}:{line}: {anchor.upper()}"
        for name, text in files.items()
        for line, anchor in cited(text)
        if anchor not in known
    ]
    assert not missing, "cited, but no anchor in docs/rules.md:\n" + "\n".join(missing)


# --- (b) no user-facing text cites a rule number -------------------------------------------


def rule_numbers_in(text: str) -> list[str]:
    return [f"R{n}" for n in RULE_NUMBER.findall(text)]


def commands() -> list[list[str]]:
    """Every command of `postledger`, as typed: [], ["run"], ["sim"], ["sim", "serve"], …"""
    found: list[list[str]] = [[]]

    def walk(group: object, prefix: list[str]) -> None:
        # A group's subcommands by name (typer's own click, whatever its version).
        subcommands: dict[str, object] = getattr(group, "commands", {})
        for name, command in sorted(subcommands.items()):
            found.append([*prefix, name])
            walk(command, [*prefix, name])

    walk(get_command(app), [])
    assert ["run"] in found and ["sim", "serve"] in found
    return found


@pytest.mark.parametrize("command", commands(), ids=lambda c: " ".join(["postledger", *c]))
def test_the_help_cites_no_rule_number(command: list[str]) -> None:
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output
    assert not rule_numbers_in(result.output), result.output


def _read_by_users(owner: ast.AST) -> bool:
    """Whether the docstring of `owner` is shown to a user (see the constants above)."""
    if isinstance(owner, ast.FunctionDef | ast.AsyncFunctionDef):
        for decorator in owner.decorator_list:
            name = ast.unparse(decorator.func if isinstance(decorator, ast.Call) else decorator)
            if name == FLOW_DECORATOR or name.endswith(COMMAND_DECORATORS):
                return True
    if isinstance(owner, ast.ClassDef):
        return any(ast.unparse(base).split(".")[-1] in USER_FACING_BASES for base in owner.bases)
    return False


def _private_docstrings(tree: ast.Module) -> set[int]:
    """The ids of the docstrings that only people reading the code see."""
    private = set()
    for owner in ast.walk(tree):
        if not isinstance(
            owner, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
        ):
            continue
        first = owner.body[0] if owner.body else None
        if (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
            and not _read_by_users(owner)
        ):
            private.add(id(first.value))
    return private


def test_no_message_in_the_code_cites_a_rule_number() -> None:
    """Every string in the code but the tests is something a program says — a log line, an
    exception, a CLI message, a setting's description — except a docstring that only people
    reading the code see. Comments and such docstrings may cite rules."""
    offenders = []
    for name, text in tracked_files().items():
        if not name.endswith(".py") or name.startswith("tests/"):
            continue
        tree = ast.parse(text, filename=name)
        private = _private_docstrings(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in private
                and (numbers := rule_numbers_in(node.value))
            ):
                offenders.append(f"{name}:{node.lineno}: {', '.join(numbers)}")
    assert not offenders, "rule numbers in user-facing strings:\n" + "\n".join(offenders)


def test_the_readme_cites_no_rule_number() -> None:
    """The README is for users: it says the rules in words and links to docs/rules.md."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    numbers = [f"README.md:{line}: {a.upper()}" for line, a in cited(readme)]
    assert not numbers, "\n".join(numbers)
    assert "docs/rules.md" in readme
