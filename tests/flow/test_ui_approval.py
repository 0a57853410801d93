"""A person answers the open breaker's question in the Prefect UI, in headless Chromium (R19).

Everything is real and out of process: `prefect server start` (UI on; on a fresh PostgreSQL
database where one is reachable, else SQLite under its home), the simulator with every create
failing, `postledger run` pointed at that server, and Debian's `chromium` driven by Playwright.
The breaker opens, the run pauses; the simulator is repaired; the test opens the run's page and
presses Resume. Before anything is chosen, the dialog must show the month's spend so far and
what a continue may cost (the probe batch's estimate, computed here from the ledger and the
run's settings), the decision must have no preselected answer, and a submit without one must
be refused (the run stays paused, nobody has answered). Then it chooses continue, writes a
note, submits; the run goes on to `Completed`.
While it waits, the run's log as the server holds it for the UIs says each transport fault the
breaker counted in one WARNING line, with no ERROR and no traceback (a handled fault is no
crash), and the v1 page shows those warnings and no traceback.
Both UIs that Prefect 3.9 serves are driven: `v1` (Vue, `/runs/flow-run/<id>`, where the run's
log links) and `v2` (React, `/v2/...`, the default for the dashboard).

Skipped where no Chromium is installed (`.ci/run` installs Debian's).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from postledger.guards.estimates import estimate
from postledger.guards.spend import money
from postledger.ledger import Ledger
from postledger.record.models import Answer, BreakerLevel, PostStatus
from postledger.settings import Settings
from tests.support.browser import browser_page, needs_chromium
from tests.support.months import posts_file
from tests.support.prefect_server import PrefectServer
from tests.support.processes import spawn, stop
from tests.support.simulators import Sim, start_sim

MONTH = "2026-10"
POSTS = 8
NOTE = "upstream repaired; answered in the Prefect UI"
# What the form says (v1: under the field; v2: a toast of the server's refusal) when it is
# submitted with no decision.
REQUIRED = "'decision' is a required property"

pytestmark = [
    needs_chromium,
    pytest.mark.processes,
    pytest.mark.xdist_group("prefect_server"),  # one real server per pytest session, not per worker
]


@pytest.fixture
def failing_sim(monkeypatch: pytest.MonkeyPatch) -> Iterator[Sim]:
    """Every create is refused with a connection reset (nothing made, nothing charged)."""
    yield from start_sim(monkeypatch, latency=0.3, faults="create:reset@1")


def wait_for(what: str, check: Callable[[], Any], timeout: float, why: Callable[[], str]) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{why()}")


def flow_run_state(api_url: str, flow_run_id: str) -> str:
    state = httpx.get(f"{api_url}/flow_runs/{flow_run_id}", timeout=10).json().get("state")
    return str(state["type"]) if state else "NONE"


@pytest.mark.parametrize("ui", ["v1", "v2"])
def test_breaker_question_answered_in_the_prefect_ui(
    ui: str,
    prefect_server: PrefectServer,
    failing_sim: Sim,
    ledger: Ledger,
    ledger_url: str,
    tmp_path: Path,
) -> None:
    playwright = pytest.importorskip("playwright.sync_api")
    prefect_api = prefect_server.api_url
    posts = posts_file(
        tmp_path / f"{MONTH}.jsonl", POSTS, ids="p{:02d}", text="Why does export fail, case {}?"
    )
    env = {
        **prefect_server.client_env(tmp_path / "prefect-client"),
        "PREFECT_LOGGING_LEVEL": "INFO",
        "POSTLEDGER_DATABASE_URL": ledger_url,
        "POSTLEDGER_UPSTREAM_URL": failing_sim.url,
        "POSTLEDGER_REQUEST_RETRIES": "0",  # one reset = one final transport failure
        "POSTLEDGER_MAX_BATCH_POSTS": "2",
        "POSTLEDGER_POLL_WAIT": "0.5",
        "POSTLEDGER_APPROVAL_POLL": "0.5",
        "POSTLEDGER_APPROVAL_TIMEOUT": "300",
    }
    run_log = tmp_path / "run.log"
    with open(run_log, "wb") as out:
        run = spawn(
            [sys.executable, "-m", "cli", "run", "--month", MONTH, "--posts", str(posts)],
            env=env,
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )

    def logs() -> str:
        return (
            f"--- postledger run (exit {run.poll()}) ---\n"
            f"{run_log.read_text(errors='replace')[-8000:]}\n"
            f"--- prefect server ({prefect_server.database}) ---\n{prefect_server.log()[-4000:]}"
        )

    try:
        question = wait_for(
            "the paused run's question", lambda: ledger.approvals.waiting(MONTH), 240, logs
        )
        flow_run_id = question.flow_run_id
        assert flow_run_id and question.prefect_api_url == prefect_api
        wait_for("Paused", lambda: flow_run_state(prefect_api, flow_run_id) == "PAUSED", 90, logs)
        assert creates(failing_sim) >= 2 and failing_sim.charges() == []

        stake = at_stake(ledger, env)
        # The transport faults the breaker counted were handled: the run's log, as the UIs
        # show it, says each in one WARNING line, with no ERROR and no traceback.
        # (A run sends its log lines every few seconds, in batches: waited for until the
        # lines of both handled faults are there, not only the first.)
        wait_for(
            "the run's log on the server",
            lambda: (
                sum(
                    bool(log["task_run_id"]) and "Handled:" in log["message"]
                    for log in run_logs(prefect_api, flow_run_id)
                )
                >= 2
            ),
            60,
            logs,
        )
        said = run_logs(prefect_api, flow_run_id)
        assert [log["message"] for log in said if log["level"] >= 40] == []
        assert not [log for log in said if "Traceback" in log["message"]]
        handled = [log for log in said if "Handled:" in log["message"]]
        assert len(handled) >= 2 and {log["level"] for log in handled} == {30}, handled

        def still_waiting() -> None:
            """Nothing was answered: the run is paused, the ledger's question still open."""
            assert flow_run_state(prefect_api, flow_run_id) == "PAUSED"
            waiting = ledger.approvals.waiting(MONTH)
            assert waiting is not None and waiting.id == question.id, waiting
            assert waiting.answer is None

        # The upstream is repaired; a person answers in the UI.
        failing_sim.clear_faults()
        answer_in_the_ui(
            playwright, ui, prefect_server.ui_url, flow_run_id, tmp_path, stake, still_waiting
        )

        wait_for(
            "Completed",
            lambda: flow_run_state(prefect_api, flow_run_id) == "COMPLETED",
            180,
            logs,
        )
        assert run.wait(timeout=90) == 0, logs()
    finally:
        stop(run)

    # What the dialog showed is the question's markdown, as the run recorded it.
    assert all(line in question.question for line in stake.markdown()), question.question
    assert {p.status for p in ledger.posts(MONTH)} == {PostStatus.COMPLETED}
    (asked,) = ledger.approvals.approvals(MONTH)
    assert asked.flow_run_id == flow_run_id
    assert (asked.answer, asked.note, asked.answered_by) == (
        Answer.CONTINUE,
        NOTE,
        "the paused run's form",
    )
    # The breaker opened, and the UI's answer is what moved it to probe.
    upstream = failing_sim.url.removeprefix("http://")
    moves = [(e.from_level, e.to_level, e.why) for e in ledger.approvals.history(upstream)]
    assert (BreakerLevel.PROBE, BreakerLevel.OPEN) in [(a, b) for a, b, _ in moves]
    (answered,) = [m for m in moves if m[:2] == (BreakerLevel.OPEN, BreakerLevel.PROBE)]
    assert "the paused run's form" in answered[2] and NOTE in answered[2]
    assert ledger.approvals.breaker(upstream).level is BreakerLevel.NORMAL
    charged = Counter(p for charge in failing_sim.charges() for p in charge["post_ids"])
    assert set(charged) == {f"p{i:02d}" for i in range(POSTS)}
    assert [p for p, n in charged.items() if n > 1] == []  # no post paid twice


