"""Plot units on hand-made StepEvents: one marker per node, the accepted path highlighted,
layouts stable per tree shape, observed acceptance counted right, text marked by step."""
import re
from dataclasses import replace

import pytest

from app import plots, render
from engine.decoding import NodeRecord, StepEvent
from engine.tree import Tree


def hand_made_event(step=3):
    # root -> (1 accepted, 2 rejected); 1 -> (3 rejected, 4 accepted); 2 -> 5 never checked; bonus after 4
    parents = [-1, 0, 0, 1, 1, 2]
    spec = [("root", "a", None, None), ("accepted", "b", 0.5, 0.6), ("rejected", "c", 0.3, 0.1),
            ("rejected", "d", 0.4, 0.2), ("accepted", "e", 0.3, 0.5), ("unreached", "f", None, None)]
    tree = Tree(tuple(parents))
    nodes = [NodeRecord(i, 10 + i, text, parents[i], tree.depth_of[i], tree.rank[i], q, p, status)
             for i, (status, text, q, p) in enumerate(spec)]
    nodes.append(NodeRecord(6, 99, " g", 4, 3, 0, None, 0.7, "bonus"))
    return StepEvent(step=step, method="sequoia", tree_parents=parents, nodes=nodes, accepted_path=[0, 1, 4],
                     accepted_ranks=[1, 2], new_token_ids=[11, 14, 99], new_text="be g", draft_seconds=0.01,
                     verify_seconds=0.02, other_seconds=0.001, total_tokens=3 * step, total_steps=step,
                     total_seconds=0.1 * step, prefill_seconds=0.05, text="xx" * (step - 1) + "be g")


def node_traces(fig):
    return [t for t in fig.data if t.meta in plots.STATUS_COLORS]


def test_tree_figure_has_one_marker_per_node_coloured_by_status():
    ev = hand_made_event()
    fig = plots.tree_figure(ev, greedy=True)
    traces = node_traces(fig)
    assert sum(len([x for x in t.x if x is not None]) for t in traces) == len(ev.nodes) == 7
    by_status = {t.meta: t for t in traces}
    for status, color in plots.STATUS_COLORS.items():
        assert by_status[status].marker.color == color
    assert len(by_status["accepted"].x) == 2 and len(by_status["bonus"].x) == 1
    assert fig.layout.uirevision == plots.UIREVISION


def test_a_never_checked_node_says_why_it_was_not_tried():
    """Every unchecked node read "an ancestor was rejected", the later siblings of an accepted
    node too (a step with nothing rejected said it of all of them)."""
    #  0 root -> 1 accepted, 2 (after it);  1 -> 3 rejected, 4 accepted, 5 (after it)
    #  2 -> 6;  3 -> 7 -> 9;  4 -> 8 accepted end of text -> 10
    parents = [-1, 0, 0, 1, 1, 1, 2, 3, 4, 7, 8]
    statuses = ["root", "accepted", "unreached", "rejected", "accepted", "unreached", "unreached", "unreached",
                "accepted", "unreached", "unreached"]
    tree = Tree(tuple(parents))
    nodes = [NodeRecord(i, 10 + i, f"t{i}", parents[i], tree.depth_of[i], tree.rank[i], None, None, status)
             for i, status in enumerate(statuses)]
    ev = replace(hand_made_event(), tree_parents=parents, nodes=nodes, accepted_path=[0, 1, 4, 8],
                 accepted_ranks=[1, 2, 1])
    hover = {}   # node index (its token id less 10) -> the hover's last line, the verdict
    for trace in node_traces(plots.tree_figure(ev, greedy=True)):
        for text in trace.hovertext or ():
            hover[int(re.search(r"id (\d+)", text).group(1)) - 10] = text.split("<br>")[-1]
    assert hover[2] == hover[5] == "never checked: a sibling was accepted first", hover
    assert hover[6] == "never checked: a sibling of an ancestor was accepted first"
    assert hover[7] == "never checked: its parent was rejected"
    assert hover[9] == "never checked: an ancestor was rejected"
    assert hover[10] == "never checked: the answer ended before it"


def test_a_step_cut_at_max_new_tokens_fades_what_it_did_not_keep():
    """The last step of a run that max new tokens cut kept 1 of its 3 tokens: the tree drew the
    whole accepted path and bonus as if they were in the answer."""
    ev = replace(hand_made_event(), new_token_ids=[11], new_text="b", done=True, finish_reason="max_new_tokens")
    fig = plots.tree_figure(ev, greedy=True)
    faded, hover = {}, {}
    for trace in node_traces(fig):
        opacity = trace.marker.opacity if isinstance(trace.marker.opacity, tuple) else [trace.marker.opacity] * len(trace.x)
        for text, alpha in zip(trace.hovertext or (), opacity):
            index = int(re.search(r"id (\d+)", text).group(1))
            faded[index], hover[index] = alpha < 1, text
    assert [i for i, f in sorted(faded.items()) if f] == [14, 99]   # node 4 (accepted) and the bonus
    assert "not kept" in hover[14] and "not kept" in hover[99] and "not kept" not in hover[11]
    assert "the faded ones are not kept" in fig.layout.title.text
    whole = plots.tree_figure(replace(ev, new_token_ids=[11, 14, 99]), greedy=True)   # it fitted exactly
    assert "not kept" not in whole.layout.title.text
    assert all(t.marker.opacity in (1.0, None) or min(t.marker.opacity) == 1.0 for t in node_traces(whole))


