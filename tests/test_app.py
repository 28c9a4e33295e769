"""The app launched in-process on a tiny pair and driven with gradio_client, as a script would."""
import json
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
import torch

from engine import profiler
from engine.errors import UserError
from tests.app_server import served_tiny_pair

pytest.importorskip("gradio")
from gradio_client import Client  # noqa: E402

PROMPT = "hello world"


@pytest.fixture(scope="module")
def served():
    yield from served_tiny_pair()


@pytest.fixture()
def client(served):
    return Client(served["url"], verbose=False)


def cli_generate(capsys, served, **kw) -> dict:
    from engine.cli import main
    args = ["generate", "--draft", served["draft"], "--target", served["target"], "--device", "cpu",
            "--dtype", "float32", "--prompt", PROMPT, "--json"]
    for key, value in kw.items():
        args += [f"--{key.replace('_', '-')}"] + ([] if value is None else [str(value)])
    capsys.readouterr()
    assert main(args) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_generate_streams_every_step_and_matches_the_cli(served, client, capsys):
    settings = dict(budget=8, depth=4, temperature=0.8, top_p=0.95, max_new_tokens=24, seed=3)
    # learning off on both sides: with it on, each run's trees depend on what earlier runs stored,
    # so the same seed draws differently (still exactly distributed) and the texts could not be compared.
    # Both measure the vector here because the module's pair has none yet (this test runs first): with
    # vectors at other settings cached, the app would interpolate and `generate --no-learn` measure
    job = client.submit(PROMPT, "sequoia", settings["budget"], settings["depth"], False, settings["temperature"],
                        settings["top_p"], settings["max_new_tokens"], settings["seed"], 0, False,
                        api_name="/generate")
    updates = list(job)
    data = [u[6] for u in updates if isinstance(u[6], dict) and "step" in u[6]]
    final = job.result()[6]
    assert final["done"] and final["finish_reason"] in ("eos", "max_new_tokens")
    if final["finish_reason"] == "eos":   # the answer leaves out the EOS token's text
        assert final["text"].startswith(final["answer"]) and len(final["answer"]) < len(final["text"])
    else:
        assert final["answer"] == final["text"]
    seen = {d["step"] for d in data}
    assert seen >= set(range(1, final["total_steps"] + 1))  # at least one update per step
    assert len(data) >= final["total_steps"]
    cli = cli_generate(capsys, served, method="sequoia", no_learn=None, **settings)
    assert final["text"] == cli["text"]
    assert final["total_tokens"] == len(cli["token_ids"])


def test_race_at_temperature_zero_reports_identical_texts(client):
    out = client.predict(PROMPT, ["ar", "chain", "specinfer", "sequoia", "sequoia-auto"], 10, 4, 0, 1, 20, 0,
                         api_name="/race")
    summary = out[-1]
    assert summary["greedy"] and summary["identical"] is True
    lanes = summary["lanes"]
    assert len(lanes) == 5 and len({lane["text"] for lane in lanes}) == 1
    assert all(lane["tokens"] > 0 and lane["tokens_per_second"] > 0 for lane in lanes)
    assert "check passed" in out[4]


def test_a_race_on_a_long_prompt_says_how_far_each_lane_read_it_then_that_it_times_them(served, client,
                                                                                       monkeypatch):
    """Each lane reads the prompt before its first step, after the race said it times the lanes
    together: the last lane's "reading the prompt" line stayed on the status line all race long."""
    from engine import decoding
    monkeypatch.setattr(decoding, "PREFILL_CHUNK", 8)
    monkeypatch.setattr("app.race.UPDATE_INTERVAL", 0.0)
    job = client.submit("the quick brown fox jumps over the lazy dog " * 4, ["ar", "chain"], 6, 4, 0, 1, 12, 0,
                        api_name="/race")
    lines = [update[0] for update in job if isinstance(update[0], str)]
    reading = [i for i, line in enumerate(lines) if "reading the prompt into the" in line]
    assert reading and any("timing all 2 methods together" in line for line in lines[reading[-1]:]), lines
    assert "✓ Race finished." in lines[-1] or "✓ Race finished." in job.outputs()[-1][0]


def test_the_race_chart_names_each_lane_by_its_tree_from_the_warm_up_on(client):
    """The legend said "Chain" (the checkbox label) through the warm-up, then "chain d=4" once a lane
    had stepped: it now names the planned trees as soon as the lanes do."""
    job = client.submit(PROMPT, ["ar", "chain"], 6, 4, 0, 1, 8, 0, api_name="/race")
    updates = list(job)
    warm = next(u for u in updates if u[0] == "… untimed warm-up…")
    names = [trace["name"] for trace in json.loads(warm[2]["plot"])["data"]]
    assert names == ["autoregressive", "chain d=4"], names
    final = [trace["name"] for trace in json.loads(job.outputs()[-1][2]["plot"])["data"]]
    assert final == names


def test_editing_the_prompt_or_max_new_tokens_re_plans_the_shown_plan(client):
    """The prompt picks its kind's vector and memory, max new tokens whether a rest is planned for:
    leaving either box re-plans with the page's values (idle; a running job keeps its plan)."""
    for endpoint in ("/plan_on_prompt", "/plan_on_max_new"):
        plan = client.predict("sequoia", 9, 4, False, 0, 1, 0, "def f(x):", 200, api_name=endpoint)[-1]
        assert plan["size"] == 9 and plan["depth"] <= 4


def test_plan_returns_a_tree_of_the_requested_size(client):
    out = client.predict("sequoia", 12, 5, False, 0, 1, api_name="/plan")
    plan = out[-1]
    assert plan["size"] == 12 and len(plan["parents"]) == 12 and plan["depth"] <= 5
    assert plan["parents"][0] == -1
    assert plan["expected_tokens"] >= 1
    # the acceptance chart shows what the next run is planned from before it starts (it stayed blank)
    acc = json.loads(out[3]["plot"])
    assert "what the next run is planned from" in acc["layout"]["title"]["text"]
    assert [t["name"] for t in acc["data"]] == ["planned (measured vector)"] and acc["data"][0]["y"][0] > 0
    chain = client.predict("chain", 12, 5, False, 0, 1, api_name="/plan")[-1]
    assert chain["size"] == 5


def test_bad_input_is_a_clear_message_and_the_app_stays_usable(client):
    with pytest.raises(Exception, match="prompt is empty"):
        client.predict("   ", "ar", 8, 4, False, 0, 1, 8, 0, api_name="/generate")
    with pytest.raises(Exception, match=r"Tree budget n .* must be at least 1 \(got 0\)"):
        client.predict("sequoia", 0, 5, False, 0, 1, api_name="/plan")
    with pytest.raises(Exception, match="depth >= 2"):
        client.predict("sequoia", 12, 1, False, 0, 1, api_name="/plan")
    with pytest.raises(Exception, match="too small to sample"):
        client.predict(PROMPT, "ar", 8, 4, False, 0.005, 1, 8, 0, api_name="/generate")
    with pytest.raises(Exception, match="depth >= 2"):
        client.predict(PROMPT, "chain", 8, 1, False, 0, 1, 8, 0, api_name="/generate")
    out = client.predict(PROMPT, "ar", 8, 4, False, 0, 1, 8, 0, api_name="/generate")
    assert out[6]["done"] and out[6]["total_tokens"] >= 1