def run_logs(api_url: str, flow_run_id: str) -> list[dict[str, Any]]:
    """The flow run's logs, its task runs' included, as the server holds them for the UIs."""
    body = {"logs": {"flow_run_id": {"any_": [flow_run_id]}}, "limit": 200}
    answer = httpx.post(f"{api_url}/logs/filter", json=body, timeout=10)
    answer.raise_for_status()
    return list(answer.json())


def creates(sim: Sim) -> int:
    return int(sim.stats()["requests"].get("create", 0))


@dataclass(frozen=True)
class AtStake:
    """The money a person must see before answering: the month's spend so far (micro-units
    by state), and the estimate of the batch a continue sends first."""

    spend: dict[str, int]
    batch_id: str
    cost: int

    def _so_far(self) -> str:
        confirmed, possible, wasted = (
            money(self.spend[k]) for k in ("confirmed", "possible", "wasted")
        )
        return f"spend confirmed {confirmed}, possible {possible}, wasted {wasted}"

    def markdown(self) -> list[str]:
        """As the question's markdown says it."""
        return [
            f"**{MONTH} so far**: {self._so_far()}",
            f"the first costs about {money(self.cost)} (`{self.batch_id}`)",
        ]

    def rendered(self) -> list[str]:
        """As the dialog shows the markdown (the UIs render bold and code as such)."""
        return [
            f"{MONTH} so far: {self._so_far()}",
            f"the first costs about {money(self.cost)} ({self.batch_id})",
        ]