def test_accepted_path_is_drawn_thick_through_the_path_nodes():
    ev = hand_made_event()
    fig = plots.tree_figure(ev, greedy=False)
    pos = plots.tree_layout(tuple(ev.tree_parents))
    path = next(t for t in fig.data if t.name == "accepted path")
    edges = next(t for t in fig.data if t.name == "edges")
    assert list(zip(path.x, path.y)) == [pos[i] for i in ev.accepted_path]
    assert path.line.width >= 3 * edges.line.width
    assert path.line.color == plots.STATUS_COLORS["accepted"]
    hover = next(t for t in node_traces(fig) if t.meta == "rejected").hovertext[0]
    assert "rank 2 of 2" in hover and "q = 0.300" in hover and "p = 0.100" in hover
    # a node's parent is named by its token, as the chart labels it (not "node 1", shown nowhere)
    assert "under the root" in hover
    import html
    assert "rank 1 of 2 under 'b'" in html.unescape(next(t for t in node_traces(fig) if t.meta == "rejected").hovertext[1])
    assert "after 'e'" in html.unescape(next(t for t in node_traces(fig) if t.meta == "bonus").hovertext[0])


def test_layout_is_computed_once_per_shape_root_left_one_column_per_level():
    parents = (-1, 0, 0, 1, 1, 2)
    first = plots.tree_layout(parents)
    assert plots.tree_layout(parents) is first  # cached: nodes never jump between steps
    tree = Tree(parents)
    assert [x for x, _ in first] == [float(d) for d in tree.depth_of]
    # every parent sits midway between its first and last child; siblings keep rank order top-down
    assert first[1][1] == (first[3][1] + first[4][1]) / 2
    assert first[3][1] > first[4][1] > first[5][1]


def test_big_tree_stays_readable():
    from engine.planning import table_for
    tree = table_for([0.5, 0.2, 0.1, 0.05, 0.03]).tree(128, 10)
    ev = hand_made_event()
    ev.tree_parents = list(tree.parents)
    path = [0] + [c for c in [tree.children[0][0]]]
    ev.accepted_path = path
    ev.nodes = [NodeRecord(i, i, f"t{i}", tree.parents[i], tree.depth_of[i], tree.rank[i], 0.1, 0.1,
                           "root" if i == 0 else ("accepted" if i in path else "unreached"))
                for i in range(tree.size)]
    fig = plots.tree_figure(ev, greedy=True)
    traces = node_traces(fig)
    assert sum(len([x for x in t.x if x is not None]) for t in traces) == 128
    labels = [s for t in traces for s in (t.text or []) if s]
    assert len(labels) < 128  # crowded: only the path keeps its labels
    assert all(h for t in traces for h in (t.hovertext or []))  # hover never hides


def test_plan_figure_one_marker_per_node():
    tree = Tree.from_branching([3, 2, 1, 1])
    fig = plots.plan_figure(tree, [0.6, 0.2, 0.1])
    marks = next(t for t in fig.data if t.meta == "planned")
    assert len(marks.x) == tree.size
    # its shading is no run status (the page's legend lists those): the title says what it is
    assert "how likely each node is reached" in fig.layout.title.text and fig.layout.margin.t > 44
    assert "how likely" not in plots.plan_figure(tree).layout.title.text   # no vector: no shading


def test_observed_acceptance_counts_trials_per_rank():
    ev = hand_made_event()
    # root: 2 children, rank 1 accepted; node 1: 2 children, rank 2 accepted; node 4: leaf
    assert plots.observed_acceptance([ev], 3) == [(1, 2), (1, 2), (0, 0)]
    final = StepEvent(step=4, method="sequoia", tree_parents=[-1], nodes=[], accepted_path=[0], accepted_ranks=[],
                      new_token_ids=[], new_text="", draft_seconds=0, verify_seconds=0, other_seconds=0,
                      total_tokens=3, total_steps=3, total_seconds=0.3, prefill_seconds=0.05, text="", done=True,
                      finish_reason="stopped")
    assert plots.observed_acceptance([ev, final], 2) == [(1, 2), (1, 2)]


def test_text_is_shaded_by_step_with_the_bonus_marked():
    events = [hand_made_event(1), hand_made_event(2)]
    events[1].text = events[0].text + events[1].new_text
    html = render.text_html(events)
    assert html.count('class="sq-step sq-s1"') == 1 + 1  # legend + step 1
    assert html.count('class="sq-step sq-s0"') == 1 + 1  # legend + step 2
    assert html.count('<span class="sq-bonus"> g</span>') == 2
    assert 'title="step 2: 2 drafted tokens accepted + 1 bonus token (3 new)"' in html