def test_measure_profile_and_load_models_are_usable(served, client):
    planner = client.predict("sequoia", 8, 4, False, 0.5, 1, api_name="/measure")
    assert planner[-2]["acceptance_positions"] > 0  # the plan now uses the fresh vector
    assert "positions" in planner[2]
    assert planner[2].startswith("✓ Measured just now:") and "shown below" in planner[2]   # said, and shown
    prof = client.predict("sequoia", 8, 4, False, 0.5, 1, api_name="/profile")
    assert "overhead" in prof[5]
    # a Profile whose timing came out noisy leaves a clean cached profile in place, and says so
    pair = served["ctx"].worker.pair
    cached = profiler.cached_profile(pair)
    clean = replace(cached, quality={**cached.quality, "noisy": False, "worst_spread": 0.05},
                    measured_at="the clean one")
    profiler.save_profile(pair, clean)
    noisy = replace(clean, quality={**clean.quality, "noisy": True, "worst_spread": 0.47,
                                    "load_average_before": [1.8, 1.5, 1.2]}, measured_at="the noisy one")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(profiler, "profile_device", lambda *a, **kw: replace(noisy))
        prof = client.predict("sequoia", 8, 4, False, 0.5, 1, api_name="/profile")
    assert prof[5].startswith("✗ Timed again, but the repeats disagreed by 47 % (load average 1.80 while"), prof[5]
    assert "the clean profile measured the clean one stays" in prof[5] and "overhead" in prof[5]
    assert profiler.cached_profile(pair).measured_at == "the clean one"
    loaded = client.predict(served["draft"], served["target"], "cpu", "float32", api_name="/load_models")
    assert loaded[-1]["target"] == served["target"] and loaded[-1]["device"] == "cpu"
    with pytest.raises(Exception, match="no such folder: '/no/such/model'"):   # a path: not the hub's business
        client.predict("/no/such/model", served["target"], "cpu", "float32", api_name="/load_models")
    assert served["ctx"].worker.describe()["draft"] == served["draft"]  # the loaded pair stayed


def test_the_planners_stop_with_nothing_going_leaves_its_captions(served, client):
    """The Planner's Stop writes into the caption of the run it stops; pressed with nothing going
    anywhere it replaced the acceptance caption with "Nothing is running in this tab." (a helper's
    walk-through): a page (which sends the captions) gets it in a toast, the captions unchanged;
    a script (which sends none) gets the reply."""
    unchanged = {"__type__": "update"}
    for stop in ("/stop_measuring", "/stop_profiling"):
        assert client.predict("**1531 positions** measured …", "Profile: …", api_name=stop) == (unchanged, unchanged)
        assert client.predict(api_name=stop)[0] == "Nothing is running in this tab."


def test_a_refused_value_is_toasted_once_until_a_plan_is_shown_but_a_script_always_gets_it(client):
    """Picking "Imported tree" in the Method list with nothing imported: the mouse's release lands
    on the Budget slider under the list, whose release re-plans too, and the page showed one toast
    with the refusal twice ("Error (2)", seen in Chromium), and each later edit of another control
    raised it again. The page's controls now toast a refusal once until a plan is shown again (the
    plan line and status say it all the while); the API's /plan always raises."""
    values = ("tree", 8, 4, False, 0, 1, 0, PROMPT, 64)
    with pytest.raises(Exception, match="no imported tree"):
        client.predict(*values, api_name="/plan_on_method")
    again = client.predict(*values, api_name="/plan_on_budget")   # the same click's second re-plan
    assert "No plan for these values" in again[0] and "no imported tree" in again[0]
    assert "No plan until then" in again[2]
    with pytest.raises(Exception, match="no imported tree"):   # a script asks: it is told every time
        client.predict(*values[:6], api_name="/plan")
    # another control edited while the value stays refused (a helper saw "Error (3)"): said on the lines
    later = client.predict("tree", 8, 4, False, 0.3, 1, 0, PROMPT, 64, api_name="/plan_on_temperature")
    assert "no imported tree" in later[0] and "No plan until then" in later[2]
    with pytest.raises(Exception, match="depth >= 2"):   # another refusal is said at once
        client.predict("chain", 8, 1, False, 0, 1, 0, PROMPT, 64, api_name="/plan_on_depth")
    assert client.predict("chain", 8, 4, False, 0, 1, 0, PROMPT, 64, api_name="/plan_on_depth")[-1]["size"] == 4
    with pytest.raises(Exception, match="no imported tree"):   # after a plan was shown: told again
        client.predict(*values, api_name="/plan_on_method")


def test_every_event_has_an_api_name(served):
    from gradio_client import Client
    info = Client(served["url"], verbose=False).view_api(return_format="dict", print_info=False)
    names = set(info["named_endpoints"])
    for name in ("/generate", "/race", "/plan", "/measure", "/profile", "/load_models", "/stop", "/replay",
                 "/status"):
        assert name in names, name
    assert not info["unnamed_endpoints"]


def test_replay_after_a_run(client):
    out = client.predict(PROMPT, "chain", 8, 4, False, 0, 1, 16, 0, api_name="/generate")
    steps = out[6]["total_steps"]
    assert steps >= 2
    replay = client.predict(2, api_name="/replay")
    assert replay[2]["step"] == 2 and "Replaying step 2" in replay[3]
    # named, although Gradio rebuilt the slider (from its class) when the run set its maximum
    with pytest.raises(Exception, match=rf"Replay a step .* must be at most {steps} \(got {steps + 5}\)"):
        client.predict(steps + 5, api_name="/replay")


