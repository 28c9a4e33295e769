"""The page in headless Chromium: load it, run a short generation, wait for the tree, save a
screenshot. Fails if the page shows an error or no tree. Skipped only without /usr/bin/chromium
(CI installs Debian's `chromium`). Set SEQUOIA_SCREENSHOT=path to keep the screenshot."""
import os
import re
import shutil
import time

import pytest

from tests.app_server import served_tiny_pair
from tests.chromium import DONE_OR_ERROR, browsers, needs_chromium, open_tab, page_errors
from tests.robustness.served import wait_for

pytestmark = needs_chromium


@pytest.fixture(scope="module")
def served():
    for app in served_tiny_pair():   # (url, ctx): closed when the module is done
        yield app["url"], app["ctx"]


@pytest.fixture()
def page():
    with browsers(1) as (pg,):
        yield pg


def plans_asked(ctx, monkeypatch, what) -> list:
    """What each plan the page asks the worker for is for: `what(spec, settings, kwargs)` per call."""
    asked, original = [], ctx.worker.quick_plan

    def spy(*args, **kwargs):
        asked.append(what(args[0], args[1], kwargs))
        return original(*args, **kwargs)

    monkeypatch.setattr(ctx.worker, "quick_plan", spy)
    return asked


def open_page(page, url) -> None:
    page.goto(url)
    page.wait_for_selector("#sq-generate")


def first_plan_marked(ctx, before) -> bool:
    """Whether the page opened after the sessions `before` has its first plan made and marked, so
    the header timer does not plan again (sessions of earlier tests' pages do not count)."""
    new = [s for key, s in list(ctx.sessions._items.items()) if key not in before]
    return bool(new) and all(getattr(s, "plan_pair", None) for s in new)


def run_ends(page, ctx, seconds: float = 180) -> None:
    """Wait for the Live run to end. The first run in a test process's fresh cache profiles the
    device and measures the acceptance vector first, and beside the other test process that once
    took more than Playwright's 60 s (CI, 2026-12-05); on a timeout, say what the page and the
    worker were doing."""
    try:
        page.wait_for_function(DONE_OR_ERROR, timeout=seconds * 1000)
    except Exception as exc:  # playwright's TimeoutError
        raise AssertionError(f"the run did not end in {seconds:.0f} s: status line "
                             f"{page.locator('#sq-live-status').inner_text()!r}, worker {ctx.worker.status()}") from exc