def test_the_token_that_ended_the_answer_is_shown_apart_from_it():
    """A helper's walk-through read "Peace in the sea.<|im_end|>" as the answer's last word."""
    ev = hand_made_event(1)
    # the target's bonus token " g" ended the answer
    bonus_end = replace(ev, done=True, finish_reason="eos", answer="be", text="be g")
    html = render.step_span(bonus_end)
    assert html.endswith('be<span class="sq-eos" title=" g: the end-of-answer token; the model ended its answer '
                         'here"> g</span></span>'), html
    assert "+ 1 bonus token" in html and "sq-bonus" not in html
    # a drafted token the target accepted ended it (no bonus token after it)
    accepted_end = replace(ev, done=True, finish_reason="eos", new_text="be", new_token_ids=[11, 14],
                           answer="b", text="be")
    html = render.step_span(accepted_end)
    assert '>b<span class="sq-eos"' in html and "sq-bonus" not in html
    # the EOS decoded in context differs from its text alone (" </s>" vs "</s>"): cut once, shown once
    spaced = replace(ev, done=True, finish_reason="eos", new_text="be </s>", answer="be", text="be </s>",
                     nodes=[*ev.nodes[:-1], replace(ev.nodes[-1], text="</s>")])
    html = render.step_span(spaced)
    assert html.count("&lt;/s&gt;") == 2 and '>be<span class="sq-eos"' in html, html   # the title and the box
    # an answer cut at max new tokens, or a step before the last, shows its text as it is
    assert "sq-eos" not in render.step_span(replace(ev, done=True, finish_reason="max_new_tokens", answer="be g"))
    assert "sq-eos" not in render.step_span(ev)


def test_other_charts_build():
    import numpy as np
    from engine.planner import choose_shape
    from engine.planning import table_for
    from engine.profiler import DeviceProfile
    table = table_for([0.6, 0.2, 0.1])
    prof = DeviceProfile({1: 0.01, 8: 0.012, 64: 0.03}, {1: 0.002, 8: 0.003}, 0.001, 16, 3, "d", "t", "cpu",
                         "float32")
    choice = choose_shape(table, prof.target_seconds, prof.draft_seconds, prof.overhead_seconds,
                          budgets=range(1, 33), depths=range(1, 9))
    assert plots.heatmap_figure(table.G, 32, 8, (choice.n, choice.d)).data[0].type == "heatmap"
    assert np.isfinite(plots.speedup_figure(choice.grid, (choice.n, choice.d)).data[1].y[0])
    assert len(plots.profile_figure(prof).data) == 2
    assert len(plots.acceptance_figure([0.6, 0.2], [(3, 5), (1, 2)]).data) == 2
    assert len(plots.race_figure({"a": [(0.1, 2)], "b": [(0.2, 3)]}).data) == 2
    # lines named as the lanes and the table name their methods, the lane's name where none is planned
    names = [t.name for t in plots.race_figure({"a": [], "b": []}, labels={"a": "Sequoia n=8 d=4", "b": None}).data]
    assert names == ["Sequoia n=8 d=4", "b"]


def test_a_bonus_after_a_node_with_children_sits_clear_of_the_tree():
    """Accepted path root -> 1, then 1's children both rejected: the bonus follows node 1, which
    has children. Its marker must not sit on a node, and its dotted edge must not pass through one."""
    ev = hand_made_event()
    parents = ev.tree_parents
    nodes = [n if n.index != 4 else replace(n, status="rejected") for n in ev.nodes[:6]]
    nodes.append(replace(ev.nodes[6], parent=1, depth=2))
    ev = replace(ev, nodes=nodes, accepted_path=[0, 1], accepted_ranks=[1])
    fig = plots.tree_figure(ev, greedy=True)
    pos = plots.tree_layout(tuple(parents))
    bonus = next(t for t in node_traces(fig) if t.meta == "bonus")
    b = (bonus.x[0], bonus.y[0])
    assert b not in pos and pos[1][0] < b[0] < pos[3][0]  # between node 1 and its children's column
    edge = next(t for t in fig.data if t.name == "bonus edge")
    (x0, x1), (y0, y1) = edge.x, edge.y
    assert (x0, y0) == pos[1] and (x1, y1) == b
    for i, (x, y) in enumerate(pos):
        if i != 1 and min(x0, x1) <= x <= max(x0, x1):  # no other node on the segment
            assert abs((y - y0) * (x1 - x0) - (x - x0) * (y1 - y0)) > 1e-6, i
    for child in (3, 4):  # and the marker sits clear of the edges from node 1 to its children
        (cx, cy), (px, py) = pos[child], pos[1]
        edge_y = py + (cy - py) * (b[0] - px) / (cx - px)
        assert abs(edge_y - b[1]) >= 0.2, (child, edge_y, b)