def test_import_tree_json_and_growmap(served, client, tmp_path):
    from gradio_client import handle_file
    path = tmp_path / "tree.json"
    path.write_text(json.dumps({"parents": [-1, 0, 0, 1, 2, 3]}))
    out = client.predict(handle_file(str(path)), api_name="/import_tree")
    assert out[-1]["size"] == 6 and "Imported" in out[0]
    plan = client.predict("tree", 8, 4, False, 0, 1, api_name="/plan")
    assert plan[-1]["parents"] == [-1, 0, 0, 1, 2, 3]
    assert "Imported tree n=6 d=4" in str(plan[0]) and "Sequoia" not in str(plan[0])   # was "Sequoia n=6 d=4"
    _the_planner_marks_the_imported_tree_at_its_own_value(served, client, 6, 4)
    # the line under the Import box follows the Live method at each redraw (it kept saying "set the
    # Live tab's method to Imported tree" beside a Sequoia plan)
    line = client.predict("sequoia", api_name="/import_line")
    assert line == "Imported **tree.json** (6 nodes, 4 levels) is kept: pick *Imported tree* as the Live tab's method to use it."
    line = client.predict("tree", api_name="/import_line")
    assert "the Live tab's method is *Imported tree*" in line and "tree.json" in line
    grow = tmp_path / "growmap.pt"
    torch.save({"Successors": [[1, 2], [3], [], []], "size": 4}, grow)
    out = client.predict(handle_file(str(grow)), api_name="/import_tree")
    assert out[-1]["size"] == 4
    gen = client.predict(PROMPT, "tree", 8, 4, False, 0, 1, 8, 0, api_name="/generate")
    assert gen[6]["done"] and gen[6]["tree_size"] in (4, 1)  # the last event of a run may be the final one
    bad = tmp_path / "bad.json"
    bad.write_text('{"parents": [0, 0]}')
    with pytest.raises(Exception, match="root"):
        client.predict(handle_file(str(bad)), api_name="/import_tree")
    # the Planner's own vLLM and Medusa exports read back (they were refused: "parents must be integers")
    from engine import export
    from engine.tree import Tree
    tree = Tree.from_parents([-1, 0, 0, 1, 2, 3])
    for fmt in ("vllm", "medusa"):
        path = tmp_path / f"tree{export.SUFFIX[fmt]}"
        path.write_text(export.export_tree(tree, fmt))
        out = client.predict(handle_file(str(path)), api_name="/import_tree")
        assert out[-1]["parents"] == list(tree.parents) and "Imported" in out[0], fmt


def _the_planner_marks_the_imported_tree_at_its_own_value(served, client, size, depth):
    """The Planner's charts mark an imported tree at its size and depth, where the heatmap's cell
    and the speedup curve hold the DP's tree of that shape: the mark says the imported tree's own
    tokens/step and the speedup star sits at its own predicted speedup (the plan line's), said to
    be the imported one's."""
    import re

    pair = served["ctx"].worker.pair
    if profiler.cached_acceptance(pair, 0.0) is None:   # the charts need a vector at T = 0
        probs = [0.7, 0.15, 0.05] + [0.0] * 13
        profiler.save_acceptance(pair, profiler.AcceptanceVector(
            probs, 0.1, 2000, [0.01] * 16, pair.draft_name, pair.target_name, "sequoia", 0.0, 1.0, 16, 12,
            draft_kernels=profiler.draft_kernels(pair)))
    if profiler.cached_profile(pair) is None:   # and the speedup chart a device profile
        profiler.save_profile(pair, profiler.DeviceProfile({1: 0.01, 8: 0.012, 16: 0.014}, {1: 0.002, 8: 0.003},
                                                           0.001, 16, 3, pair.draft_name, pair.target_name,
                                                           str(pair.device), "float32"))
    out = client.predict("tree", 8, 4, False, 0, 1, 0, PROMPT, 64, api_name="/planner")
    heat, speed = (json.loads(out[i]["plot"]) for i in (3, 6))
    tokens, speedup = (float(x) for x in re.search(r"predicted <b>([\d.]+)</b> tokens/step · predicted speedup "
                                                   r"<b>([\d.]+)×", out[0]).groups())
    mark = next(t for t in heat["data"] if t.get("name") == "chosen")
    assert (mark["x"], mark["y"]) == ([size], [depth]) and "imported tree" in mark["hovertemplate"], mark
    # the plan line's (to its 2 decimals: rounding the mark's 3 decimals again could differ by 0.01)
    assert abs(float(mark["hovertemplate"].split("its own ")[1].split(" ")[0]) - tokens) <= 0.0055
    star = next(t for t in speed["data"] if t.get("name") == "imported tree")
    assert star["x"] == [size] and "imported" in star["text"][0] and round(star["y"][0], 2) == speedup, (star, out[0])


def test_the_planner_takes_its_plan_down_where_the_live_values_allow_none(served, client):
    """Depth 1 for a DP tree: the Live tab said "No plan for these values", but the Planner raised
    a second toast and kept the last plan, its chosen tree and its export (a helper downloaded
    the n=4 tree from beside "No plan")."""
    pair = served["ctx"].worker.pair
    if profiler.cached_acceptance(pair, 0.0) is None:   # a plan at T = 0 needs a vector
        profiler.save_acceptance(pair, profiler.AcceptanceVector(
            [0.7, 0.15, 0.05] + [0.0] * 13, 0.1, 2000, [0.01] * 16, pair.draft_name, pair.target_name, "sequoia",
            0.0, 1.0, 16, 12, draft_kernels=profiler.draft_kernels(pair)))
    if profiler.cached_profile(pair) is None:   # the device's profile is drawn whatever the values
        profiler.save_profile(pair, profiler.DeviceProfile({1: 0.01, 8: 0.012, 16: 0.014}, {1: 0.002, 8: 0.003},
                                                           0.001, 16, 3, pair.draft_name, pair.target_name,
                                                           str(pair.device), "float32"))
    good = client.predict("sequoia", 8, 4, False, 0, 1, 0, PROMPT, 64, api_name="/planner")
    assert good[9] and "Plan:" in good[0]
    out = client.predict("sequoia", 8, 1, False, 0, 1, 0, PROMPT, 64, api_name="/planner")
    assert "No plan for these values" in out[0] and "depth &gt;= 2" in out[0], out[0]
    assert "No plan for these values" in json.dumps(json.loads(out[7]["plot"]))   # no chosen tree
    assert out[8]["value"] is None and not out[8]["interactive"] and out[9] == {}   # nothing to export, no JSON
    assert json.loads(out[1]["plot"])["data"], "the vector at these settings still shows"
    bad_temperature = client.predict("sequoia", 8, 4, False, 0.001, 1, 0, PROMPT, 64, api_name="/planner")
    assert "No plan for these values" in bad_temperature[0] and bad_temperature[9] == {}
    for view in (out, bad_temperature):   # (a Profile ending meanwhile wrote into a caption left stale)
        assert json.loads(view[4]["plot"])["data"] and "ms/step" in view[5], view[5]


def test_the_planners_acceptance_chart_names_top_k(served, client):
    """Vectors are kept per top-k, but the Planner said "No acceptance vector measured at T=0.7,
    top-p=1" at top-k 20 while the header measured "T=0.7, top-p=0.9, top-k=20"."""
    out = client.predict("sequoia", 8, 4, False, 0.7, 1, 20, PROMPT, 64, api_name="/planner")
    assert "T=0.7, top-p=1, top-k=20" in json.dumps(json.loads(out[1]["plot"])).replace("<br>", " "), out[1]


