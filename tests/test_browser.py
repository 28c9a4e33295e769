"""The page in headless Chromium: load it, run a short generation, wait for the tree, save a
screenshot. Fails if the page shows an error or no tree. Skipped only without /usr/bin/chromium
(CI installs Debian's `chromium`). Set SEQUOIA_SCREENSHOT=path to keep the screenshot."""
import os
import shutil

import pytest

from tests.app_server import launch
from tests.chromium import DONE_OR_ERROR, browsers, needs_chromium, page_errors
from tests.tiny import tiny_pair_dirs

pytestmark = needs_chromium


@pytest.fixture(scope="module")
def url():
    demo, ctx, url = launch(*tiny_pair_dirs("llama"))
    yield url
    demo.close()
    ctx.worker.close()


@pytest.fixture()
def page():
    with browsers(1) as (pg,):
        yield pg


def test_live_generation_draws_the_tree(url, page, tmp_path):
    page.goto(url)
    page.wait_for_selector("#sq-generate")
    page.locator("#sq-max-new input").fill("24")
    page.click("#sq-generate")
    page.wait_for_function(DONE_OR_ERROR)
    page.wait_for_timeout(800)  # let the last figure render
    assert not page_errors(page), page_errors(page)
    status = page.locator("#sq-live-status").inner_text()
    assert "Done" in status, status
    markers = page.locator("#sq-tree .scatterlayer .trace .points path").count()
    assert markers >= 2, f"no tree drawn ({markers} markers)"
    assert "Step " in page.locator("#sq-tree").inner_text()
    assert page.locator("#sq-text .sq-step").count() > 2  # text shaded by step
    page.evaluate("window.scrollTo(0, 0)")
    shot = tmp_path / "live.png"
    page.screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000
    keep = os.environ.get("SEQUOIA_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)