def test_the_plan_line_says_once_what_learning_added():
    """The header names the measured vector, why it stands, and the learned evidence on one line
    of its own (it used to repeat the learned positions three times)."""
    from types import SimpleNamespace as NS
    base = NS(temperature=0.0, top_p=1.0, positions=1531, source="/c/acceptance/c86.json")
    pooled = NS(temperature=0.0, top_p=1.0, positions=2462,
                source="/c/acceptance/c86.json + learned from 931 positions over 23 runs")
    plan = NS(tree=Tree((-1, 0, 1, 2)), method=NS(label="Sequoia (hardware-aware)"), expected_tokens=3.23,
              predicted_speedup=1.72, acceptance=pooled, base_acceptance=base, measured_acceptance=base, exact=True,
              learned={"positions": 931, "runs": 23}, backing_positions=2462,
              acceptance_note="measured; a code prompt: the code vector, code and prose differ here; "
                              "pooled with 931 positions learned over 23 runs")
    html = render.plan_line(plan)
    assert html.count("931") == 1 and "plan backed by 2462 positions (931 learned over 23 runs)" in html
    assert "over 1531 positions" in html and "a code prompt: the code vector" in html


def test_the_plan_line_says_what_a_speedup_prediction_lacks():
    """No acceptance vector for the method's sampler (SpecInfer at T = 2, say): the plan line said
    "speedup: profile the device" on a profiled device; it says the vector is missing instead."""
    from types import SimpleNamespace as NS
    plan = NS(tree=Tree((-1, 0, 1)), method=NS(label="SpecInfer 1x3"), expected_tokens=None, predicted_speedup=None,
              acceptance=None, exact=True, learned=None, backing_positions=0,
              acceptance_note="no acceptance vector measured for the specinfer sampler at T=2: no prediction")
    html = render.plan_line(plan)
    assert "no prediction without an acceptance vector" in html and "profile the device" not in html
    plan.expected_tokens = 2.1
    assert "profile the device (Planner tab)" in render.plan_line(plan)


def _as_plotly_validates_it(fig):
    """The figure's JSON after plotly's own validation, which raises on unknown properties and
    rewrites shorthands (font_size -> font.size) that a browser would not understand."""
    import plotly.graph_objects as go
    return go.Figure(fig.to_dict()).to_plotly_json()


def test_per_step_figures_built_without_validation_are_valid_plotly():
    """tree_figure and acceptance_figure skip plotly's validation (app/plots.py _figure: it cost
    ~30 ms a figure, every step): what they build must be what validation would leave unchanged."""
    import pytest
    ev = hand_made_event()
    last = replace(ev, nodes=ev.nodes[:6], accepted_path=[0, 1], new_token_ids=[11])  # no bonus
    figures = [plots.tree_figure(ev, greedy=True), plots.tree_figure(ev, greedy=False, title="t", height=300),
               plots.tree_figure(last), plots.acceptance_figure(),
               plots.acceptance_figure([0.5, 0.2], plots.observed_acceptance([ev]), ci=[0.1, 0.05]),
               plots.acceptance_figure([0.5, 0.2], plots.observed_acceptance([ev]), posterior=[0.4, 0.3], title="x")]
    for fig in figures:
        assert _as_plotly_validates_it(fig) == fig.to_plotly_json()
    broken = plots._figure([dict(type="scatter", x=[1], marker=dict(colour="red"))], {})
    with pytest.raises(ValueError):  # the check catches a misspelt property
        _as_plotly_validates_it(broken)
    shorthand = plots._figure([], {"hoverlabel": {"font_size": 12}})
    assert _as_plotly_validates_it(shorthand) != shorthand.to_plotly_json()  # and a shorthand


def test_profile_axis_is_labelled_at_the_timed_sizes_only():
    from engine.profiler import DeviceProfile
    prof = DeviceProfile({1: 0.2, 2: 0.21, 8: 0.3, 32: 0.9}, {1: 0.05, 4: 0.06}, 0.001, 16, 3, "d", "t", "cpu",
                         "float32")
    axis = plots.profile_figure(prof).layout.xaxis
    assert list(axis.tickvals) == [1, 2, 4, 8, 32] and list(axis.ticktext) == ["1", "2", "4", "8", "32"]
    assert 10 ** axis.range[0] < 1 and 10 ** axis.range[1] > 32  # every timed size inside the plot


def test_speedup_curve_marks_budgets_past_the_profile_as_extrapolated():
    from engine.planner import choose_shape
    from engine.planning import table_for
    table = table_for([0.6, 0.2, 0.1])
    choice = choose_shape(table, {1: 0.01, 4: 0.011, 8: 0.014}, {1: 0.002, 8: 0.003}, 0.001,
                          budgets=range(1, 33), depths=range(1, 9))
    fig = plots.speedup_figure(choice.grid, (choice.n, choice.d), measured_up_to=8)
    solid, dashed = fig.data[0], fig.data[1]
    assert max(solid.x) == 8 and min(dashed.x) == 8 and max(dashed.x) == 32 and dashed.line.dash == "dash"
    star = next(t for t in fig.data if t.name == "chosen")
    assert fig.layout.yaxis.range[1] > star.y[0] * 1.1  # room for the star's label above it
    assert len(plots.speedup_figure(choice.grid, (choice.n, choice.d)).data) == 2  # no profile limit: one line


