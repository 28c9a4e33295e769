"""Headless Debian Chromium for the browser tests, driven by Playwright. Tests that use it are
skipped only where /usr/bin/chromium is missing (CI installs Debian's `chromium`)."""
from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--no-first-run", "--disable-sync", "--disable-quic", "--disable-dev-shm-usage"]

needs_chromium = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed "
                                    "(apt-get install -y chromium)")

# true once the Live tab's run is done, stopped or failed, or the page shows an error message
DONE_OR_ERROR = ("() => { const s = document.querySelector('#sq-live-status');"
                 " return s && (s.innerText.includes('Done') || s.innerText.includes('✗')"
                 " || s.innerText.includes('■ Stopped:') || s.innerText.includes('Stopped before'))"
                 " || document.querySelector('[data-testid=\"toast-body\"]'); }")


def page_errors(pg) -> list[str]:
    return [t.inner_text() for t in pg.locator('[data-testid="toast-body"]').all()]


def open_tab(pg, name: str, tries: int = 3) -> None:
    """Click the tab `name` until it is the selected one. A CI run once timed out waiting 60 s for
    a button of the Models tab right after its tab was clicked (not seen locally in 5 + 1 runs);
    a click that lands while the page re-renders after an update may be lost, so it is tried
    again, and a tab that never opens is said as such."""
    tab = pg.get_by_role("tab", name=name)
    for _ in range(tries):
        tab.click()
        try:
            pg.wait_for_function("(name) => [...document.querySelectorAll('[role=tab]')].some("
                                 "t => t.innerText.trim() === name && t.getAttribute('aria-selected') === 'true')",
                                 arg=name, timeout=5_000)
            return
        except Exception:  # noqa: BLE001 - playwright's TimeoutError: click again
            continue
    raise AssertionError(f"the {name} tab did not open after {tries} clicks")


@contextlib.contextmanager
def browsers(count: int, timeout_ms: int = 60_000):
    """`count` pages, each in its own Chromium process with its own fresh profile (so each is
    its own Gradio session)."""
    sync_api = pytest.importorskip("playwright.sync_api")
    profiles = [tempfile.mkdtemp(prefix="sequoia-chromium-") for _ in range(count)]
    with sync_api.sync_playwright() as p:
        opened = []
        try:
            for profile in profiles:
                opened.append(p.chromium.launch_persistent_context(
                    profile, executable_path=CHROMIUM, headless=True, args=FLAGS,
                    viewport={"width": 1280, "height": 800}))
            pages = [b.new_page() for b in opened]
            for pg in pages:
                pg.set_default_timeout(timeout_ms)
            yield pages
        finally:
            for b in opened:
                b.close()
            for profile in profiles:
                shutil.rmtree(profile, ignore_errors=True)