def at_stake(ledger: Ledger, env: dict[str, str]) -> AtStake:
    """What is at stake while the run is paused, from the ledger and the run's own settings
    (its POSTLEDGER_* variables): its price table, model and analysis."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            if name.startswith("POSTLEDGER_"):
                patch.setenv(name, value)
        settings = Settings()
    price = settings.price()
    assert price is not None, f"no price for {settings.model}: nothing to show"
    batch_id, *_ = ledger.next_to_start(MONTH, 1)  # the probe batch a continue sends
    request_text = settings.analysis_in_use().request_text
    cost = estimate(price, request_text, [p.text for p in ledger.posts_of(batch_id)])
    assert cost > 0
    return AtStake(ledger.spend_totals(MONTH), batch_id, cost)


def answer_in_the_ui(
    playwright: Any,
    ui: str,
    base_url: str,
    flow_run_id: str,
    tmp: Path,
    stake: AtStake,
    still_waiting: Callable[[], None],
) -> None:
    """Open the paused run's page, press Resume; see the money at stake, no answer chosen,
    a submit without one refused (`still_waiting` checks nothing was answered); choose
    continue, write the note, submit. A screenshot is left in `tmp` when a step fails."""
    with browser_page(playwright, tmp / f"ui-failure-{ui}.png") as page:
        if ui == "v1":
            url = f"{base_url}/runs/flow-run/{flow_run_id}"
            _answer_in_v1(playwright, page, url, stake, still_waiting)
        else:
            url = f"{base_url}/v2/runs/flow-run/{flow_run_id}"
            _answer_in_v2(playwright, page, url, stake, still_waiting)


def _answer_in_v1(
    playwright: Any, page: Any, url: str, stake: AtStake, still_waiting: Callable[[], None]
) -> None:
    """The Vue UI (the page the run's own log links to): Resume in the header, a modal with the
    question's markdown and a form built from `BreakerAnswer`'s schema."""
    page.goto(url)
    # The run's log, shown on its page: the handled faults as plain warnings, no traceback.
    playwright.expect(page.get_by_text("Handled:", exact=False).first).to_be_visible()
    playwright.expect(page.get_by_text("Traceback", exact=False)).to_have_count(0)
    page.get_by_role("button", name="Resume", exact=True).click()
    dialog = page.get_by_role("dialog").filter(has_text="Resume Flow Run")
    dialog.get_by_text("is open", exact=False).first.wait_for()  # the question, as markdown
    for line in stake.rendered():
        playwright.expect(dialog).to_contain_text(line)

    field = dialog.locator(".schema-form-property").filter(has_text="Decision")
    decision = field.locator("button.p-select-button__control")
    # Nothing chosen: the select shows its empty message, no value.
    playwright.expect(decision.locator(".p-select__empty-message")).to_have_count(1)
    playwright.expect(decision).to_have_text("")
    # Submitted so, the form refuses it itself (nothing is sent): the message under the field.
    dialog.get_by_role("button", name="Submit", exact=True).click()
    playwright.expect(field.get_by_text(REQUIRED)).to_be_visible()
    playwright.expect(dialog).to_be_visible()
    still_waiting()

    # This select opens from the keyboard: a click opens its options outside the modal, and
    # the modal's focus trap takes the focus back, which closes them at once.
    decision.focus()
    page.keyboard.press("ArrowDown")
    options = page.get_by_role("listbox").get_by_role("option")
    options.first.wait_for()
    assert options.all_inner_texts() == ["continue", "stop"]
    options.filter(has_text="continue").click()
    playwright.expect(decision).to_have_text("continue")

    dialog.locator(".schema-form-property").filter(has_text="Note").locator("textarea").fill(NOTE)
    dialog.get_by_role("button", name="Submit", exact=True).click()
    # The UI mounts two toast containers: the same toast shows in both.
    playwright.expect(page.get_by_text("Flow run resumed").first).to_be_visible()


def _answer_in_v2(
    playwright: Any, page: Any, url: str, stake: AtStake, still_waiting: Callable[[], None]
) -> None:
    """The React UI (Prefect's default for the dashboard): Resume in the run's menu, a dialog
    with labelled fields."""
    page.goto(url)
    page.get_by_role("button", name="Open menu").first.click()
    page.get_by_role("menuitem", name="Resume").click()
    dialog = page.get_by_role("dialog", name="Resume Flow Run")
    dialog.get_by_text("is open", exact=False).first.wait_for()  # the question, as markdown
    for line in stake.rendered():
        playwright.expect(dialog).to_contain_text(line)

    decision = dialog.get_by_role("button", name="Select Decision")
    playwright.expect(decision).to_have_text("Select")  # the placeholder: nothing chosen
    # Submitted so, the form sends it; the server checks the input against the form's schema,
    # refuses it, and the UI shows why in a toast; the dialog stays open.
    dialog.get_by_role("button", name="Resume", exact=True).click()
    playwright.expect(page.get_by_text(REQUIRED).first).to_be_visible()
    playwright.expect(dialog).to_be_visible()
    still_waiting()

    decision.click()
    options = page.get_by_role("option")
    options.first.wait_for()
    assert options.all_inner_texts() == ["continue", "stop"]
    options.filter(has_text="continue").click()
    playwright.expect(decision).to_have_text("continue")

    dialog.get_by_label("Note (Optional)").fill(NOTE)
    dialog.get_by_role("button", name="Resume", exact=True).click()
    playwright.expect(page.get_by_text("Flow run resumed").first).to_be_visible()