def test_an_imported_trees_marks_hold_its_own_values_not_the_best_of_its_shape():
    from engine.planner import choose_shape
    from engine.planning import table_for
    table = table_for([0.6, 0.2, 0.1])
    choice = choose_shape(table, {1: 0.01, 8: 0.014}, {1: 0.002, 8: 0.003}, 0.001,
                          budgets=range(1, 9), depths=range(1, 5))
    star = next(t for t in plots.speedup_figure(choice.grid, (6, 4), imported_speedup=0.5, imported=True).data
                if t.name == "imported tree")
    assert list(star.y) == [0.5] and "imported n=6, d=4" in star.text[0]
    # an imported tree without a predicted speedup gets no star (not the grid's, another tree's)
    assert [t.name for t in plots.speedup_figure(choice.grid, (6, 4), imported=True).data] == ["best depth per budget"]
    star = next(t for t in plots.speedup_figure(choice.grid, (6, 4)).data if t.name == "chosen")
    assert star.y[0] == choice.grid.speedup[5][3] and "imported" not in star.text[0]   # a plan's own: the grid's
    mark = next(t for t in plots.heatmap_figure(table.G, 8, 4, (6, 4), imported_tokens=1.234).data if t.name == "chosen")
    assert "its own 1.234 tokens/step" in mark.hovertemplate


def test_the_chosen_stars_label_keeps_off_the_curves():
    """"n=8, d=4" sat centred above its star on a curve that climbed on to larger budgets, and
    "n=6, d=4" on the steep start of the curve left of its star: the label goes where no drawn line
    crosses it (above first, then beside or below)."""
    from engine.planner import choose_shape
    from engine.planning import table_for
    rising = [1.0, 1.5, 2.0, 2.5, 3.0]
    assert plots.clear_place(3, 2.0, " n=3, d=4", [([1, 2, 3, 4, 5], rising)], (1, 5), (0, 3.6),
                              (120, 160)) == "top left"
    peak = [1.0, 1.5, 2.0, 1.5, 1.0]
    assert plots.clear_place(3, 2.0, " n=3, d=4", [([1, 2, 3, 4, 5], peak)], (1, 5), (0, 3.6),
                              (120, 160)) == "top center"
    # the Planner's case seen in Chromium: a plan past the curve's peak, the faint any-depth line
    # above the star and the steep start to its left: centred above or below-left it crossed them
    choice = choose_shape(table_for([0.8, 0.1, 0.05]), {1: 0.01, 8: 0.011, 32: 0.014}, {1: 0.001, 8: 0.0011},
                          0.0005, budgets=range(1, 129), depths=range(1, 17))
    fig = plots.speedup_figure(choice.grid, (6, 4), depth_cap=4)
    star = next(t for t in fig.data if t.name == "chosen")
    lines = [(list(t.x), list(t.y)) for t in fig.data if t.mode == "lines"] + [([1, 128], [1.0, 1.0])]
    top = fig.layout.yaxis.range[1]
    assert plots.clear_place(6, star.y[0], star.text[0], lines, (1, 128), (0, top), (560, 150)) == star.textposition
    for place in ("top center", "bottom left"):   # where it would have crossed a line
        assert place != star.textposition


def test_a_one_node_plan_is_marked_as_plain_decoding_not_with_the_depth_asked():
    from engine.planner import choose_shape
    from engine.planning import table_for
    choice = choose_shape(table_for([0.6, 0.2, 0.1]), {1: 0.01, 8: 0.014}, {1: 0.002, 8: 0.003}, 0.001,
                          budgets=range(1, 9), depths=range(1, 5))
    star = next(t for t in plots.speedup_figure(choice.grid, (1, 4)).data if t.name == "chosen")
    assert star.text[0].strip() == "n=1: plain decoding"


