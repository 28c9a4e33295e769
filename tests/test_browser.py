"""The page in headless Chromium: load it, run a short generation, wait for the tree, save a
screenshot. Fails if the page shows an error or no tree. Skipped only without /usr/bin/chromium
(CI installs Debian's `chromium`). Set SEQUOIA_SCREENSHOT=path to keep the screenshot."""
import os
import shutil
import socket
import tempfile
from pathlib import Path

import pytest

from tests.tiny import tiny_pair_dirs

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--no-first-run", "--disable-sync", "--disable-quic", "--disable-dev-shm-usage"]

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed "
                                "(apt-get install -y chromium)")


@pytest.fixture(scope="module")
def url():
    from app import create_app, launch_options
    from engine.worker import Worker
    draft, target = tiny_pair_dirs("llama")
    worker = Worker(measure_prompts=["hello world", "a tree of tokens"], measure_tokens=24, profile_budget=8)
    demo, _ = create_app(str(draft), str(target), "cpu", "float32", worker=worker, load=False)
    worker.load(str(draft), str(target), "cpu", "float32").wait(120)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
                **launch_options())
    yield f"http://127.0.0.1:{port}/"
    demo.close()
    worker.close()


@pytest.fixture()
def page():
    sync_api = pytest.importorskip("playwright.sync_api")
    profile = tempfile.mkdtemp(prefix="sequoia-chromium-")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, headless=True,
                                                       args=FLAGS, viewport={"width": 1280, "height": 800})
        try:
            pg = browser.new_page()
            pg.set_default_timeout(60_000)
            yield pg
        finally:
            browser.close()
            shutil.rmtree(profile, ignore_errors=True)


def errors_on(pg) -> list[str]:
    return [t.inner_text() for t in pg.locator('[data-testid="toast-body"]').all()]


def test_live_generation_draws_the_tree(url, page, tmp_path):
    page.goto(url)
    page.wait_for_selector("#sq-generate")
    page.locator("#sq-max-new input").fill("24")
    page.click("#sq-generate")
    page.wait_for_function(
        "() => { const s = document.querySelector('#sq-live-status');"
        " return s && (s.innerText.includes('Done') || s.innerText.includes('✗'))"
        " || document.querySelector('[data-testid=\"toast-body\"]'); }")
    page.wait_for_timeout(800)  # let the last figure render
    assert not errors_on(page), errors_on(page)
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