def test_without_a_device_profile_the_planner_draws_g_and_names_the_button_that_profiles(served, client,
                                                                                         monkeypatch):
    """Hardware-aware planning with an acceptance vector but no device profile yet (the first
    start's profile still running): the heatmap said "G(n, d) needs an acceptance vector" and the
    tree "No tree until a vector is measured" beside the vector's own chart, and the Live tab
    sent the user to "Measure" (acceptance) instead of "Profile this device"."""
    from engine import planning
    pair = served["ctx"].worker.pair
    probs = [0.7, 0.15, 0.05] + [0.0] * 13
    profiler.save_acceptance(pair, profiler.AcceptanceVector(
        probs, 0.1, 2000, [0.01] * 16, pair.draft_name, pair.target_name, "sequoia", 0.45, 1.0, 16, 12,
        draft_kernels=profiler.draft_kernels(pair)))
    monkeypatch.setattr(planning, "corrected_profile", lambda *a, **k: None)
    monkeypatch.setattr(profiler, "cached_profile", lambda *a, **k: None)
    out = client.predict("sequoia", 16, 6, True, 0.45, 1, 0, PROMPT, 64, api_name="/planner")
    heat, speed, tree = (json.loads(out[i]["plot"]) for i in (3, 6, 7))
    assert "needs a device profile" in out[0] and heat["data"], out[0]   # G(n, d) drawn from the vector
    speed, tree = (json.dumps(fig).replace("<br>", " ") for fig in (speed, tree))   # wrapped messages
    assert "Profile this device" in speed and "acceptance vector" not in speed
    assert "Profile this device" in tree and "Measure" not in tree
    status = client.predict("sequoia", 16, 6, True, 0.45, 1, 0, PROMPT, 64, api_name="/first_plan")
    assert "**Profile this device** in the Planner tab" in status[2], status[2]
    # while the device is being profiled (a first load's profile): said so, no button to press
    monkeypatch.setattr(served["ctx"].worker, "profiling_now", lambda: True)
    out = client.predict("sequoia", 16, 6, True, 0.45, 1, 0, PROMPT, 64, api_name="/planner")
    prof, tree = (json.dumps(json.loads(out[i]["plot"])).replace("<br>", " ") for i in (4, 7))
    assert "being profiled now" in prof and "being measured now" in tree and "Profile this device" not in tree
    assert out[0].startswith("Hardware-aware planning needs a device profile, and the device is being profiled now")
    status = client.predict("sequoia", 16, 6, True, 0.45, 1, 0, PROMPT, 64, api_name="/first_plan")
    assert "the device is being profiled now" in status[2] and "Profile this device" not in status[2], status[2]