def test_the_live_chart_says_when_the_posterior_is_for_the_answers_rest():
    from app import live
    from engine.settings import Settings
    from engine import learning
    run = live.Run(Settings(temperature=0.0))
    from engine.answer_drift import Drift
    learner = learning.Learner([0.7, 0.1], drift=Drift(0.62, 64.0), opening=64)   # what the worker's Note carries
    run.learning = learner.state()
    assert [t.name for t in run.acc_fig().data][-1] == "posterior (plans the next steps)"
    learner.tokens = 64   # past the opening
    run.learning = learner.state()
    assert [t.name for t in run.acc_fig().data][-1] == \
        "posterior for the answer's rest (rank-1 misses x0.62 after 64 tokens)"
    learner = learning.Learner([0.7, 0.1], drift=Drift(1.0, 128.0), opening=64)   # a ratio not applied: the weight
    learner.tokens = 64
    run.learning = learner.state()
    assert [t.name for t in run.acc_fig().data][-1] == \
        "posterior for the answer's rest (prior worth 128 after 64 tokens)"
    from engine import prompt_memory
    two = prompt_memory.Remembered(learning.Evidence([30], [20], 30), learning.Evidence([90], [80], 90), 2)
    learner = learning.Learner([0.7, 0.1], drift=Drift(1.0, 128.0), opening=64, memory=two)
    learner.tokens = 64
    run.learning = learner.state()
    assert [t.name for t in run.acc_fig().data][-1] == ("posterior for the answer's rest (prior worth 128 after 64 "
                                                        "tokens),<br>with 90 positions remembered from 2 earlier runs of this prompt")   # the rests
    no_rests = prompt_memory.Remembered(learning.Evidence([30], [20], 30), learning.Evidence(), 2)   # short runs
    learner = learning.Learner([0.7, 0.1], drift=Drift(1.0, 128.0), opening=64, memory=no_rests)
    learner.tokens = 64
    run.learning = learner.state()
    assert [t.name for t in run.acc_fig().data][-1] == "posterior for the answer's rest (prior worth 128 after 64 tokens)"
    carried = prompt_memory.Remembered(learning.Evidence([30], [20], 30), learning.Evidence(), 1, "T=0.7")
    run.learning = learning.Learner([0.7, 0.1], memory=carried).state()   # a code prompt run at T = 0.7 only
    assert [t.name for t in run.acc_fig().data][-1] == ("posterior (plans the next steps),<br>with 30 positions "
                                                        "remembered from 1 earlier run<br>of this prompt at T=0.7 "
                                                        "(rescaled)")
    # once the run has ended the posterior plans nothing more (the header's plan counts this run too)
    last = hand_made_event()
    last.done, last.finish_reason = True, "max_new_tokens"
    run.events = [last]
    assert last.done and [t.name for t in run.acc_fig().data][-1].startswith("posterior (at the run's end),<br>with 30")
    # the memory it counted is the one it started with (the next plan's line counts this run as well:
    # "24 positions remembered from 1 earlier run" beside the legend's 23 read as a contradiction)
    assert [t.name for t in run.acc_fig().data][-1].endswith("at T=0.7 (rescaled) when this run started")


def test_the_plan_says_which_positions_back_it():
    from types import SimpleNamespace
    from app import render
    plan = SimpleNamespace(learned={"positions": 0, "runs": 0}, remembered=None)
    assert render.backing_detail(plan) == "none learned yet"
    plan.remembered = {"positions": 37, "runs": 1, "carried_from": "T=0.7"}
    assert render.backing_detail(plan) == "37 positions remembered from 1 earlier run of this prompt at T=0.7 (rescaled)"
    plan.learned = {"positions": 96, "runs": 1}
    assert render.backing_detail(plan).startswith("96 learned over 1 run, 37 positions remembered")
    plan.learned = {"positions": 1900, "runs": 90, "at_cap": True}
    assert render.backing_detail(plan).startswith("1900 learned over 90 runs (the store is full at 2,048: "
                                                  "older runs fade), 37 positions")


def test_the_live_prediction_uses_an_unmeasured_vector_and_says_which():
    """Learning starts from an interpolated (or nearest) vector where none is measured: the Live
    panel predicts by it, labelled so, instead of showing nothing."""
    from app import live
    from engine import methods, planning
    from engine.settings import Settings
    from tests.test_learning import _event, _vec
    vec = _vec(0.5, 1.0, [0.6, 0.2])
    vec.source = "interpolated: 0.5 x ..."
    tree = planning.Tree((-1, 0, 1))
    plan = planning.PlanResult(planning.MethodSpec("sequoia", 3, 3), methods.sequoia(tree), tree.expected_tokens([0.6, 0.2]),
                               vec, "INTERPOLATED", False)
    run = live.Run(Settings(temperature=0.5))
    run.plan = plan
    run.events.append(_event([-1, 0, 1], {0: 1, 1: 1}))
    value, how = run.predicted()
    assert value == pytest.approx(1 + 0.6 + 0.36) and how == "by the vector interpolated for T=0.5"
    vec.source = "m0.7"
    vec.temperature = 0.7   # the nearest measured one stands in
    assert run.predicted()[1] == "by the nearest vector (measured at T=0.7)"


def test_a_one_node_runs_prediction_is_one_token_a_step_not_the_vectors():
    """Plain decoding's card read "1.00 predicted tokens / step by the vector measured at T=0"."""
    from app import live
    from engine import methods, planning
    from engine.settings import Settings
    from tests.test_learning import _event, _vec
    root = planning.Tree((-1,))
    plan = planning.PlanResult(planning.MethodSpec("ar"), methods.autoregressive(), 1.0, _vec(0.0, 1.0, [0.6, 0.2]),
                               "measured", True)
    run = live.Run(Settings())
    run.plan = plan
    run.events.append(_event([-1], {}))
    assert run.plan.tree == root and run.predicted() == (1.0, "one token per step: nothing is drafted")


