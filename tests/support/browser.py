"""A browser for the Prefect UI: Debian's Chromium, headless, driven by Playwright."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# Debian's Chromium (`.ci/run` installs it), driven by Playwright: no browser download.
CHROMIUM = "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else shutil.which("chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no Chromium installed (`apt-get install chromium`; .ci/run installs it)",
)

# A loaded two-core machine answers a click in seconds, not Playwright's default 5 s for an
# `expect`: every wait in a UI test is given this long.
UI_WAIT_MS = 30_000


@contextlib.contextmanager
def browser_page(playwright: Any, failure_screenshot: Path) -> Iterator[Any]:
    """A headless Chromium page whose every wait (actions and `expect`) lasts `UI_WAIT_MS`;
    a screenshot of the page is left at `failure_screenshot` when the block fails."""
    playwright.expect.set_options(timeout=UI_WAIT_MS)
    with playwright.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(UI_WAIT_MS)
        try:
            yield page
        except Exception:
            page.screenshot(path=str(failure_screenshot), full_page=True)
            raise
        finally:
            browser.close()
