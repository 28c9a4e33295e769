"""Stop pressed on the page (issue 7, item 2) while a model forward is in flight: during drafting,
during verification, while measuring acceptance and while profiling. A forward pre-hook holds the
chosen model's n-th forward until the test has pressed Stop through the Gradio API, so the press
lands inside that phase, not between steps. Each run must end as "stopped", keep what it already
produced exact, write no half measurement, and leave the worker free: the next request is exact."""
from __future__ import annotations

import pytest

from engine.paths import cache_dir
from tests.robustness.served import HoldForward, gen_args, still_exact, wait_for


def snapshot(kind: str) -> dict:
    """The cached measurements of one kind: name -> contents."""
    folder = cache_dir() / kind
    return {p.name: p.read_bytes() for p in folder.glob("*.json")} if folder.is_dir() else {}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("role,phase", [("draft", "drafting"), ("target", "verification")])
def test_stop_pressed_during_a_forward_ends_the_run_exactly(served, client, reference, jobs, role, phase):
    # call 1 of each model is the prompt's prefill; later calls are inside decoding steps
    hold = HoldForward(getattr(served["ctx"].worker.pair, role), call=4)
    try:
        page = client.submit(*gen_args(max_new_tokens=64), api_name="/generate")
        assert hold.entered.wait(60), f"the {role} never ran a 4th forward"
        run = next(j for j in jobs if j.name == "generate")
        assert client.predict(api_name="/stop") == "■ stopping after the current step…"
        assert run.stop_requested and run.state == "running"  # pressed while the forward is held
        hold.released.set()
        final = page.result()[6]
    finally:
        hold.remove()
    assert wait_for(lambda: run.done)
    assert run.state == "stopped" and final["finish_reason"] == "stopped", (phase, final)
    assert final["done"] and final["total_tokens"] < 64
    # what was produced before the stop is the target's own greedy text, cut short
    assert reference["text"].startswith(final["text"]), (final["text"], reference["text"])
    assert hold.calls <= hold.call + 2  # the run ended right after the held step, not at max tokens
    assert still_exact(client, reference) < 10


@pytest.mark.timeout(120)
def test_stop_pressed_while_the_prompt_is_read_says_it_stops_before_the_first_step(served, client, reference, jobs):
    """A run reading its prompt (minutes for a long one) has no step: Stop said "stopping after the
    current step" there (a helper's walk-through)."""
    hold = HoldForward(served["ctx"].worker.pair.target, call=1)   # the prompt's prefill
    try:
        page = client.submit(*gen_args(max_new_tokens=64), api_name="/generate")
        assert hold.entered.wait(60), "the target never read the prompt"
        assert client.predict(api_name="/stop") == "■ stopping before the first step…"
        hold.released.set()
        final = page.result()[6]
    finally:
        hold.remove()
    assert final["finish_reason"] == "stopped" and final["total_tokens"] == 0
    assert still_exact(client, reference) < 10


@pytest.mark.timeout(120)
# each run stopped by the Stop beside the other's button: the reply lands in the stopped run's own
# caption (the Stop beside Profile wrote "stopping…" under Measure, out of sight of the profile)
@pytest.mark.parametrize("endpoint,kind,what,stop,caption", [
    ("/measure", "acceptance", "measuring acceptance", "/stop_profiling", 0),
    ("/profile", "profiles", "profiling", "/stop_measuring", 1)])
def test_stop_pressed_while_measuring_writes_nothing_and_frees_the_worker(served, client, reference, jobs,
                                                                           endpoint, kind, what, stop, caption):
    client.predict("sequoia", 8, 4, False, 0.5, 1, api_name=endpoint)  # one finished measurement to keep
    before = snapshot(kind)
    assert before
    jobs.clear()
    hold = HoldForward(served["ctx"].worker.pair.target, call=3)
    try:
        page = client.submit("sequoia", 8, 4, False, 0.5, 1, api_name=endpoint)
        assert hold.entered.wait(60), f"{endpoint} never reached the target's 3rd forward"
        measuring = next(j for j in jobs if j.name != "generate")
        replies = client.predict(api_name=stop)   # (acceptance caption, profile caption)
        assert "stopping" in replies[caption] and replies[1 - caption] == {"__type__": "update"}, replies
        assert measuring.stop_requested and measuring.state == "running"
        hold.released.set()
        updates = [u for u in page]
        final = page.result()
    finally:
        hold.remove()
    assert wait_for(lambda: measuring.done)
    assert measuring.state == "stopped" and measuring.result is None
    captions = [str(v) for u in updates for v in (u if isinstance(u, (list, tuple)) else [u])]
    assert any(f"{what} stopped" in c for c in captions), captions[-6:]
    # and its last caption says so: it went back to the earlier vector's or profile's words alone
    last = final[2 if kind == "acceptance" else 5]
    assert last.startswith(f"■ **{what.split()[0].title()} stopped**: nothing new was saved"), last
    assert snapshot(kind) == before  # the earlier measurement is still the one in the cache, untouched
    assert still_exact(client, reference) < 10