def test_paths_are_shown_as_a_reader_finds_them(monkeypatch):
    """Shipped assets (as the engine names them) relative to the app's folder, the user's cache
    with ~, others as they are; only where a path starts, and no ~ for a home that is the root."""
    import os
    from engine import profiler
    shipped = str(profiler.SHIPPED / "acceptance" / "57a4.json")
    assert render.short_path(shipped) == os.path.join("assets", "measured", "acceptance", "57a4.json")
    monkeypatch.setenv("HOME", "/home/u")
    assert render.short_path("/home/u/.cache/sequoia-live/p.json") == "~/.cache/sequoia-live/p.json"
    assert render.short_path("/home/u2/p.json") == "/home/u2/p.json"   # another user's folder
    assert render.short_path("/elsewhere/x.json") == "/elsewhere/x.json" and render.short_path(None) == "—"
    note = f"measured over 1531 positions, cache file {shipped}; nearest (/home/u/c.json) · /srv/home/u/d.json"
    assert render.short_paths_in(note) == (f"measured over 1531 positions, cache file {render.short_path(shipped)}; "
                                           "nearest (~/c.json) · /srv/home/u/d.json")
    monkeypatch.setenv("HOME", "/")
    assert render.short_paths_in("see https://x.org and /etc/x.json") == "see https://x.org and /etc/x.json"


def test_the_speedup_curve_keeps_to_the_plans_depth_and_shows_deeper_trees_apart():
    """A plan capped at Depth d = 2 sat below a curve of the best tree of any depth (it looked as
    if the planner had missed a faster tree): the curve is the best within the cap, the plan's
    choice on it, and what deeper trees would give is a faint line of its own."""
    from engine.planner import choose_shape
    from engine.planning import table_for
    table = table_for([0.8, 0.1, 0.05])
    prof = ({1: 0.01, 8: 0.011, 32: 0.014}, {1: 0.001, 8: 0.0011}, 0.0005)
    capped = choose_shape(table, *prof, budgets=range(1, 17), depths=range(1, 3))
    grid = choose_shape(table, *prof, budgets=range(1, 17), depths=range(1, 9)).grid
    fig = plots.speedup_figure(grid, (capped.n, capped.d), depth_cap=2)
    within = next(t for t in fig.data if t.name == "best depth ≤ 2 per budget")
    deeper = next(t for t in fig.data if t.name == "any depth up to 8")
    star = next(t for t in fig.data if t.name == "chosen")
    assert star.y[0] == pytest.approx(max(v for v in within.y if v is not None))   # the choice is the cap's best
    assert max(d for d in within.customdata if d is not None) <= 2
    assert max(v for v in deeper.y if v is not None) > star.y[0] * 1.05   # deeper trees would do better here
    assert fig.layout.showlegend
    # no cap below the grid's depth, or deeper trees no better: one line, as before
    assert [t.name for t in plots.speedup_figure(grid, (capped.n, capped.d), depth_cap=8).data] == [
        "best depth per budget", "chosen"]


def test_a_runs_own_plan_is_not_said_to_be_a_re_plan():
    """During every run the plan line said "(the running job uses it from its next step)", the
    words of a re-plan, though nothing had been re-planned."""
    from app import render
    from engine import methods
    from engine.planning import MethodSpec, PlanResult
    from engine.tree import Tree
    result = PlanResult(MethodSpec("sequoia", 3, 3), methods.sequoia(Tree([-1, 0, 1])), 2.0, None, "", True)
    assert "started from it" in render.plan_line(result, own_run=True)
    assert "next step" not in render.plan_line(result, own_run=True)
    assert "uses it from its next step" in render.plan_line(result, running=True)


def test_the_headers_last_error_is_cut_at_a_words_end():
    import html
    from app import render
    error = ("load models: model 'no/such-model' is neither a local folder nor a model in the local Hugging "
             "Face cache, and the Hugging Face hub cannot be reached (offline?)")
    line = render.pair_line(None, {"state": "idle", "last_error": error})
    shown = html.unescape(line.split("last error: ")[1].split("<")[0])
    assert shown.endswith("local…") and len(shown) <= 91   # was "… in the local Hugg"
    assert f'title="{render.esc(error)}"' in line   # the whole error on hover
    assert render.clipped("short", 90) == "short"


def test_a_plan_of_depth_1_still_shows_what_deeper_trees_would_give():
    from engine.planner import choose_shape
    from engine.planning import table_for
    grid = choose_shape(table_for([0.8, 0.1, 0.05]), {1: 0.01, 8: 0.011, 32: 0.014}, {1: 0.001, 8: 0.0011}, 0.0005,
                        budgets=range(1, 17), depths=range(1, 9)).grid
    names = [t.name for t in plots.speedup_figure(grid, (1, 1), depth_cap=1).data]
    assert "any depth up to 8" in names   # the capped curve is the root alone, at n = 1 only


