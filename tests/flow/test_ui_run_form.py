"""The deployment's run form in the Prefect UI says what each parameter means (issue 18), in
headless Chromium.

The project's deployment is registered the way docs/scaling.md says (`prefect deploy --all`
from the project's folder, reading prefect.yaml, into the `postledger` work pool that
`postledger setup` makes) on a real `prefect server start`. Prefect reads the parameters'
descriptions from the `Args:` section of `monthly_posts`'s docstring into the deployment's
parameter schema; the custom run form (`/deployments/deployment/<id>/run` in the v1 Vue UI,
`/v2/...` in the v2 React UI) must show each one next to its parameter. Nothing is run: no
worker is needed. (Beside each description both UIs also say 'Property is type "None"': the
null branch of an optional parameter whose default is null, Prefect's own wording.)

Skipped where no Chromium is installed (`.ci/run` installs Debian's).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.browser import browser_page, needs_chromium
from tests.support.commands import run_process
from tests.support.prefect_server import PrefectServer
from tests.support.repo import REPO

pytestmark = [
    needs_chromium,
    pytest.mark.processes,  # `prefect deploy`, a real server, a browser
    pytest.mark.xdist_group("prefect_server"),  # one real server per pytest session, not per worker
]

# What a person starting a run must be able to read in the form, whatever else the docstring
# says: what the value means, what leaving it empty does, and what a choice may cost.
MUST_SAY = {
    "month": ["as YYYY-MM", "Empty: the month that just ended (UTC)"],
    "posts_path": ["a JSONL file", "Empty: data/posts/YYYY-MM.jsonl"],
    "poll": ["yes, poll them", "Free: polling is never charged", "Empty: the run asks"],
    "resubmit": ["yes, send them again", "May be charged twice", "Empty: the run asks"],
    "upstream_block": ["postledger-upstream block", "Empty: the POSTLEDGER_UPSTREAM_*"],
    "ledger_block": ["postledger-ledger block", "Empty: the POSTLEDGER_DATABASE_URL"],
    "analysis": ["What each post is asked", "a JSON Schema file", "Empty: POSTLEDGER_ANALYSIS"],
}


@dataclass(frozen=True)
class Deployment:
    server: PrefectServer
    id: str
    parameters: dict[str, Any]  # the parameter schema's properties, as the server keeps them


@pytest.fixture(scope="module")
def deployment(
    prefect_server: PrefectServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    """prefect.yaml's `monthly-posts/monthly`, deployed with `prefect deploy --all` into the
    `postledger` work pool (made as `postledger setup` makes it: idempotent, as the deployment
    test may have made it already on this server)."""
    env = prefect_server.client_env(tmp_path_factory.mktemp("deploy-client"))
    env["PREFECT_CLI_PROMPT"] = "false"
    for args in (
        [sys.executable, "-c", "from flows.setup import ensure_work_pool; ensure_work_pool()"],
        [sys.executable, "-m", "prefect", "deploy", "--all"],
    ):
        done = run_process(args, env=env, cwd=REPO)
        assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    answer = httpx.get(
        f"{prefect_server.api_url}/deployments/name/monthly-posts/monthly", timeout=30
    )
    answer.raise_for_status()
    made = answer.json()
    yield Deployment(prefect_server, made["id"], made["parameter_openapi_schema"]["properties"])


def shown(text: str) -> str:
    """Text as a form shows it: whitespace collapsed, without markdown's backticks (v1 renders
    `code`, v2 shows the backticks)."""
    return " ".join(text.replace("`", "").split())


@pytest.mark.parametrize("ui", ["v1", "v2"])
def test_the_run_form_shows_what_each_parameter_means(
    ui: str, deployment: Deployment, tmp_path: Path
) -> None:
    playwright = pytest.importorskip("playwright.sync_api")
    # Every parameter of the flow, those named above first.
    names = [*MUST_SAY, *(n for n in deployment.parameters if n not in MUST_SAY)]
    described = {n: deployment.parameters.get(n, {}).get("description") or "" for n in names}

    base = deployment.server.ui_url
    url = {
        "v1": f"{base}/deployments/deployment/{deployment.id}/run",
        "v2": f"{base}/v2/deployments/deployment/{deployment.id}/run",
    }[ui]
    with browser_page(playwright, tmp_path / f"run-form-failure-{ui}.png") as page:
        page.goto(url)
        for name, description in described.items():
            label, says = parameter(page, ui, name)
            playwright.expect(label).to_be_visible()
            playwright.expect(
                says, f"{name}: no description shown (no Args: entry in the docstring?)"
            ).to_be_visible()
            seen = shown(says.inner_text())
            for phrase in MUST_SAY.get(name, []):
                assert phrase in seen, f"{name}: the form does not say {phrase!r}: {seen!r}"
            # All of what Prefect read from the docstring's Args:, not a part of it.
            assert seen == shown(description), f"{name}: the form says {seen!r}"


def parameter(page: Any, ui: str, name: str) -> tuple[Any, Any]:
    """One parameter's label in the form, and the description shown with it. Every parameter
    has a default (null), so each is labelled `name (Optional)`."""
    text = re.compile(rf"^{re.escape(name)} \(Optional\)$")
    if ui == "v1":
        # <div class="p-label schema-form-property">: a header with the label, a description.
        label = page.locator(".schema-form-property__label").filter(has_text=text)
        block = page.locator(".schema-form-property").filter(has=label)
        return label, block.locator(".schema-form-property__description")
    # v2: <div><label>name (Optional)</label><p>description</p></div>
    label = page.locator("label").filter(has_text=text)
    return label, label.locator("xpath=following-sibling::p")