def test_two_clients_at_once_both_finish(served):
    import threading
    results = {}

    def run(name):
        c = Client(served["url"], verbose=False)
        results[name] = c.predict(PROMPT, "specinfer", 9, 3, False, 0, 1, 20, 0, api_name="/generate")[6]

    threads = [threading.Thread(target=run, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert results["a"]["done"] and results["b"]["done"]
    assert results["a"]["text"] == results["b"]["text"]


def test_the_planner_tab_plans_for_the_live_prompts_kind(served, client):
    """The Planner tab redraws the plan (and the header's plan line) with the Live tab's prompt:
    a code prompt gets the code vector, a prose prompt the prose one, as the Live tab's own plan
    does (before, the tab left the prompt out and switched the header to the pooled vector)."""
    from engine import domains, profiler
    pair = served["ctx"].worker.pair
    draft_kernels = profiler.draft_kernels(pair)
    for domain, probs in (("code", [0.85, 0.08, 0.03]), ("prose", [0.55, 0.15, 0.08])):
        probs = probs + [0.0] * 13
        vec = profiler.AcceptanceVector(probs, 1 - sum(probs), 2000, [0.01] * 16, pair.draft_name, pair.target_name,
                                        "sequoia", 0.3, 1.0, 16, 12, domain=domain, draft_kernels=draft_kernels)
        profiler.save_acceptance(pair, vec)
        if domain == "code":
            code = vec
    profiler.save_acceptance(pair, domains.pooled_vector([code, vec]))
    shown = {}
    for prompt in ("Write a Python function `f(x)` that sorts x.", "Tell me a story about a quiet lighthouse keeper"):
        out = client.predict("sequoia", 8, 4, False, 0.3, 1, 0, prompt, api_name="/planner")
        shown[prompt[:5]] = (out[-2].get("acceptance_domain"), out[-1])
    assert shown["Write"][0] == "code" and "code vector" in shown["Write"][1]
    assert shown["Tell "][0] == "prose" and "prose vector" in shown["Tell "][1]
    # the vector's cache file is named once (the domain's reason repeated it)
    for prompt, domain in (("Write", "code"), ("Tell ", "prose")):
        source = profiler.cached_acceptance(pair, 0.3, 1.0, "sequoia", domain=domain).source
        assert shown[prompt][1].count(Path(source).name) == 1, shown[prompt][1]


def test_the_planner_tab_leaves_the_header_plan_of_another_live_method(served, client):
    """The Planner tab plans Sequoia whatever the Live method; with the Live method a chain, the
    header's plan line (the tree the next Live run uses) stays the chain's instead of becoming the
    Planner's Sequoia plan, and the tab says which method the Live tab runs."""
    from engine import profiler
    pair = served["ctx"].worker.pair
    probs = [0.8, 0.1, 0.05] + [0.0] * 13
    profiler.save_acceptance(pair, profiler.AcceptanceVector(
        probs, 0.05, 2000, [0.01] * 16, pair.draft_name, pair.target_name, "sequoia", 0.9, 1.0, 16, 12,
        draft_kernels=profiler.draft_kernels(pair)))
    out = client.predict("chain", 8, 4, False, 0.9, 1, 0, "def f(x):", 64, api_name="/planner")
    assert out[0].startswith("The Live method is Chain;") and "Sequoia" in out[0], out[0]
    assert isinstance(out[-1], dict) and out[-1].get("__type__") == "update" and "value" not in out[-1], out[-1]
    out = client.predict("sequoia", 8, 4, False, 0.9, 1, 0, "def f(x):", 64, api_name="/planner")
    assert out[-1] == out[0] and "Plan: <b>Sequoia" in out[0], (out[0], out[-1])   # a Sequoia one: both


def test_the_race_tab_says_what_it_will_show_before_a_race(served):
    """Before any race the tab names the result table's columns (an empty table showed the
    headers 1, 2, 3) and says where each method's text and the chart will appear."""
    config = httpx.get(served["url"].rstrip("/") + "/config", timeout=30).json()
    by_id = {c["props"].get("elem_id"): c["props"] for c in config["components"] if c.get("props")}
    headers = by_id["sq-race-table"]["value"]["headers"]
    assert headers[:2] == ["method", "tokens"] and "speedup vs AR" in headers
    assert "Start race" in by_id["sq-lanes"]["value"]
    chart = json.loads(by_id["sq-race-chart"]["value"]["plot"])
    assert "one line per method" in chart["layout"]["annotations"][0]["text"]


SCRIPT_API = {"/generate", "/race", "/plan", "/measure", "/profile", "/load_models", "/check", "/replay",
              "/import_tree", "/stop", "/status"}   # README, The app


def test_the_api_page_lists_what_a_script_wants_with_names(client):
    """The page re-plans on every edit through its own events (/plan_on_budget, /first_plan...):
    19 of the 37 endpoints on the "Use via API" page. They stay callable with every input given."""
    info = client.view_api(return_format="dict", print_info=False)["named_endpoints"]
    listed = set(info)
    assert SCRIPT_API <= listed, SCRIPT_API - listed
    assert not {name for name in listed if name.startswith(("/plan_on", "/plan_after", "/planner_on", "/line_after"))
                or name in ("/first_plan", "/set_learn", "/pick_example")}, sorted(listed)
    unnamed = {(name, part["component"], part["label"]) for name, endpoint in info.items()
               for part in endpoint["parameters"] + endpoint["returns"]
               if part["label"].startswith(("value_", "parameter_"))}
    assert not unnamed, sorted(unnamed)   # every input and output says what it is
    plan = client.predict("sequoia", 9, 4, False, 0, 1, 0, "def f(x):", 64, api_name="/plan_on_prompt")[-1]
    assert plan["budget"] == 9


def test_the_readme_api_example_runs(served, capsys):
    """The README's gradio_client example, run as written against this served pair."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = readme.split("<!-- api-example:", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    exec(block.replace("http://127.0.0.1:7860/", served["url"]), {})
    lines = [line for line in capsys.readouterr().out.strip().splitlines() if not line.startswith("Loaded as API")]
    assert len(lines) >= 2 and lines[0].startswith("1 ") and "accepted ranks" in lines[0], lines
    assert lines[-1].endswith(("eos", "max_new_tokens")) and "tokens/s" in lines[-1], lines


def test_the_last_step_data_holds_the_answer_without_its_eos():
    """/generate's last step data: `answer` is the text without the EOS token that ended it (the
    served tiny pair never emits its EOS: here a token of its greedy answer is made the EOS)."""
    from app.live import Run
    from engine import methods
    from engine.decoding import generate_ids
    from engine.models import encode_prompt
    from engine.settings import Settings
    from tests.tiny import greedy_reference, tiny_pair, with_eos
    pair = tiny_pair("llama")
    ids = encode_prompt(pair, "hello world", chat=False)
    settings = Settings(max_new_tokens=12)
    out, events = generate_ids(with_eos(pair, greedy_reference(pair, ids, 12)[5]), ids, methods.chain(3), settings)
    run = Run(settings)
    run.events.extend(events)
    last = run.data()
    assert last["finish_reason"] == "eos" and last["text"] == pair.tokenizer.decode(out)
    assert last["answer"] == pair.tokenizer.decode(out[:-1]) != last["text"]
    assert all("answer" not in run.data(ev) for ev in events[:-1])


class _Job:
    def __init__(self, name="generate"):
        self.name, self.done = name, False

    def stop(self):
        self.done = True


def test_stops_follow_up_puts_back_only_the_last_line_of_the_run_it_stopped():
    """Session.line_after_stop, which each tab's Stop is followed by (the reply can reach the page
    after the run's last line): the line comes back only for the tab whose run that Stop stopped,
    once it has ended, and once."""
    from app.live import stop_reply
    from app.state import Session
    sess = Session()
    sess.job = _Job()
    sess.run_going("live")
    assert sess.stop_tab("live") == "live" and sess.job.done
    assert sess.line_after_stop("live") is None   # not ended yet: its last line is still to come
    sess.run_ended("live", "✓ Done (stopped)")
    assert sess.line_after_stop("live") == "✓ Done (stopped)"
    assert sess.line_after_stop("live") is None   # once
    # a Stop with nothing going keeps its "Nothing is running" reply (no earlier run's line back)
    assert sess.stop_tab("live") is None and sess.line_after_stop("live") is None
    assert stop_reply(None, "live") == "Nothing is running in this tab."
    # the job ended but its handler has not shown its last line yet: still this tab's run
    sess.run_going("live")
    assert sess.stop_tab("live") == "live" and stop_reply("live", "live").startswith("■ stopping after")
    sess.run_ended("live", "✓ Done (max new tokens reached)")
    assert sess.line_after_stop("live") == "✓ Done (max new tokens reached)"
    # the planner's measurement, stopped from its own Stop
    sess.aux = _Job("measure acceptance")
    sess.run_going("planner")
    assert sess.stop_tab("planner") == "planner" and sess.aux.done
    sess.run_ended("planner", "measured over 96 positions")
    assert sess.line_after_stop("planner") == "measured over 96 positions"
    # a Live plan's own measurement (no tab's run) is the Live tab's
    older, newer = _Job("plan"), _Job("plan")   # two re-plans' measurements: the Stop stops both
    sess.add_plan_job(older)
    sess.add_plan_job(newer)
    assert sess.stop_tab("live") == "live" and older.done and newer.done


def test_generate_and_start_race_refused_while_a_run_goes_name_the_tab_to_stop_it_in():
    """A page runs one run or race at a time; the refusal named "this tab" even when the run going
    was the other tab's, whose Stop (now per tab) is the one that ends it."""
    from app.state import Session
    sess = Session()
    sess.refuse_if_running()   # nothing going: no refusal
    for name, tab, what in (("race", "Race", "a race"), ("generate", "Live", "a Live run")):
        sess.job = _Job(name)
        with pytest.raises(UserError, match=f"^{what} is already going: press Stop in the {tab} tab first$"):
            sess.refuse_if_running()
        sess.job.stop()
        sess.refuse_if_running()


def test_only_the_newest_plan_or_planner_redraw_asked_for_is_shown():
    """Plans (and Planner redraws) of one page run side by side: one asked for earlier but ending
    later must not replace the newest; the two kinds keep their own tickets."""
    from app.state import Session
    sess = Session()
    first = sess.plans.ask()
    view = sess.planner_views.ask()
    assert not sess.plans.superseded(first) and not sess.planner_views.superseded(view)
    second = sess.plans.ask()
    assert sess.plans.superseded(first) and not sess.plans.superseded(second)
    assert not sess.planner_views.superseded(view)   # a plan asked for is no newer Planner redraw


SLOT_OF_JOB = {"generate": "job", "race": "job", "plan": "plan_jobs", "measure acceptance": "aux",
               "profile device": "aux", "check pair": "check_job", "load models": "load_job"}
PAGE_TAB = {"load": "Models"}   # the tab a Stop that is not a tab's own is in


@pytest.mark.parametrize("job_name,tab,other", [("race", "live", "planner"), ("generate", "race", "planner"),
                                                ("plan", "race", "planner"),
                                                ("measure acceptance", "live", "race"),
                                                ("profile device", "race", "live"),
                                                ("check pair", "planner", "live"),
                                                ("load models", "live", "models")])
def test_a_tabs_stop_leaves_another_tabs_job_going_and_says_where_its_stop_is(job_name, tab, other):
    """Each tab's Stop stops only its own tab's jobs: the Live Stop pressed while a race goes
    leaves the race running (it stopped it before) and says the race's Stop is in the Race tab."""
    from app.live import stop_reply
    from app.state import JOB_KINDS, Session
    sess = Session()
    job = _Job(job_name)
    setattr(sess, SLOT_OF_JOB[job_name], [job] if job_name == "plan" else job)
    owner = JOB_KINDS[job_name].tab
    if owner != "models" and job_name != "plan":   # runs and Planner measurements record a status line
        sess.run_going(owner)
    for pressed in (tab, other):
        stopped = sess.stop_tab(pressed)
        assert not job.done and stopped == job_name, (pressed, stopped)
        reply = stop_reply(stopped, pressed)
        assert reply.startswith("Nothing is running in this tab;") and (
            f"{PAGE_TAB.get(owner, owner.title())} tab" in reply), reply
        assert sess.line_after_stop(pressed) is None
    assert sess.stop_tab(owner) == owner and job.done
    assert stop_reply(owner, owner).startswith("■ stopping after")


def test_every_job_the_worker_submits_has_a_tab_and_words():
    """A job name the page has no entry for would wait unnamed ("another job") and no tab's Stop
    would stop it: every name engine/worker.py submits is in app/state.JOB_KINDS."""
    import inspect
    import re
    from app.state import JOB_KINDS
    from engine import worker
    names = set(re.findall(r'self\.submit\("([^"]+)"', inspect.getsource(worker))) | {worker.LOAD_JOB, worker.PROFILE_JOB}
    assert len(names) == 7 and names == set(JOB_KINDS), names ^ set(JOB_KINDS)


def test_a_page_that_goes_away_leaves_its_pair_load_going():
    """A pair load is every page's: the page that asked for it going away stops its runs, not it."""
    from app.state import Session
    sess = Session()
    sess.job, sess.load_job = _Job("generate"), _Job("load models")
    assert sess.stop_all() and sess.job.done and not sess.load_job.done


def test_a_stopped_load_says_which_pair_is_in_use():
    from app.models_tab import load_stopped_text
    from engine.jobs import DROPPED_THE_PAIR, KEPT_THE_PAIR, UNPROFILED
    pair = {"draft": "d", "target": "t"}
    assert load_stopped_text(True, KEPT_THE_PAIR, pair) == ("■ Load stopped before the models loaded. The pair in "
                                                            "use is `d` → `t`.")
    assert load_stopped_text(True, KEPT_THE_PAIR, None) == ("■ Load stopped before the models loaded. No pair is "
                                                            "loaded.")
    assert "`d` → `t` is loaded, without a device profile" in load_stopped_text(True, UNPROFILED, pair)
    assert "unloaded to make room" in load_stopped_text(True, DROPPED_THE_PAIR, None)
    # stopped while it waited behind another job (the app's first load, say): whatever pair that left
    assert load_stopped_text(False, None, pair) == "■ Load stopped before it started. The pair in use is `d` → `t`."
    assert load_stopped_text(False, None, None) == "■ Load stopped before it started. No pair is loaded."


def test_a_side_job_of_one_tab_never_hides_another_tabs_from_its_stop():
    """The Planner's measurement, a Live re-plan's measurement and the Models check each keep their
    own slot: one slot for all three let a later one replace the Planner's, whose Stop then said
    "stopping" and stopped nothing (and a plan's measurement was called "the Live run")."""
    from app.live import stop_reply
    from app.state import Session
    sess = Session()
    measuring, planning, checking = _Job("measure acceptance"), _Job("plan"), _Job("check pair")
    sess.aux = measuring
    sess.run_going("planner")
    sess.add_plan_job(planning)
    sess.check_job = checking
    assert "measurement goes on (its Stop is in the Planner tab)" in stop_reply(sess.stop_tab("race"), "race")
    sess.aux = None
    assert "plan is measuring what it needs" in stop_reply(sess.stop_tab("race"), "race")
    sess.aux = measuring
    assert sess.stop_tab("planner") == "planner" and measuring.done and not planning.done and not checking.done
    assert sess.stop_tab("live") == "live" and planning.done and not checking.done
    assert sess.stop_all() and checking.done


def test_a_stop_takes_back_its_tabs_waiting_runs_once_each():
    """Session.take_back / was_taken_back: the handler of an event a Stop found waiting ends at
    once when it starts, once; other events run; old marks are forgotten. stop_reply names them."""
    from app.live import stop_reply
    from app.state import Session
    sess = Session()
    sess.take_back({"a", "b"})
    assert sess.was_taken_back({"a"}) and not sess.was_taken_back({"a"})   # once
    assert not sess.was_taken_back({"c"}) and not sess.was_taken_back(set())
    assert sess.was_taken_back({"b", "c"})
    sess.take_back(f"id{i}" for i in range(70))
    assert len(sess.taken_back) == 64 and not sess.was_taken_back({"id0"}) and sess.was_taken_back({"id69"})
    assert stop_reply(None, "race", ["race"]) == "■ The race waiting for the model will not start."
    assert stop_reply("generate", "race", ["race"] * 2) == "■ The 2 races waiting for the model will not start."
    assert stop_reply("live", "live", ["Live run"]) == ("■ stopping after the current step… (the Live run waiting "
                                                        "for the model will not start)")
    assert stop_reply(None, "planner", ["profile", "measurement", "profile"]) == (
        "■ The 2 profiles and the measurement waiting for the model will not start.")


def test_a_stopped_live_run_says_stopped_not_done():
    """A Live run's last line: a Stop during the prefill said "✓ Done (stopped): 0 tokens in 0 steps
    ... Drag Replay a step"; now it says it stopped before the first step, a run stopped later says
    "■ Stopped" with what it made, and only a run of 2 or more steps points at the replay slider."""
    from types import SimpleNamespace
    from app.live import STOPPED_BEFORE_A_STEP, _run_status

    def last(reason, steps, tokens):
        return SimpleNamespace(done=True, finish_reason=reason, total_tokens=tokens, total_steps=steps,
                               tokens_per_step=tokens / max(steps, 1), tokens_per_second=2.0)
    run = SimpleNamespace(label="Sequoia n=8 d=4", replanned_words=lambda: "", settings_words=lambda: "greedy (T = 0)",
                          slower_than_profiled=lambda ev: "")
    assert _run_status(last("stopped", 0, 0), run) == STOPPED_BEFORE_A_STEP
    line = _run_status(last("stopped", 5, 12), run)
    assert line.startswith("■ Stopped: **12 tokens in 5 steps**") and "Done" not in line and "Replay" in line
    line = _run_status(last("eos", 1, 3), run)
    assert line.startswith("✓ Done (the model ended its answer): **3 tokens in 1 step**") and "Replay" not in line


def test_a_run_much_slower_than_the_device_profile_says_the_machine_may_be_busy():
    """The same run read 1.1 tokens/s beside a busy machine and 5.7 later, under the same predicted
    speedup, and nothing said why: a run whose steps took 2.5x the profile's time says so."""
    from types import SimpleNamespace
    from app.live import Run, _run_status
    from engine.settings import Settings
    run = Run(Settings(), SimpleNamespace(predicted_seconds_per_step=0.1, method=SimpleNamespace(label="chain d=4")))
    run.replanned_words = lambda: ""

    def last(seconds, steps=10):
        return SimpleNamespace(done=True, finish_reason="max_new_tokens", total_tokens=30, total_steps=steps,
                               tokens_per_step=3.0, tokens_per_second=30 / seconds, total_seconds=seconds)
    assert "Its steps took 3.0× the time the device profile predicts: the machine may be busy" in _run_status(
        last(3.0), run)
    assert "busy" not in _run_status(last(2.0), run)             # 2x: within what a profile's drift explains
    assert "busy" not in _run_status(last(3.0, steps=2), run)    # too few steps to say
    run.plan = SimpleNamespace(predicted_seconds_per_step=None, method=SimpleNamespace(label="chain d=4"))
    assert "busy" not in _run_status(last(30.0), run)            # no device profile: nothing to compare with


def test_a_live_runs_last_line_and_step_data_name_the_sampling_it_used():
    """A helper's walk-through: after a sampled run nothing on screen said at which temperature,
    top-k, top-p and seed it ran (the sliders read the next run's values by then)."""
    from types import SimpleNamespace
    from app.live import Run, _run_status
    from engine.settings import Settings
    ev = SimpleNamespace(done=True, finish_reason="max_new_tokens", total_tokens=24, total_steps=8,
                         tokens_per_step=3.0, tokens_per_second=2.0, step=8, method="sequoia", text="x",
                         new_text="", new_token_ids=[], accepted_ranks=[], tree_parents=[-1], draft_seconds=0,
                         verify_seconds=0, other_seconds=0, prefill_seconds=0, total_seconds=1, answer="x", nodes=[])
    sampled = Run(Settings(temperature=0.7, top_p=0.9, top_k=40, seed=7))
    sampled.plan = SimpleNamespace(method=SimpleNamespace(label="Sequoia n=4 d=3", sampler="sequoia"))
    assert _run_status(ev, sampled).endswith("tokens/s with Sequoia n=4 d=3, sampled at T = 0.7, top-k 40, "
                                             "top-p 0.9, seed 7. Drag *Replay a step* to look at any step.")
    assert (sampled.data(ev)["temperature"], sampled.data(ev)["top_k"], sampled.data(ev)["seed"]) == (0.7, 40, 7)
    assert ", greedy (T = 0)." in _run_status(ev, Run(Settings(top_k=40)))
    assert "top-k off" in Run(Settings(temperature=1.0)).settings_words()


def test_race_lanes_keep_their_method_colour_and_say_why_they_have_no_step():
    """A helper's walk-through: with Chain and SpecInfer left out, Sequoia DP took Chain's colour
    (colours went by the lanes' positions); a race that failed left each lane reading "waiting";
    a race stopped before its first step drew empty 0-1 axes; a lane's answer ended in a raw
    <|im_end|>."""
    import json
    from types import SimpleNamespace
    from app.race import RACE_LABELS, _chart, _lane_html, lane_color
    ar, dp, auto = RACE_LABELS["ar"], RACE_LABELS["sequoia"], RACE_LABELS["sequoia-auto"]
    every = list(RACE_LABELS.values())
    assert [lane_color(lane, k) for k, lane in enumerate([ar, dp, auto])] == [
        lane_color(lane, every.index(lane)) for lane in (ar, dp, auto)]
    assert len({lane_color(lane, k) for k, lane in enumerate(every)}) == len(every)
    chart = _chart({ar: [(0.5, 4)], auto: [(0.4, 6)]}, {})
    assert [t.line.color for t in chart.data] == [lane_color(ar, 0), lane_color(auto, 4)]
    failed = _lane_html([ar, dp], {ar: {}, dp: {}}, ended="did not run: the race failed")
    assert failed.count("did not run: the race failed") == 2 and "waiting" not in failed
    assert "waiting" in _lane_html([ar], {ar: {}})   # while the race goes
    empty = json.dumps(_chart({ar: [], dp: []}, {}, ended="Stopped before any lane's first step").to_dict())
    assert "Stopped before any lane" in empty
    # a Stop in the warm-up or prefill still ends each lane with a point at 0 tokens, 0 s
    zero = json.dumps(_chart({ar: [(0.0, 0)], dp: [(0.0, 0)]}, {}, ended="Stopped before any lane's first step")
                      .to_dict())
    assert "Stopped before any lane" in zero
    going = SimpleNamespace(text="def", done=False, finish_reason=None, total_tokens=1, total_steps=1,
                            tokens_per_step=1.0, tokens_per_second=1.0)
    assert "· failed" in _lane_html([ar], {ar: {"last": going}}, unfinished=" · failed")
    ended = SimpleNamespace(text="def f(): pass<|im_end|>", answer="def f(): pass", new_text=" pass<|im_end|>",
                            done=True, finish_reason="eos", total_tokens=5, total_steps=2, tokens_per_step=2.5,
                            tokens_per_second=3.0)
    html = _lane_html([dp], {dp: {"last": ended}})
    assert 'def f(): pass<span class="sq-eos"' in html and "&lt;|im_end|&gt;</span>" in html


def test_a_stopped_greedy_race_is_checked_on_what_both_lanes_generated():
    """A Stop ends the lanes at different lengths; the greedy check compared whole texts and said
    "✗ Greedy check failed" for a race that was only stopped. It now compares what both generated,
    and a stopped lane that differs within it still fails."""
    from types import SimpleNamespace
    from app.race import RACE_LABELS, _lane_html, _summary, _table

    def lane(ids, reason):
        return {"last": SimpleNamespace(token_ids=ids, finish_reason=reason, done=True, text="", total_tokens=len(ids),
                                        total_steps=1, tokens_per_step=1.0, tokens_per_second=1.0,
                                        total_seconds=1.0, prefill_seconds=0.0)}
    ar, chain = RACE_LABELS["ar"], RACE_LABELS["chain"]
    stopped = {ar: lane([1, 2, 3], "stopped"), chain: lane([1, 2, 3, 4, 5], "stopped")}
    summary = _summary([ar, chain], stopped, greedy=True)
    assert summary["identical"] is True and summary["verdict"].startswith("■ **Stopped early:**")
    assert [row[-1] for row in _table([ar, chain], stopped, True)["data"]] == ["✓ same so far (stopped)"] * 2
    # a lane the Stop ended before its first step: no speed, not compared, and the verdict says so
    spec = RACE_LABELS["specinfer"]
    unstarted = lane([], "stopped")
    unstarted["last"].total_steps, unstarted["last"].tokens_per_second = 0, 0.0
    three = {**stopped, spec: {**unstarted, "label": "SpecInfer 2x4"}}
    summary = _summary([ar, chain, spec], three, greedy=True)
    assert summary["lanes"][2]["speedup"] is None and summary["lanes"][2]["same_as_autoregressive"] is None
    assert "that was compared matches" in summary["verdict"] and (
        "Not compared (no tokens before the Stop): SpecInfer 2x4." in summary["verdict"]), summary["verdict"]
    # one step a lane: the speeds are said to be noise (a 2-level chain's one step read 0.50x)
    assert summary["verdict"].endswith("Speeds over as few as 1 step say little: the first steps are mostly "
                                       "timing noise."), summary["verdict"]
    for lane_ in stopped.values():
        lane_["last"].total_steps = 8
    assert "say little" not in _summary([ar, chain], stopped, greedy=True)["verdict"]
    for lane_ in stopped.values():
        lane_["last"].total_steps = 1
    # at T > 0 a SpecInfer lane has no prediction, and the verdict says why
    sampled = _summary([ar, chain, spec], three, greedy=False)["verdict"]
    assert "SpecInfer's predicted tokens/step is — here" in sampled and "--sampler specinfer" in sampled, sampled
    row = _table([ar, chain, spec], three, True)["data"][2]
    assert row[3:8] == ["—", "—", "—", "—", "—"] and row[-1] == "— (stopped before a token)", row
    # numbers as the lanes show them (the table's 1.0 read "1", and tok/s had one decimal)
    assert _table([ar, chain, spec], three, True)["data"][0][3:6:2] == ["1.00", "1.00"]
    planned = {**stopped, chain: {**stopped[chain], "expected": 2.5}}   # the lane's plan's F(tree)
    assert [row[4] for row in _table([ar, chain], planned, True)["data"]] == ["—", "2.50"]
    assert "3 tokens · 1 step · 1.00 tok/step · 1.00 tok/s" in _lane_html([ar], stopped)
    # at T > 0 texts differ by design: no lane is said to differ from autoregressive's
    assert [x["same_as_autoregressive"] for x in _summary([ar, chain], stopped, greedy=False)["lanes"]] == [None, None]
    assert "stopped before its first step" in _lane_html([ar, chain, spec], three)
    assert "· stopped" in _lane_html([ar], stopped) and "· done" not in _lane_html([ar], stopped)
    wrong = {ar: lane([1, 2, 3], "stopped"), chain: lane([1, 9, 3, 4], "stopped")}
    assert _summary([ar, chain], wrong, greedy=True)["verdict"].startswith("✗ **Greedy check failed:**")
    assert _table([ar, chain], wrong, True)["data"][1][-1] == "✗ differs"
    finished = {ar: lane([1, 2, 3], "max_new_tokens"), chain: lane([1, 2, 3, 4], "max_new_tokens")}
    assert _summary([ar, chain], finished, greedy=True)["identical"] is False   # whole texts when neither stopped
    # a lane that ended on its own (EOS) bounds the other: a stopped lane past it ran past the EOS
    for ended, going in (([1, 2, 3], [1, 2, 3, 4]), ([1, 2, 3, 4], [1, 2, 3])):
        for ar_lane, other in ((lane(ended, "eos"), lane(going, "stopped")),
                               (lane(going, "stopped"), lane(ended, "eos"))):
            same = _summary([ar, chain], {ar: ar_lane, chain: other}, greedy=True)["identical"]
            assert same is (len(going) <= len(ended)), (ended, going, ar_lane["last"].finish_reason)
    # the autoregressive lane longer than a stopped lane, and nothing generated at all
    assert _summary([ar, chain], {ar: lane([1, 2, 3, 4], "stopped"), chain: lane([1, 2], "stopped")},
                    greedy=True)["identical"] is True
    nothing = {ar: lane([], "stopped"), chain: lane([], "stopped")}
    assert _summary([ar, chain], nothing, greedy=True)["identical"] is None
    assert _table([ar, chain], nothing, True)["data"][1][-1].startswith("— ")
    # mid-race: the autoregressive lane has ended, another is still going (it said "✗ differs")
    going = {ar: lane([1, 2, 3, 4], "eos"), chain: lane([1, 2], None)}
    going[chain]["last"].done = False
    assert _table([ar, chain], going, True)["data"][1][-1] == "✓ same so far"


def test_a_message_for_the_user_prints_no_traceback_to_the_server_log(client, capfd):
    """Gradio printed a traceback to the server's stderr for every gr.Error a handler raised (17 in
    one walk through the page's bad fields); the page's messages are not server faults."""
    capfd.readouterr()
    with pytest.raises(Exception, match="prompt is empty"):
        client.predict("   ", "sequoia", 8, 4, False, 0, 1, 8, 0, api_name="/generate")
    with pytest.raises(Exception, match="must be at least"):
        client.predict(PROMPT, "sequoia", 8, 4, False, 0, 1, -5, 0, api_name="/generate")
    err = capfd.readouterr().err
    assert "Traceback" not in err and "gradio.exceptions.Error" not in err, err[-2000:]


def test_the_status_and_done_line_say_when_and_why_the_running_tree_changed():
    """The Done line named only the plan the run started from ("… with Sequoia n=8 d=4." after
    learning had moved it to 6 nodes), and a budget moved from 8 to 4 mid-run was drawn with 4
    nodes while the status line still said "Sequoia n=8 d=4: step 13". A cut at the context limit
    is no change of plan; a change before the first step counts."""
    from types import SimpleNamespace
    from app.live import Run, _run_status
    from engine.settings import Settings
    from engine.tree import Tree
    eight, four = Tree.from_parents([-1, 0, 0, 1, 1, 2, 3, 4]), Tree.from_parents([-1, 0, 1, 2])

    def step(i, tree, done=False, planned=None):
        return SimpleNamespace(nodes=[1], tree_parents=list(tree.parents), step=i, total_tokens=2 * i, done=done,
                               total_steps=i, tokens_per_step=2.0, tokens_per_second=3.0,
                               finish_reason="max_new_tokens", planned_parents=planned)

    def fresh():
        run = Run(Settings())
        run.plan = SimpleNamespace(tree=eight, method=SimpleNamespace(label="Sequoia n=8 d=4"))
        return run
    run = fresh()
    assert run.replanned_words() == ""   # no step yet
    run.events = [step(1, eight), step(2, eight)]
    assert _run_status(run.events[-1], run).startswith("● Sequoia n=8 d=4: step 2") and run.replanned_words() == ""
    run.events += [step(3, four)]
    assert _run_status(run.events[-1], run).startswith("● Sequoia n=8 d=4, now n=4 d=4: step 3")
    run.events += [step(4, four, done=True)]
    assert " (its tree changed 1 time during the run; the last one n=4 d=4)" in _run_status(run.events[-1], run)
    run.learning = {"tree_changes": 0, "user_changes": 1}
    assert run.replanned_words() == " (its tree changed 1 time during the run, by the page's controls; the last one n=4 d=4)"
    run.learning = {"tree_changes": 2, "user_changes": 0}
    assert run.replanned_words().startswith(" (its tree changed 1 time during the run, by learning;")
    # a change before the first step: the plan's tree is the first one compared
    run = fresh()
    run.events = [step(1, four), step(2, four)]
    assert run.replanned_words().startswith(" (its tree changed 1 time") and "now n=4" in run.label_now
    # cut at the context limit: the steps' planned tree is the plan's, so no change is said
    run = fresh()
    cut = Tree.from_parents([-1, 0, 0])
    run.events = [step(1, eight), step(2, cut, planned=list(eight.parents)), step(3, cut, planned=list(eight.parents))]
    assert run.replanned_words() == "" and run.label_now == "Sequoia n=8 d=4"