def test_the_live_chart_shows_the_ranks_the_runs_trees_can_try():
    """A chain's Live chart showed 16 ranks of which only rank 1 is ever tried; it shows the
    widest node's count of children over the plan's tree and the steps' trees."""
    from types import SimpleNamespace
    from app import live
    from engine.settings import Settings
    vector = SimpleNamespace(probabilities=[0.6, 0.2, 0.1] + [0.01] * 13, ci95=None)
    run = live.Run(Settings(temperature=0.0))
    run.plan = SimpleNamespace(acceptance=vector, exact=True, tree=Tree.chain(5))
    assert all(list(t.x) == [1] for t in run.acc_fig().data)
    run.events = [hand_made_event()]   # its root has two children
    assert all(list(t.x) == [1, 2] for t in run.acc_fig().data)
    run.plan.tree = Tree.k_ary_chains(4, 3)
    assert all(list(t.x) == [1, 2, 3, 4] for t in run.acc_fig().data)
    assert len(plots.acceptance_figure(vector.probabilities).data[0].x) == 16   # a vector alone: all its ranks
    alone = live.Run(Settings(temperature=0.0))   # n = 1: nothing drafted, no bar (rank 1 showed 0.73)
    alone.plan = SimpleNamespace(acceptance=vector, exact=True, tree=Tree.chain(1))
    assert not alone.acc_fig().data and "nothing is drafted" in alone.acc_fig().layout.annotations[0].text


def test_token_labels_are_visible():
    assert plots.show_token(" is\n") == "␣is⏎"
    assert plots.show_token("") == "∅"
    assert plots.show_token(",") == "‹,›" and plots.show_token(".") == "‹.›"   # not a speck over the node
    assert plots.show_token("a") == "a" and plots.show_token(" ") == "␣"
    assert plots.show_token("x" * 40).endswith("…")


def test_a_measurement_is_said_where_the_chart_shows_another_vector():
    """The Planner's Measure made a pooled vector while the chart kept the prompt kind's shipped
    one: 155 s and nothing on the page changed (a helper's walk-through)."""
    from types import SimpleNamespace
    from app import render
    vec = SimpleNamespace(positions=192, prompts=8, domain="", source="/root/.cache/sequoia-live/acceptance/ab.json")
    shown_here = render.measured_words(vec, f"192 positions · `{render.short_path(vec.source)}`")
    assert shown_here.startswith("✓ Measured just now: 192 positions over 8 prompts") and "shown below" in shown_here
    elsewhere = render.measured_words(vec, "1531 positions · `assets/measured/acceptance/cd.json`")
    assert "pooled over every kind of prompt" in elsewhere and "their own kind's vector" in elsewhere


def test_a_long_empty_chart_message_is_wrapped_to_fit_a_half_width_chart():
    """The autoregressive run's acceptance chart said its line on one line, cut off on both sides."""
    message = ("The tree is the root alone: nothing is drafted, so no rank is tried (one token per step, "
               "as plain decoding)")
    text = plots.empty_figure(message, 260).layout.annotations[0].text
    lines = text.split("<br>")
    assert len(lines) >= 2 and max(map(len, lines)) <= plots.EMPTY_LINE_CHARS
    assert " ".join(lines) == message
    button = "Predicted speedup needs an acceptance vector (“Measure on this pair”) and a device profile"
    assert "“Measure on this pair”" in plots.empty_figure(button).layout.annotations[0].text.replace("<br>", "|")


def test_an_autoregressive_plan_line_names_no_acceptance_vector():
    """Plain decoding reads no vector, but its plan line showed the measured one and "plan backed by
    N positions"."""
    from types import SimpleNamespace
    root = Tree((-1,))
    result = SimpleNamespace(method=SimpleNamespace(label="Autoregressive"), tree=root, expected_tokens=1.0,
                             predicted_speedup=1.0, acceptance=object(), spec=SimpleNamespace(kind="ar"),
                             acceptance_note="measured over 3067 positions, cache file x.json", exact=True,
                             learned={"positions": 5, "runs": 1})
    line = render.plan_line(result)
    assert "no acceptance vector needed" in line and "backed by" not in line and "3067" not in line


def test_a_run_stopped_before_its_first_step_shows_no_rates():
    """Stopped during the prefill: the cards read "0.0 tokens/s", "0.00 tokens/step", "last step: 0"."""
    from types import SimpleNamespace
    stopped = SimpleNamespace(nodes=[], done=True, total_steps=0, total_tokens=0, tokens_per_second=0.0,
                              tokens_per_step=0.0, prefill_seconds=0.4, finish_reason="stopped")
    html_ = render.metrics_html([stopped])
    assert "0.0<" not in html_ and "0.00<" not in html_ and "no step yet" in html_ and html_.count(">—<") >= 2
