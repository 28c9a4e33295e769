"""Screenshot the Race tab's (or the Live tab's) default run on a running app (README pictures):

    .venv/bin/python app.py &          # the embedded pair; wait for "pair ready"
    .venv/bin/python bench/screenshot.py --url http://127.0.0.1:7860 --out assets/race.png
    .venv/bin/python bench/screenshot.py --tab live --out assets/screenshot.png

Opens the page in headless Debian Chromium, presses Start race (or Generate) with the page's
defaults, waits for the end, and saves a PNG. Prints the lane table (or the status line).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.chromium import DONE_OR_ERROR, browsers  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:7860")
    p.add_argument("--out", default="assets/race.png")
    p.add_argument("--timeout", type=int, default=900, help="seconds to wait for the race")
    p.add_argument("--tab", choices=["race", "live"], default="race")
    p.add_argument("--max-new-tokens", type=int, help="Live tab: the run's max new tokens (default: the page's)")
    p.add_argument("--full-page", action="store_true", help="Live tab: the whole page, not the first screen")
    p.add_argument("--temperature", type=float, help="Live tab: the run's temperature (default: the page's)")
    args = p.parse_args()
    with browsers(1, timeout_ms=args.timeout * 1000) as (page,):
        page.set_viewport_size({"width": 1400, "height": 1000})
        page.goto(args.url)
        if args.tab == "live":
            page.wait_for_selector("#sq-generate")
            if args.max_new_tokens:
                page.locator("#sq-max-new input").fill(str(args.max_new_tokens))
            if args.temperature is not None:
                box = page.locator("#sq-temperature input[type=number]")
                box.fill(str(args.temperature))
                box.press("Enter")
            page.click("#sq-generate")
            page.wait_for_function(DONE_OR_ERROR, timeout=args.timeout * 1000)
            page.wait_for_timeout(1500)
            print(page.locator("#sq-live-status").inner_text())
            page.evaluate("window.scrollTo(0, 0)")
            page.screenshot(path=args.out, full_page=args.full_page)
            print(f"saved {args.out}")
            return 0
        page.get_by_role("tab", name="Race").click()
        page.wait_for_selector("#sq-race-start")
        page.click("#sq-race-start")
        page.wait_for_function("() => { const v = document.querySelector('#sq-race-verdict');"
                               " return v && v.innerText.trim().length > 0; }", timeout=args.timeout * 1000)
        page.wait_for_timeout(1500)  # the last chart update
        print(page.locator("#sq-race-table").inner_text())
        print(page.locator("#sq-race-verdict").inner_text())
        page.locator("#sq-race-verdict").scroll_into_view_if_needed()
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=args.out, full_page=True)
    print(f"saved {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