def test_live_generation_draws_the_tree(served, page, tmp_path):
    url, ctx = served
    before = set(ctx.sessions._items)
    open_page(page, url)
    assert wait_for(lambda: first_plan_marked(ctx, before), 60)   # the page is wired up and has planned
    sess = next(s for key, s in list(ctx.sessions._items.items()) if key not in before)
    # a DP tree, not the device's choice (autoregressive for the tiny pair: a tree of one node
    # has no acceptance chart to draw, just a line saying nothing is drafted)
    first = sess.plan
    page.locator("#sq-hw input").click()
    assert wait_for(lambda: sess.plan is not first, 60)
    shown = sess.plan
    page.locator("#sq-max-new input").fill("24")
    # the box re-plans on blur; a click on Generate would blur it too, and a short run could end
    # before that plan, whose "Planned ..." line would then replace the run's "Done" line
    page.locator("#sq-max-new input").blur()
    assert wait_for(lambda: sess.plan is not shown, 60)
    page.click("#sq-generate")
    run_ends(page, ctx)
    page.wait_for_timeout(800)  # let the last figure render
    assert not page_errors(page), page_errors(page)
    status = page.locator("#sq-live-status").inner_text()
    assert "Done" in status, status
    markers = page.locator("#sq-tree .scatterlayer .trace .points path").count()
    assert markers >= 2, f"no tree drawn ({markers} markers)"
    assert "Step " in page.locator("#sq-tree").inner_text()
    assert page.locator("#sq-text .sq-step").count() > 2  # text shaded by step
    # the acceptance chart's legend (prior, observed, posterior: several lines in this column) sat
    # over its axis title when placed at a fraction of the plot area's height
    legend, axis_title = (page.locator(f"#sq-acc {css}").first.bounding_box() for css in (".legend", ".xtitle"))
    assert legend and axis_title and legend["y"] >= axis_title["y"] + axis_title["height"] - 1, (legend, axis_title)
    page.evaluate("window.scrollTo(0, 0)")
    shot = tmp_path / "live.png"
    page.screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000
    keep = os.environ.get("SEQUOIA_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)
    # Replay: a step typed beyond the run is its last step, a fraction is rounded, an emptied box
    # gets its step back (a helper's walk-through: a toast beside a box still reading 999; step 2
    # shown beside 2.5; an emptied box reset to 1 while step 2 stayed on screen)
    steps = int(re.search(r"in (\d+) steps", status)[1])
    assert steps >= 3, status   # (step 2 must differ from the last)
    box = page.locator("#sq-replay input[type=number]")
    for typed, shown in (("1.6", 2), ("999", steps), ("", steps)):
        box.fill(typed)
        box.press("Enter" if typed else "Tab")
        page.wait_for_function(f"document.querySelector('#sq-live-status').innerText.includes("
                               f"'Replaying step {shown} of {steps}')", timeout=10_000)
        page.wait_for_timeout(500)
        # the box and the slider Gradio reads (an emptied box left the slider at 1 before)
        assert box.input_value() == str(shown), (typed, box.input_value())
        assert page.locator("#sq-replay input[type=range]").input_value() == str(shown), typed
    assert not page_errors(page), page_errors(page)


def test_picking_an_example_re_plans_for_it(served, page, monkeypatch):
    """Picking an example puts its prompt in the box and re-plans for it (its kind's vector, its
    memory): a pick never blurs the prompt box, so the plan used to stay the old prompt's. The
    dropdown names the example shown, and picking it again restores an edited prompt."""
    url, ctx = served
    asked = plans_asked(ctx, monkeypatch, lambda spec, settings, kwargs: kwargs.get("prompt"))
    first, other = ctx.prompts[0], ctx.prompts[-1]
    open_page(page, url)
    assert page.locator("#sq-example input").input_value() == first["title"]

    def pick(title):
        page.locator("#sq-example input").click()
        page.get_by_role("option", name=title).click()

    pick(other["title"])
    page.wait_for_function(f"document.querySelector('#sq-prompt textarea').value === {other['prompt']!r}")
    assert wait_for(lambda: other["prompt"] in asked, 20), asked
    page.locator("#sq-prompt textarea").fill("an edited prompt")
    pick(other["title"])   # the one shown
    page.wait_for_function(f"document.querySelector('#sq-prompt textarea').value === {other['prompt']!r}")
    assert not page_errors(page), page_errors(page)


def test_the_learning_switch_re_plans_the_shown_plan(served, page, monkeypatch):
    """Switching learning off (or on) re-plans the shown plan with (or without) the learned
    evidence, as a slider move would; it used to leave the plan of the other setting on screen."""
    url, ctx = served
    asked = plans_asked(ctx, monkeypatch, lambda spec, settings, kwargs: kwargs.get("learn"))
    before = set(ctx.sessions._items)
    open_page(page, url)
    # the page's own first plan (learning on) has been made and marked, so the header timer does not plan again
    assert wait_for(lambda: asked and first_plan_marked(ctx, before), 20), asked
    asked.clear()
    page.locator("#sq-learn input").click()

    def seen() -> tuple:   # for the message: the box, each session's switch, the plans asked for
        return (page.locator("#sq-learn input").is_checked(),
                [getattr(s, "learn", None) for s in list(ctx.sessions._items.values())], asked)

    assert wait_for(lambda: False in asked, 20), seen()   # failed once under load with asked [True]
    page.locator("#sq-learn input").click()
    assert wait_for(lambda: True in asked, 20), asked
    assert not page_errors(page), page_errors(page)


def test_the_planner_tab_redraws_when_the_device_profile_is_replaced(served, page):
    """A profile timed again (in the background when the cached one was noisy, engine/reprofile.py)
    reaches an open Planner tab without a tab select: the header tick's plan changes the page's
    profile_shown state, whose change event redraws the tab."""
    from dataclasses import replace

    from engine import profiler
    url, ctx = served
    before = set(ctx.sessions._items)
    open_page(page, url)
    assert wait_for(lambda: first_plan_marked(ctx, before), 20)
    open_tab(page, "Planner")
    caption = page.get_by_text("draft/target cost for one token")
    caption.wait_for()
    original = ctx.worker.cached_profile()
    assert original is not None and "timed again in this test" not in caption.inner_text()
    try:
        time.sleep(0.01)   # a new modification time
        profiler.save_profile(ctx.worker.pair, replace(original, measured_at="timed again in this test"))
        assert wait_for(lambda: "timed again in this test" in caption.inner_text(), 20), (
            caption.inner_text(), ctx.worker.profile_stamp(),
            [(s.plan_profile, s.running, s.aux) for k, s in list(ctx.sessions._items.items()) if k not in before])
    finally:
        profiler.save_profile(ctx.worker.pair, original)
    assert not page_errors(page), page_errors(page)


def test_a_value_no_plan_can_have_takes_the_old_plan_down(served, page):
    """Depth 1 for a DP tree: the error toast came, but the plan line kept the last plan and the
    status said it was "used by the next run" (Generate was refused). Both now say there is no plan,
    and the plan comes back with a value that has one; hardware-aware, depth 1 is a bound: n=1."""
    url, ctx = served
    before = set(ctx.sessions._items)
    open_page(page, url)
    # (in a fresh cache the first plan profiles the device and measures a vector first)
    assert wait_for(lambda: first_plan_marked(ctx, before), 120)
    page.locator("#sq-hw input").click()   # a DP tree of the budget and depth asked
    box = page.locator("#sq-depth input[type=number]")
    box.fill("1")
    box.press("Tab")
    page.wait_for_function("document.querySelector('#sq-plan').innerText.includes('No plan for these values')",
                           timeout=20000)
    assert "No plan until then" in page.locator("#sq-live-status").inner_text()
    page.locator("#sq-hw input").click()   # hardware-aware: at most 1 level, the root alone
    page.wait_for_function("document.querySelector('#sq-plan').innerText.includes('1 node, 1 level')",
                           timeout=20000)
    assert "used by the next run" in page.locator("#sq-live-status").inner_text()


def test_taking_the_recommended_sampling_re_plans_the_live_plan(served, page, monkeypatch):
    """The Models tab's button sets the Live tab's temperature, top-k and top-p; the Live plan
    follows them (values set by code fire no slider release, so it kept the old settings' plan)."""
    from app.models_tab import recommended_values
    url, ctx = served
    want = recommended_values(ctx.worker.describe().get("generation_defaults"))[0]
    asked = plans_asked(ctx, monkeypatch, lambda spec, settings, kwargs: settings.temperature)
    open_page(page, url)
    box = page.locator("#sq-temperature input[type=number]")
    box.fill("1.3")
    box.press("Tab")   # a typed value re-plans when the box is left
    assert wait_for(lambda: 1.3 in asked, 20), asked
    asked.clear()
    open_tab(page, "Models")
    page.click("#sq-use-recommended")
    assert wait_for(lambda: want in asked, 20), (want, asked)
    assert not page_errors(page), page_errors(page)
    # (the same tab) the Check buttons keep a button's height beside the mode's two choices: stretched
    # to the choices' height they were 100-120 px tall blocks
    load = page.locator("#sq-load").bounding_box()
    for button in ("#sq-check", "#sq-check-stop"):
        box = page.locator(button).bounding_box()
        assert box["height"] <= 1.25 * load["height"], (button, box, load)


def test_importing_a_second_tree_re_plans_the_live_plan(served, page, monkeypatch, tmp_path):
    """The first import switches the Live method to the imported tree (a change event re-plans);
    a second one leaves the method as it was, and the Live plan kept showing the first tree."""
    url, ctx = served
    asked = plans_asked(ctx, monkeypatch,
                        lambda spec, settings, kwargs: spec.tree.size if spec.kind == "tree" else None)
    small, large = tmp_path / "small.json", tmp_path / "large.json"
    small.write_text('{"parents": [-1, 0, 0]}')
    large.write_text('{"parents": [-1, 0, 1, 2, 3]}')
    open_page(page, url)
    open_tab(page, "Planner")
    page.locator("#sq-import input[type=file]").set_input_files(str(small))
    assert wait_for(lambda: 3 in asked, 20), asked
    page.locator("#sq-import button[aria-label='Clear']").first.click()
    page.locator("#sq-import input[type=file]").set_input_files(str(large))
    assert wait_for(lambda: 5 in asked, 20), asked
    # the Planner tab follows too (its plan line kept the Sequoia plan until the tab was selected again)
    page.wait_for_function("document.querySelector('#sq-tab-planner').innerText.includes('Imported tree n=5 d=5')",
                           timeout=20000)
    assert not page_errors(page), page_errors(page)
    bad = tmp_path / "bad.json"
    bad.write_text('{"parents": [0, 0]}')
    page.locator("#sq-import button[aria-label='Clear']").first.click()
    page.locator("#sq-import input[type=file]").set_input_files(str(bad))
    # a failed import says so, and that the tree before it stays (the earlier "Imported" line stayed up)
    page.wait_for_function("document.querySelector('#sq-tab-planner').innerText.includes('The tree imported "
                           "before (5 nodes) stays in use')", timeout=20000)
    # and the box is emptied for the next file (it kept the refused one, as if it were in use)
    page.wait_for_function("!document.querySelector('#sq-import').innerText.includes('bad.json')", timeout=20000)
    asked.clear()
    page.locator("#sq-import input[type=file]").set_input_files(str(small))
    assert wait_for(lambda: 3 in asked, 20), asked


def start_a_slow_run(page, url, monkeypatch) -> None:
    """Open the page and start a Live run that is still going a few seconds later: the tiny pair
    would finish 400 tokens before a test's next click, so each step waits 0.5 s for its tree (at
    0.2 s, under a constant extra load, a run could end before a slowed test's next look)."""
    from app.state import Session
    source = Session.tree_source

    def slow_steps(self, kind):
        newest = source(self, kind)
        return lambda: time.sleep(0.5) or newest()

    monkeypatch.setattr(Session, "tree_source", slow_steps)
    open_page(page, url)
    page.locator("#sq-hw input").click()   # a DP tree, not the device's choice (autoregressive for this pair)
    page.locator("#sq-max-new input").fill("400")
    page.click("#sq-generate")
    page.wait_for_function("document.querySelector('#sq-live-status').innerText.includes('step ')")


def test_an_example_picked_during_a_run_is_planned_for_once_the_run_ends(served, page, monkeypatch):
    """A pick while a run goes leaves the run's plan alone; once the run ends (here: stopped), the
    shown plan follows the example, and the run's summary and last tree stay on screen."""
    url, ctx = served
    asked = plans_asked(ctx, monkeypatch, lambda spec, settings, kwargs: kwargs.get("prompt"))
    other = ctx.prompts[-1]
    start_a_slow_run(page, url, monkeypatch)
    page.locator("#sq-example input").click()
    page.get_by_role("option", name=other["title"]).click()
    page.wait_for_function(f"document.querySelector('#sq-prompt textarea').value === {other['prompt']!r}")
    page.wait_for_timeout(500)
    assert any(s.running for s in list(ctx.sessions._items.values())), "the run ended before the pick"
    assert other["prompt"] not in asked   # the running job answers its own prompt, with its own plan
    page.click("#sq-stop")
    assert wait_for(lambda: other["prompt"] in asked, 30), asked
    page.wait_for_timeout(800)   # let the re-plan's update land
    # the run's summary and its last tree stay (Stop's reply may land after the run's last line:
    # its follow-up puts the summary back, test_a_stop_reply_landing_after_the_run_ended_...)
    page.wait_for_function("document.querySelector('#sq-live-status').innerText.includes('■ Stopped:')",
                           timeout=10_000)
    assert "Step " in page.locator("#sq-tree").inner_text()
    assert not page_errors(page), page_errors(page)


def test_a_temperature_moved_during_a_run_says_the_run_keeps_its_own_sampling(served, page, monkeypatch):
    """Only the tree reaches a running job. A helper typed T = 0 during a T = 0.7 run and read
    "the running job uses it from its next step", while the run went on sampling at 0.7."""
    from dataclasses import replace

    from engine import profiler
    url, ctx = served
    start_a_slow_run(page, url, monkeypatch)
    # the page measured T = 0 for its first plan; a copy at T = 0.7 lets the move plan at once
    greedy = [v for v in profiler.measured_vectors(ctx.worker.pair) if v.temperature == 0]
    profiler.save_acceptance(ctx.worker.pair, replace(greedy[0], temperature=0.7, sampler="sequoia"))
    box = page.locator("#sq-temperature input[type=number]")
    box.fill("0.7")
    box.press("Enter")
    # the plan line says it (the status line's note gives way to the next step's line at once)
    page.wait_for_function("document.querySelector('#sq-plan').innerText.includes('keeps its own "
                           "sampling (greedy (T = 0)); the new sampling applies to the next run')", timeout=20_000)
    page.click("#sq-stop")
    page.wait_for_function("document.querySelector('#sq-live-status').innerText.includes('■ Stopped:')",
                           timeout=20_000)
    assert "greedy (T = 0)" in page.locator("#sq-live-status").inner_text()   # what the run used
    assert not page_errors(page), page_errors(page)


def test_a_run_waiting_for_another_pages_job_says_so(served, page, monkeypatch):
    """Pressed while another page's run held the model, the status line kept the last run's words
    for as long as the wait lasted (Gradio's queue note did not show there)."""
    url, ctx = served
    start_a_slow_run(page, url, monkeypatch)   # the other page's run
    other = page.context.new_page()
    before = set(ctx.sessions._items)
    open_page(other, url)
    assert wait_for(lambda: first_plan_marked(ctx, before), 60)
    other.locator("#sq-max-new input").fill("8")
    other.locator("#sq-max-new input").blur()
    other.wait_for_timeout(500)
    other.click("#sq-generate")
    other.wait_for_function("document.querySelector('#sq-live-status').innerText.includes("
                            "'waiting: the model is busy with a Live run')", timeout=10_000)
    page.click("#sq-stop")
    run_ends(other, ctx)
    assert "Done" in other.locator("#sq-live-status").inner_text()
    assert not page_errors(other), page_errors(other)
    other.close()


def test_a_measurement_waiting_for_the_model_says_so(served, page, monkeypatch):
    """Measure pressed while a run held the model only greyed its button, saying nothing until
    that run ended (a helper's walk-through, behind a race); its caption now says what it waits for."""
    url, ctx = served
    start_a_slow_run(page, url, monkeypatch)
    asked = lambda: sum(sess.planner_views._asked for sess in list(ctx.sessions._items.values()))  # noqa: E731

    def redrawn(before: int) -> None:
        deadline = time.time() + 20
        while asked() == before and time.time() < deadline:
            time.sleep(0.1)
        assert asked() > before, "the Planner was not redrawn"
        time.sleep(2)   # for the redraw's output to land

    before = asked()
    open_tab(page, "Planner")
    page.wait_for_function("document.querySelector('#sq-acc-caption').innerText.trim().length > 0",
                           timeout=30_000)
    # the tab select's redraw lands first: one computed before the press and landing after it
    # still writes the caption over (Gradio sends its output after the check of the queue)
    redrawn(before)
    # the words are watched for as they land (under load, a redraw the Live controls asked for
    # earlier can still land after them)
    page.evaluate("""() => { window.sqWaitingSaid = false; const caption = document.querySelector('#sq-acc-caption');
        new MutationObserver(() => { window.sqWaitingSaid ||= caption.innerText.includes(
            'waiting: the model is busy with a Live run');
            window.sqTakenBack ||= caption.innerText.includes('will not start'); })
            .observe(caption, {childList: true, subtree: true, characterData: true}); }""")
    page.click("#sq-measure")
    page.wait_for_function("window.sqWaitingSaid", timeout=20_000)
    # a redraw of the tab (here: the tab opened again) leaves the waiting line: it wrote the
    # vector's words over it, as if Measure had not been pressed
    page.evaluate("""() => { window.sqWaitingLost = ''; const caption = document.querySelector('#sq-acc-caption');
        new MutationObserver(() => { if (!caption.innerText.includes('waiting')) window.sqWaitingLost ||= Date.now()/1000 + ' ' + caption.innerText; })
            .observe(caption, {childList: true, subtree: true, characterData: true}); }""")
    before = asked()
    open_tab(page, "Live")
    open_tab(page, "Planner")
    redrawn(before)
    assert not page.evaluate("window.sqWaitingLost"), page.evaluate("window.sqWaitingLost")
    page.click("#sq-profile-stop")   # the Stop beside Profile takes it back, said in the measurement's caption
    page.wait_for_function("window.sqTakenBack", timeout=20_000)
    # taken back, it still waits in Gradio's queue until its turn: a redraw leaves the Stop's reply
    before = asked()
    open_tab(page, "Live")
    open_tab(page, "Planner")
    redrawn(before)
    assert "will not start" in page.locator("#sq-acc-caption").inner_text()
    open_tab(page, "Live")
    page.click("#sq-stop")
    run_ends(page, ctx)
    assert not page_errors(page), page_errors(page)


def test_a_redraw_landing_after_measure_was_pressed_gives_its_waiting_line_back(served, page, monkeypatch):
    """A Planner redraw checks Gradio's queue for this page's Measure before its figures are made
    and sent: Measure pressed in between had its waiting line written over with the vector's words,
    which stayed until the next redraw. Here the tab select's redraw is held after that check until
    the page shows Measure's waiting line (a fixed 3 s hold let a loaded machine land the redraw
    before the line, and nothing was then written over)."""
    import threading

    from app import planner_tab
    url, ctx = served
    start_a_slow_run(page, url, monkeypatch)
    original, checked, said, armed = planner_tab.captions_in_use, threading.Event(), threading.Event(), [True]

    def checked_early(*args):
        out = original(*args)
        if armed and armed.pop():   # the next redraw's check: its output lands once the line is shown
            checked.set()
            said.wait(30)
        return out

    open_tab(page, "Planner")
    page.wait_for_function("document.querySelector('#sq-acc-caption').innerText.trim().length > 0",
                           timeout=30_000)
    time.sleep(2)   # the first redraws landed
    open_tab(page, "Live")
    monkeypatch.setattr(planner_tab, "captions_in_use", checked_early)
    page.evaluate("""() => { window.sqLost = false; window.sqBack = false;
        const caption = document.querySelector('#sq-acc-caption');
        new MutationObserver(() => { const waits = caption.innerText.includes('waiting: the model is busy');
            if (window.sqSaid && !waits) window.sqLost = true;
            if (window.sqLost && waits) window.sqBack = true;
            window.sqSaid ||= waits; })
            .observe(caption, {childList: true, subtree: true, characterData: true}); }""")
    open_tab(page, "Planner")
    assert checked.wait(30), "the Planner was not redrawn"
    page.click("#sq-measure")
    page.wait_for_function("window.sqSaid", timeout=20_000)
    said.set()
    page.wait_for_function("window.sqLost", timeout=20_000)   # the held redraw landed over the line
    page.wait_for_function("window.sqBack", timeout=10_000)   # and the line came back
    assert "waiting: the model is busy" in page.locator("#sq-acc-caption").inner_text()
    page.click("#sq-planner-stop")
    open_tab(page, "Live")
    page.click("#sq-stop")
    run_ends(page, ctx)
    assert not page_errors(page), page_errors(page)

def test_a_new_run_does_not_show_the_last_runs_metrics_and_tree_before_its_first_step(served, page, monkeypatch):
    """While a new run read a long prompt (minutes), the last run's cards and last step's tree
    went on showing beside "● running …"; the cards are cleared and the tree is the new plan's."""
    url, ctx = served
    start_a_slow_run(page, url, monkeypatch)
    page.click("#sq-stop")
    page.wait_for_function("document.querySelector('#sq-live-status').innerText.includes('■ Stopped:')",
                           timeout=20_000)
    assert "Metrics appear here" not in page.locator("#sq-metrics").inner_text()
    page.click("#sq-generate")
    page.wait_for_function("document.querySelector('#sq-metrics').innerText.includes('Metrics appear here')",
                           timeout=10_000)
    # its own steps fill them again
    page.wait_for_function("!document.querySelector('#sq-metrics').innerText.includes('Metrics appear here')",
                           timeout=20_000)
    page.click("#sq-stop")
    page.wait_for_function("document.querySelector('#sq-live-status').innerText.includes('Stopped')",
                           timeout=20_000)
    assert not page_errors(page), page_errors(page)


def test_the_stops_reply_stays_until_the_runs_last_line(served, page, monkeypatch):
    """After Stop's "■ stopping after the current step…" the step that ended after the Stop showed
    its own line ("● … step 4 · 16 tokens") before "■ Stopped:", as if the Stop had been ignored.
    A step line the page was sent before the Stop may still land after its reply (two events'
    outputs; seen under load): only steps the worker emitted after the Stop are judged."""
    import re
    from app.state import Session
    url, ctx = served
    stop_tab, emitted = Session.stop_tab, []

    def noting_the_step(self, tab):
        stopped = stop_tab(self, tab)
        emitted.append(ctx.worker.status()["step"] or 0)   # the last step emitted before the Stop
        return stopped

    monkeypatch.setattr(Session, "stop_tab", noting_the_step)
    start_a_slow_run(page, url, monkeypatch)
    page.evaluate("""() => { window.sqSeen = [];
        const box = document.querySelector('#sq-live-status');
        new MutationObserver(() => window.sqSeen.push(box.innerText))
            .observe(box, {subtree: true, childList: true, characterData: true}); }""")
    page.click("#sq-stop")
    page.wait_for_function("document.querySelector('#sq-live-status').innerText.includes('■ Stopped:')",
                           timeout=20_000)
    seen = [line for line in page.evaluate("window.sqSeen") if line.strip()]
    after = seen[next(i for i, line in enumerate(seen) if "stopping" in line):]
    late = [line for line in after if "●" in line and int(re.search(r"step (\d+)", line)[1]) > emitted[0]]
    assert not late, (emitted, seen)


def test_a_stop_reply_landing_after_the_run_ended_leaves_the_runs_summary(served, page, monkeypatch):
    """Stop's reply ("stopping after the current step") and the run's last line are two events'
    outputs. When the run ends before the reply reaches the page (here the reply is held back), the
    status line ended on "stopping" for good (a browser test failed on it under load); Stop's
    follow-up now puts the run's summary back."""
    from app.state import Session
    url, ctx = served
    stop_tab = Session.stop_tab

    def late_reply(self, tab):
        stopped = stop_tab(self, tab)
        time.sleep(1.5)   # the run ends at its next step meanwhile, and its last line is shown first
        return stopped

    monkeypatch.setattr(Session, "stop_tab", late_reply)
    start_a_slow_run(page, url, monkeypatch)
    page.click("#sq-stop")
    page.wait_for_function("document.querySelector('#sq-live-status').innerText.includes('■ Stopped:')",
                           timeout=20_000)   # the run's own last line
    page.wait_for_function("document.querySelector('#sq-live-status').innerText.includes('stopping')",
                           timeout=20_000)   # then the held-back reply
    page.wait_for_function("document.querySelector('#sq-live-status').innerText.includes('■ Stopped:')",
                           timeout=20_000)   # and the summary again
    assert not page_errors(page), page_errors(page)


def test_enter_in_a_slider_box_re_plans(served, page, monkeypatch):
    """A value typed into a slider's box and confirmed with Enter re-plans, as leaving the box does
    (Gradio fires a slider's release on blur only; assets/page.js turns Enter into leaving the box)."""
    url, ctx = served
    asked = plans_asked(ctx, monkeypatch, lambda spec, settings, kwargs: spec.budget)
    open_page(page, url)
    box = page.locator("#sq-budget input[type=number]")
    box.fill("13")
    box.press("Enter")
    assert wait_for(lambda: 13 in asked, 20), asked
    assert not page_errors(page), page_errors(page)


def test_a_budget_typed_out_of_range_is_planned_at_its_bound(served, page, monkeypatch):
    """Typed 0 or 500 into the budget box: Gradio sent the raw value (refused in a toast), then
    snapped the box to its bound without an event, so the page kept the old plan beside a budget
    that Generate then ran (a helper's walk-through: 0 ran as n=1). assets/page.js brings the value
    inside the range first, and the plan follows the box."""
    url, ctx = served
    asked = plans_asked(ctx, monkeypatch, lambda spec, settings, kwargs: spec.budget)
    before = set(ctx.sessions._items)
    open_page(page, url)
    assert wait_for(lambda: first_plan_marked(ctx, before), 60)   # wired up (assets/page.js loaded)
    box = page.locator("#sq-budget input[type=number]")
    high = int(page.locator("#sq-budget input[type=range]").get_attribute("max"))
    box.fill(str(high + 400))
    box.press("Enter")
    assert wait_for(lambda: high in asked, 20), asked   # (Gradio's own snap to the bound plans nothing)
    box.fill("0")
    box.press("Tab")
    assert wait_for(lambda: 1 in asked, 20), asked
    box.fill("7")
    box.press("Enter")
    assert wait_for(lambda: 7 in asked, 20), asked
    # a box emptied and left gets back its value on entering (Gradio sent null, refused in a
    # toast, then snapped the box to its minimum without a plan)
    asked.clear()
    box.fill("")
    box.press("Tab")
    page.wait_for_timeout(1500)
    assert box.input_value() == "7", box.input_value()
    box.fill("9")
    box.press("Enter")
    assert wait_for(lambda: 9 in asked, 20), asked
    assert 1 not in asked and None not in asked, asked
    assert not page_errors(page), page_errors(page)


def test_max_new_tokens_and_seed_typed_out_of_range_are_brought_to_their_bounds(served, page):
    """The number fields beside the sliders kept a bad value with a toast (Max new tokens 0, a seed
    of -3 or 2.5) where a slider's box brings it inside its range as it is left, and an emptied one
    gets back its value (assets/page.js), on both tabs."""
    url, ctx = served
    open_page(page, url)
    page.wait_for_timeout(1500)   # the page's script is wired on load
    max_new, seed = page.locator("#sq-max-new input"), page.locator("#sq-seed input")
    for box, typed, shown in ((max_new, "0", "1"), (max_new, "9999999", "8192"), (max_new, "12.4", "12"),
                              (max_new, "", "12"), (seed, "-3", "0"), (seed, "2.5", "3"), (seed, "", "3")):
        box.fill(typed)
        box.press("Tab")
        page.wait_for_timeout(300)
        assert box.input_value() == shown, (typed, box.input_value())
    max_new.fill("0")
    page.click("#sq-generate")   # leaving the box for the button: the run gets the bound, not a toast
    run_ends(page, ctx)
    assert "Done (max new tokens reached): 1 token in" in page.locator("#sq-live-status").inner_text()
    assert max_new.input_value() == "1"
    open_tab(page, "Race")
    race_seed = page.locator("#sq-race-seed input")
    race_seed.fill("-3")
    race_seed.press("Tab")
    page.wait_for_timeout(300)
    assert race_seed.input_value() == "0"
    assert not page_errors(page), page_errors(page)


def test_the_race_tabs_slider_boxes_are_guarded_as_the_live_tabs(served, page):
    """The Race tab's sliders had no guard: an emptied Top-p box became 0.05 once left (Gradio's
    own snap of null to the minimum), and Start raced with it (a review)."""
    url, ctx = served
    open_page(page, url)
    open_tab(page, "Race")
    page.wait_for_timeout(1500)   # the page's script is wired on load
    top_p = page.locator("#sq-tab-race .sq-sliders input[type=number]").nth(4)
    budget = page.locator("#sq-tab-race .sq-sliders input[type=number]").first
    assert top_p.input_value() == "1"
    top_p.fill("")
    top_p.press("Tab")
    page.wait_for_timeout(800)
    assert top_p.input_value() == "1"
    high = page.locator("#sq-tab-race .sq-sliders input[type=range]").first.get_attribute("max")
    budget.fill("5000")
    budget.press("Enter")
    page.wait_for_timeout(800)
    assert budget.input_value() == high
    assert not page_errors(page), page_errors(page)


def test_the_hardware_aware_box_is_greyed_for_methods_it_does_not_plan(served, page):
    """Hardware-aware plans Sequoia trees only; with Chain picked it stayed live and did nothing."""
    url, ctx = served
    open_page(page, url)
    box = page.locator("#sq-hw input")
    assert box.is_enabled()
    for name, enabled in (("Chain", False), ("Sequoia (DP tree)", True)):
        page.locator("#sq-method input").click()
        page.get_by_role("option", name=name).click()
        page.wait_for_function(f"document.querySelector('#sq-hw input').disabled === {str(not enabled).lower()}",
                               timeout=10_000)
    assert not page_errors(page), page_errors(page)


def test_a_bad_field_is_said_at_once_while_another_run_holds_the_model(served, page, monkeypatch):
    """Gradio checks an event's fields only when the event leaves its queue: Start race with an
    empty prompt or no method picked, pressed while the page's Live run held the model said
    nothing until that run had ended (minutes, on a real pair). A check that waits for nothing now
    says it at once, and the race is not queued. (A negative seed, the first case here, is now
    brought to 0 by the page as the box is left.)"""
    url, ctx = served
    before = set(ctx.sessions._items)
    start_a_slow_run(page, url, monkeypatch)
    sess_key = next(key for key in list(ctx.sessions._items) if key not in before)
    open_tab(page, "Race")
    toast_says = ("(text) => [...document.querySelectorAll('[data-testid=\"toast-body\"]')]"
                  ".some(t => t.innerText.includes(text))")
    page.locator("#sq-race-prompt textarea").fill("  ")
    page.click("#sq-race-start")
    page.wait_for_function(toast_says, arg="the prompt is empty", timeout=10_000)
    page.locator("#sq-race-prompt textarea").fill("Once upon a time")
    boxes = page.locator("#sq-race-methods input[type=checkbox]")
    for i in range(boxes.count()):
        boxes.nth(i).uncheck()
    page.click("#sq-race-start")   # the lanes' own checks wait for nothing either
    page.wait_for_function(toast_says, arg="pick at least one method for the race", timeout=10_000)
    from app import waiting
    assert not waiting.waiting(ctx.sessions.blocks, sess_key, ctx.run_events["race"])   # not queued
    assert not [s for s in list(ctx.sessions._items.values()) if s.job is not None and s.job.name == "race"]
    assert page.locator("#sq-race-start").is_enabled()   # refused: nothing pending, press again
    open_tab(page, "Live")
    assert "step " in page.locator("#sq-live-status").inner_text()   # the Live run still goes
    # a second Generate would be dropped without a word while the run goes: the button is greyed
    assert not page.locator("#sq-generate").is_enabled()
    page.click("#sq-stop")
    page.wait_for_function("document.querySelector('#sq-live-status').innerText.includes('■ Stopped:')",
                           timeout=60_000)   # (the toasts above would satisfy run_ends at once)
    page.wait_for_function("!document.querySelector('#sq-generate').disabled", timeout=10_000)


def test_a_race_started_during_the_live_run_is_taken_back_by_the_race_tabs_stop(served, page, monkeypatch):
    """Start race pressed while the page's Live run goes waits in Gradio's queue; the Race tab's
    Stop takes it back (it started once the Live run ended, and no Stop could take it back) and
    says so; once the Live run is stopped the race says it was stopped before it started."""
    from app import waiting
    url, ctx = served
    before = set(ctx.sessions._items)
    start_a_slow_run(page, url, monkeypatch)
    sess_key = next(key for key in list(ctx.sessions._items) if key not in before)
    open_tab(page, "Race")
    page.click("#sq-race-start")
    assert wait_for(lambda: waiting.waiting(ctx.sessions.blocks, sess_key, ctx.run_events["race"]), 30)
    page.click("#sq-race-stop")
    page.wait_for_function("document.querySelector('#sq-race-status').innerText.includes('will not start')",
                           timeout=20_000)
    open_tab(page, "Live")
    assert "step " in page.locator("#sq-live-status").inner_text()   # the Live run goes on
    page.click("#sq-stop")
    run_ends(page, ctx, 60)
    open_tab(page, "Race")
    page.wait_for_function("document.querySelector('#sq-race-status').innerText.includes('Stop took it back')",
                           timeout=20_000)
    # greyed while the taken-back race waited for its turn, given back once it came
    page.wait_for_function("!document.querySelector('#sq-race-start').disabled", timeout=10_000)
    if os.environ.get("SEQUOIA_SCREENSHOT"):
        page.screenshot(path=os.environ["SEQUOIA_SCREENSHOT"], full_page=True)
    assert not [s for s in list(ctx.sessions._items.values()) if s.job is not None and s.job.name == "race"]
    assert not page_errors(page), page_errors(page)


def test_a_race_control_moved_mid_race_says_it_applies_to_the_next_race(served, page, monkeypatch):
    """A helper's walk-through: Budget moved from 8 to 16 during a race, and nothing said that the
    lanes keep their trees (a fair race) and the change waits for the next race."""
    from engine import interleave
    together = interleave.run_together

    def slow_together(lanes):   # each lane's step waits: the race is still going at the next click
        for item in together(lanes):
            time.sleep(0.3)
            yield item

    monkeypatch.setattr(interleave, "run_together", slow_together)
    url, ctx = served
    open_page(page, url)
    open_tab(page, "Race")
    page.wait_for_timeout(1500)   # the page's script is wired on load
    page.click("#sq-race-start")
    page.wait_for_function("document.querySelector('#sq-race-status').innerText.includes('timing all')",
                           timeout=60_000)
    budget = page.locator("#sq-tab-race .sq-sliders input[type=number]").first
    budget.fill("16")
    budget.press("Enter")
    toast_says = ("(text) => [...document.querySelectorAll('[data-testid=\"toast-body\"]')]"
                  ".some(t => t.innerText.includes(text))")
    page.wait_for_function(toast_says, arg="this change applies to the next race", timeout=10_000)
    page.click("#sq-race-stop")
    page.wait_for_function("document.querySelector('#sq-race-status').innerText.includes('Race stopped')",
                           timeout=60_000)


def test_a_run_that_fails_gives_its_button_back(served, page):
    """A run's button is greyed while the run goes (live.model_run) and comes back however the run
    ends. Gradio 6.31's page runs `.then` only after a success, so after a load that failed (a
    model id that is nowhere) Load pair stayed greyed until the page was reloaded."""
    url, ctx = served
    open_page(page, url)
    open_tab(page, "Models")
    page.get_by_label("Draft model").first.fill("no/such-model")
    page.evaluate("""() => { window.sqGreyed = false; const button = document.querySelector('#sq-load');
        new MutationObserver(() => { window.sqGreyed ||= button.disabled; })
            .observe(button, {attributes: true}); }""")
    page.click("#sq-load")
    page.wait_for_function("[...document.querySelectorAll('[data-testid=\"toast-body\"]')]"
                           ".some(t => t.innerText.includes('no/such-model'))", timeout=30_000)
    page.wait_for_function("!document.querySelector('#sq-load').disabled", timeout=10_000)
    assert page.evaluate("window.sqGreyed")   # it was greyed while the load went
    assert ctx.worker.describe()["draft"] != "no/such-model"   # the pair in use stays
