"""StepEvents, trees and measurements -> Plotly figures. Pure functions: no Gradio, no models.

Colours: one per node status, the same in the tree, the text and the charts (STATUS_COLORS);
`PLANNED` is the colour of anything predicted rather than observed."""
from __future__ import annotations

import functools
import html
import math
import re
import textwrap

import networkx as nx
import plotly.graph_objects as go

from engine import learning
from engine.wording import plural

STATUS_COLORS = {
    "root": "#64748b",       # slate: the last committed token
    "accepted": "#16a34a",   # green: drafted and accepted by the target
    "rejected": "#dc2626",   # red: drafted, checked, refused
    "unreached": "#94a3b8",  # grey: drafted, never checked (below a rejected node, after an accepted sibling
                             # or past an accepted end of text)
    "bonus": "#d97706",      # amber: the target's own token after the accepted path
}
STATUS_LABELS = {
    "root": "root (last token so far)",
    "accepted": "accepted",
    "rejected": "rejected",
    "unreached": "never checked",
    "bonus": "bonus (from the target)",
}
PLANNED = "#6366f1"          # indigo: predictions, planned vectors, the planned tree
POSTERIOR = "#f59e0b"        # amber: the learned posterior acceptance vector
EDGE = "rgba(148,163,184,0.55)"
FONT = "#64748b"             # slate-500: readable on light and dark backgrounds
GRID = "rgba(148,163,184,0.25)"
LANE_COLORS = ["#64748b", "#0ea5e9", "#a855f7", "#16a34a", "#d97706", "#db2777", "#0891b2", "#65a30d"]
UIREVISION = "sequoia-live"
MAX_LABEL = 10


# ---------------------------------------------------------------- layout
@functools.lru_cache(maxsize=256)
def tree_layout(parents: tuple[int, ...]) -> tuple[tuple[float, float], ...]:
    """(x, y) per node, computed once per tree shape: x = level (root at the left, one column
    per level), y = tidy placement (leaves evenly spaced in depth-first order, each parent
    centred on its children), so a tree drawn step after step never moves."""
    graph = nx.DiGraph()
    graph.add_nodes_from(range(len(parents)))
    graph.add_edges_from((p, i) for i, p in enumerate(parents) if p >= 0)
    depth = nx.shortest_path_length(graph, 0)
    y: dict[int, float] = {}
    leaf = 0
    # children in rank order (= index order); post-order: a parent after all its children
    for v in nx.dfs_postorder_nodes(graph, 0, sort_neighbors=lambda kids: sorted(kids)):
        kids = sorted(graph.successors(v))
        if kids:
            y[v] = (y[kids[0]] + y[kids[-1]]) / 2
        else:
            y[v] = float(leaf)
            leaf += 1
    return tuple((float(depth[i]), -y[i]) for i in range(len(parents)))


def _edge_trace(parents, pos) -> dict:
    """Every parent-child edge as one thin line trace (None breaks the line between edges)."""
    ex, ey = [], []
    for i, p in enumerate(parents):
        if p >= 0:
            ex += [pos[p][0], pos[i][0], None]
            ey += [pos[p][1], pos[i][1], None]
    return dict(type="scatter", x=ex, y=ey, mode="lines", line=dict(color=EDGE, width=1.2), hoverinfo="skip",
                showlegend=False, name="edges")


def _leaves(parents) -> int:
    has_child = set(p for p in parents if p >= 0)
    return sum(1 for i in range(len(parents)) if i not in has_child)


def show_token(text: str, limit: int = MAX_LABEL) -> str:
    """A token as a short visible label: spaces, newlines and tabs made visible, long ones cut, and
    a lone punctuation mark bracketed (a "," or "." over a node was a speck)."""
    shown = text.replace(" ", "␣").replace("\n", "⏎").replace("\t", "⇥").replace("\r", "")
    if shown == "":
        shown = "∅"
    elif len(shown) == 1 and not shown.isalnum() and shown not in "␣⏎⇥":
        shown = f"‹{shown}›"
    if len(shown) > limit:
        shown = shown[: limit - 1] + "…"
    return shown


def _fmt_prob(p) -> str:
    return "—" if p is None else (f"{p:.3f}" if p >= 0.001 else f"{p:.1e}")


def _layout(height: int, title: str | None = None, **extra) -> dict:
    top = 44 + 16 * title.count("<br>") if title else 16   # a title's second line needs room too
    out = dict(height=height, margin=dict(l=8, r=8, t=top, b=8), uirevision=UIREVISION,
               paper_bgcolor="rgba(0,0,0,0)", plot_bgcolor="rgba(0,0,0,0)", font=dict(color=FONT, size=12),
               hoverlabel=dict(font=dict(size=12), align="left"),
               # the tools these charts use: the full bar, shown while the pointer is over a chart,
               # covered the right end of longer titles
               modebar=dict(remove=["select2d", "lasso2d", "zoomIn2d", "zoomOut2d", "autoScale2d"]), **extra)
    if title:
        out["title"] = dict(text=title, x=0.01, xanchor="left", font=dict(size=13))
    return out


def _base_layout(fig: go.Figure, height: int, title: str | None = None, **extra) -> go.Figure:
    fig.update_layout(**{"title": None, **_layout(height, title, **extra)})  # no title: an empty one
    return fig


def _hidden_axes(fig: go.Figure, x_range, y_range) -> None:
    fig.update_xaxes(**_hidden_axis(x_range))
    fig.update_yaxes(**_hidden_axis(y_range))


def _hidden_axis(value_range) -> dict:
    return dict(visible=False, range=list(value_range), fixedrange=False)


def _figure(traces: list[dict], layout: dict) -> go.Figure:
    """A figure from plain trace and layout dicts, without plotly's property validation: it took
    ~30 ms of Python per tree figure, drawn every step beside the decoder (bench/live_render_cost.py).
    tests/test_plots.py validates what these functions build, so a misspelt property still fails."""
    return go.Figure(data=traces, layout=layout, _validate=False)


def _sizes(n: int) -> int:
    return 22 if n <= 16 else 16 if n <= 40 else 11 if n <= 80 else 8


# ---------------------------------------------------------------- tree of one step
def _never_checked(node, by_index: dict, accepted_under: set) -> str:
    """Why verification never tried this node: the walk stops below a rejected node, takes the
    first accepted child and leaves its later siblings, and ends at an accepted end of text (every
    unchecked node read "an ancestor was rejected", siblings of an accepted node included).
    `accepted_under`: the nodes with an accepted child."""
    child, up = node, by_index.get(node.parent)
    while up is not None and up.status == "unreached":
        child, up = up, by_index.get(up.parent)
    own = child is node
    if up is None:
        return "never checked"
    if up.status == "rejected":
        return "never checked: its parent was rejected" if own else "never checked: an ancestor was rejected"
    if up.index in accepted_under:
        return ("never checked: a sibling was accepted first" if own
                else "never checked: a sibling of an ancestor was accepted first")
    return "never checked: the answer ended before it"   # an accepted end-of-text token


def _node_hover(node, parents, greedy: bool | None, sampler: str, texts: dict, by_index: dict,
                accepted_under: set, not_kept: set = frozenset()) -> str:
    """A step tree node's hover; `texts`: each node's token text, to name its parent by (the chart
    shows tokens, not node numbers: "under node 5" named nothing on screen); `by_index`: the
    step's nodes by index and `accepted_under` the nodes with an accepted child, to say why one was
    never checked; `not_kept`: the accepted nodes (and bonus) past max new tokens."""
    tok = html.escape(repr(node.text))
    head = f"<b>{tok}</b>  id {node.token_id}"
    if node.status == "root":
        return head + "<br>root: the last committed token<br>(its children are the drafted guesses)"
    kids = sum(1 for p in parents if p == node.parent)
    parent = "the root" if node.parent == 0 else html.escape(repr(texts.get(node.parent, "?")))
    place = (f"rank {node.rank} of {kids} under {parent} · level {node.depth}" if node.status != "bonus"
             else f"after {parent} · level {node.depth}")
    probs = f"draft q = {_fmt_prob(node.draft_prob)} · target p = {_fmt_prob(node.target_prob)}"
    if greedy:
        test = "test: is it the target's most likely token?"
    elif greedy is False:
        test = f"test: accept with prob min(1, p/q) on the residual ({sampler})"
    else:
        test = ""
    verdict = {
        "accepted": "✓ accepted",
        "rejected": "✗ rejected",
        "unreached": _never_checked(node, by_index, accepted_under) if node.status == "unreached" else "",
        "bonus": ("bonus: the target's own most likely token" if greedy
                  else "bonus: drawn from the target's (residual) distribution"),
    }[node.status]
    lines = [head, place, probs]
    if node.status in ("accepted", "rejected") and test:
        lines.append(test)
    lines.append(verdict)
    if node.index in not_kept:
        lines.append("past max new tokens: not kept (the run ended before it)")
    return "<br>".join(lines)


def _past_max_new(event, path: list[int], bonus) -> set:
    """The accepted nodes (and bonus) of a step that max new tokens cut, past the tokens it kept:
    the verifier accepted them, the answer does not hold them."""
    if event.finish_reason != "max_new_tokens":
        return set()
    yielded = path[1:] + ([bonus.index] if bonus is not None else [])
    return set(yielded[len(event.new_token_ids):])


def tree_height(parents) -> int:
    """Taller figures for trees with many leaves (about 7 px per leaf), within 440..760 px."""
    return int(min(760, max(440, 7 * _leaves(parents) + 120)))


def _gap_between_edges(py: float, kid_ys: list[float]) -> float:
    """A height half a column right of a node at height py that lies between its edges to
    children at kid_ys (those edges cross that column at the midpoints), nearest py."""
    crossings = sorted((py + y) / 2 for y in kid_ys)
    gaps = [(a + b) / 2 for a, b in zip(crossings, crossings[1:])]
    gaps += [crossings[0] - 0.25, crossings[-1] + 0.25]
    return min(gaps, key=lambda y: (abs(y - py), -y))


def tree_figure(event, greedy: bool | None = None, sampler: str = "sequoia", title: str | None = None,
                height: int | None = None, label_limit: int = 28) -> go.Figure:
    """The tree of one decoding step: one marker per node (tree nodes + the bonus token),
    coloured by status; the accepted path drawn thick; hover with token, rank, q, p, test."""
    nodes = list(event.nodes)
    if not nodes:
        return empty_figure("no tree in this step (the run ended here)", height)
    parents = tuple(event.tree_parents)
    height = height or tree_height(parents)
    pos = list(tree_layout(parents))
    depth_max = max(x for x, _ in pos)
    for n in nodes[len(parents):]:
        # the bonus token comes after the last accepted node: in the next column when that node is
        # a leaf (its row is free there); else half a column right of it, in the widest gap
        # between its edges to its children, where no node or edge sits
        px, py = pos[n.parent]
        kids = [pos[i][1] for i, p in enumerate(parents) if p == n.parent]
        pos.append((px + 0.5, _gap_between_edges(py, kids)) if kids else (px + 1, py))
    path = list(event.accepted_path)
    bonus = next((n for n in nodes if n.status == "bonus"), None)
    traces = [_edge_trace(parents, pos)]
    px_, py_ = [pos[v][0] for v in path], [pos[v][1] for v in path]
    traces.append(dict(type="scatter", x=px_, y=py_, mode="lines",
                       line=dict(color=STATUS_COLORS["accepted"], width=6), hoverinfo="skip", showlegend=False,
                       name="accepted path"))
    if bonus is not None:
        b = pos[bonus.index] if bonus.index < len(pos) else pos[-1]
        traces.append(dict(type="scatter", x=[pos[bonus.parent][0], b[0]], y=[pos[bonus.parent][1], b[1]],
                           mode="lines", line=dict(color=STATUS_COLORS["bonus"], width=2.5, dash="dot"),
                           hoverinfo="skip", showlegend=False, name="bonus edge"))
    crowded = _leaves(parents) > label_limit
    on_path = set(path)
    size = _sizes(len(nodes))
    texts = {n.index: n.text for n in nodes}
    by_index = {n.index: n for n in nodes if n.status != "bonus"}
    accepted_under = {n.parent for n in nodes if n.status == "accepted"}   # once, not per unchecked node
    not_kept = _past_max_new(event, path, bonus)
    for status in ("unreached", "rejected", "accepted", "root", "bonus"):
        group = [n for n in nodes if n.status == status]
        labels = [show_token(n.text) if (not crowded or n.index in on_path or n.status == "bonus") else ""
                  for n in group]
        on_top = status in ("accepted", "root", "bonus")  # the thick path would hide a label on the right
        trace = dict(
            type="scatter",
            x=[pos[n.index][0] for n in group] or [None], y=[pos[n.index][1] for n in group] or [None],
            mode="markers+text", name=STATUS_LABELS[status],
            textposition="top center" if on_top else "middle right",
            textfont=dict(size=13 if on_top else (12 if not crowded else 11),
                          color=STATUS_COLORS[status] if on_top else FONT),
            marker=dict(color=STATUS_COLORS[status], size=size if status != "root" else size + 4,
                        line=dict(color="rgba(255,255,255,0.8)", width=1.5 if size > 11 else 0),
                        symbol="diamond" if status == "bonus" else "circle",
                        opacity=[0.35 if n.index in not_kept else 1.0 for n in group] or 1.0),
            hoverinfo="text", cliponaxis=False, meta=status)
        if group:
            trace.update(text=labels, hovertext=[_node_hover(n, parents, greedy, sampler, texts, by_index,
                                                                accepted_under, not_kept) for n in group])
        traces.append(trace)
    right = max(x for x, _ in pos)
    ys = [y for _, y in pos]
    pad = max(0.6, 0.04 * (max(ys) - min(ys)))
    if title is None:
        accepted = len(path) - 1
        new = len(event.new_token_ids)
        cut = " (cut at max new tokens: the faded ones are not kept)" if not_kept else ""
        title = (f"Step {event.step}: {plural(accepted, 'drafted token')} accepted"
                 f"{' + 1 bonus' if bonus is not None else ''} → {new} new{cut} · "
                 f"tree of {plural(len(parents), 'node')}, {plural(int(depth_max) + 1, 'level')}")
    return _figure(traces, _layout(height, title, showlegend=False, xaxis=_hidden_axis((-0.3, right + 0.95)),
                                   yaxis=_hidden_axis((min(ys) - pad, max(ys) + pad))))


def plan_figure(tree, acceptance=None, title: str | None = None, height: int | None = None) -> go.Figure:
    """A planned tree (no tokens yet): each node's opacity is the chance it is reached
    (product of the acceptance of the ranks on its path), when an acceptance vector is known."""
    parents = tuple(tree.parents)
    height = height or tree_height(parents)
    pos = tree_layout(parents)
    reach = [1.0] * len(parents)
    if acceptance is not None:
        acc = list(acceptance)
        for i in range(1, len(parents)):
            r = tree.rank[i]
            reach[i] = reach[parents[i]] * (acc[r - 1] if r <= len(acc) else 0.0)
    fig = go.Figure()
    fig.add_trace(_edge_trace(parents, pos))
    crowded = _leaves(parents) > 28
    hover = []
    for i in range(len(parents)):
        if i == 0:
            hover.append("root: the last committed token")
        else:
            line = f"node {i} · rank {tree.rank[i]} under node {parents[i]} · level {tree.depth_of[i]}"
            if acceptance is not None:
                line += f"<br>reached with probability {reach[i]:.3f}<br>(product of P(rank) along its path)"
            hover.append(line)
    opac = [0.25 + 0.75 * math.sqrt(r) for r in reach] if acceptance is not None else [0.9] * len(parents)
    size = _sizes(len(parents))
    fig.add_trace(go.Scatter(
        x=[p[0] for p in pos], y=[p[1] for p in pos], mode="markers+text" if not crowded else "markers",
        text=["root"] + [f"r{tree.rank[i]}" for i in range(1, len(parents))], textposition="middle right",
        marker=dict(color=[STATUS_COLORS["root"]] + [PLANNED] * (len(parents) - 1), size=size, opacity=opac,
                    line=dict(color="rgba(255,255,255,0.8)", width=1 if size > 11 else 0)),
        hovertext=hover, hoverinfo="text", showlegend=False, cliponaxis=False, meta="planned"))
    ys = [y for _, y in pos]
    pad = max(0.6, 0.04 * (max(ys) - min(ys)))
    _hidden_axes(fig, (-0.3, tree.depth - 1 + 0.8), (min(ys) - pad, max(ys) + pad))
    # the shading is not one of the run's statuses (the page's legend lists those): the title says it
    shade = ('<br><span style="font-size:11px">shade: how likely each node is reached (darker = likelier)</span>'
             if acceptance is not None else "")
    return _base_layout(fig, height, (title or f"Planned tree: {plural(tree.size, 'node')}, "
                                      f"{plural(tree.depth, 'level')} (widths {tree.level_widths})") + shade)


EMPTY_LINE_CHARS = 55   # about what the narrowest chart (half the page) holds at 14 px
NBSP = "\u00a0"          # textwrap breaks at ASCII whitespace only


def empty_figure(message: str, height: int = 440) -> go.Figure:
    """A chart with nothing to draw yet, saying why; the message wrapped, since plotly keeps an
    annotation on one line (a long one ran off both sides of a half-width chart)."""
    fig = go.Figure()
    # a button's quoted name (“Profile this device”) stays on one line: its spaces do not break
    kept = re.sub(r"“[^”]*”", lambda m: m.group(0).replace(" ", NBSP), message)
    lines = [line.replace(NBSP, " ") for line in textwrap.wrap(kept, EMPTY_LINE_CHARS)] or [""]
    fig.add_annotation(text="<br>".join(html.escape(line) for line in lines), x=0.5, y=0.5, xref="paper",
                       yref="paper", showarrow=False, font=dict(size=14, color=FONT))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return _base_layout(fig, height)


# ---------------------------------------------------------------- acceptance
def observed_acceptance(events, max_rank: int = 16) -> list[tuple[int, int]]:
    """Per rank k: (times rank k was the accepted child, visited nodes with at least k children).
    Rank k's outcome at a node does not depend on later siblings, so hits/trials estimates the
    planner's P(rank k accepted) without bias."""
    ev = learning.events_evidence(events)  # the same censored counts learning uses
    hits = [int(x) for x in (ev.accepts + [0] * max_rank)[:max_rank]]
    trials = [int(x) for x in (ev.trials + [0] * max_rank)[:max_rank]]
    return list(zip(hits, trials))


def acceptance_figure(planned=None, observed=None, ci=None, title: str | None = None, height: int = 260,
                      planned_name: str = "planned (measured vector)", posterior=None,
                      posterior_name: str = "posterior (plans the next steps)",
                      widest: int | None = None) -> go.Figure:
    """Bars per rank: the planned vector (indigo) beside what this run observed (green), and with
    learning the posterior (amber) the next steps are planned from. `widest`: the most children a
    node of the run's trees has; ranks past it are never tried (a chain's chart showed 16 ranks,
    15 of them with nothing observed)."""
    traces = []
    ranks = 0
    if planned is not None:
        ranks = max(ranks, len(planned) if widest is None else widest)
    if observed:
        ranks = max(ranks, max((k + 1 for k, (_, n) in enumerate(observed) if n), default=0))
    ranks = min(ranks, 16) or 1
    xs = list(range(1, ranks + 1))
    if planned is not None:
        traces.append(dict(type="bar", x=xs, y=list(planned)[:ranks], name=planned_name, marker=dict(color=PLANNED),
                           hovertemplate="rank %{x}: P = %{y:.3f}<extra>planned</extra>"))
        if ci:
            # a share's bars stop at 0 and 1 (a learned posterior's ± reaches 0.1 on ranks near 0)
            shares, ci = list(planned)[:ranks], list(ci)[:ranks]
            traces[-1]["error_y"] = dict(type="data", symmetric=False, visible=True, color=FONT, thickness=1,
                                         array=[min(c, 1 - p) for p, c in zip(shares, ci)],
                                         arrayminus=[min(c, p) for p, c in zip(shares, ci)])
    if observed:
        obs = observed[:ranks]
        traces.append(dict(
            type="bar", x=xs, y=[h / n if n else None for h, n in obs], name="observed in this run",
            marker=dict(color=STATUS_COLORS["accepted"]), customdata=[[h, n] for h, n in obs],
            hovertemplate="rank %{x}: %{customdata[0]} of %{customdata[1]} = %{y:.3f}<extra>observed</extra>"))
    if posterior is not None:
        traces.append(dict(type="bar", x=xs, y=list(posterior)[:ranks], name=posterior_name,
                           marker=dict(color=POSTERIOR),
                           hovertemplate="rank %{x}: P = %{y:.3f}<extra>posterior</extra>"))
    return _figure(traces, _layout(
        height, title, barmode="group", bargap=0.25,
        # at the figure's foot, not at a fraction of the plot area's height below it: a legend of
        # several lines shrinks that area, and the fraction then put it over the axis title
        legend=dict(orientation="h", yref="container", yanchor="bottom", y=0, xanchor="left", x=0),
        xaxis=dict(title=dict(text="rank among siblings"), dtick=1, gridcolor=GRID),
        yaxis=dict(title=dict(text="P(rank accepted)"), rangemode="tozero", gridcolor=GRID)))


# ---------------------------------------------------------------- planner charts
def heatmap_figure(G, max_budget: int, max_depth: int, chosen: tuple[int, int] | None = None,
                   height: int = 300, imported_tokens: float | None = None) -> go.Figure:
    """Expected tokens per step G(n, d): budget n across, depth d up. `imported_tokens`: the mark
    is an imported tree's size and depth, whose own value this is (the cell under it holds the
    best tree of that size and depth, which the imported one need not be)."""
    budgets = list(range(1, max_budget + 1))
    depths = list(range(1, max_depth + 1))
    z = [[(float(G[n, d]) if math.isfinite(G[n, d]) else None) for n in budgets] for d in depths]
    fig = go.Figure(go.Heatmap(x=budgets, y=depths, z=z, colorscale="Viridis",
                               colorbar=dict(title=dict(text="tokens/step", side="right"), thickness=12),
                               hovertemplate="budget n=%{x}, depth d=%{y}<br>G = %{z:.3f} tokens/step<extra></extra>"))
    if chosen:
        n, d = chosen
        hover = ("chosen: n=%{x}, d=%{y}" if imported_tokens is None else
                 f"imported tree: n=%{{x}}, d=%{{y}}<br>its own {imported_tokens:.3f} tokens/step "
                 "(the cell: the best tree of this size and depth)")
        fig.add_trace(go.Scatter(x=[n], y=[d], mode="markers", name="chosen",
                                 marker=dict(symbol="x-thin", size=16, line=dict(width=3, color="#f43f5e")),
                                 hovertemplate=hover + "<extra></extra>"))
    fig.update_xaxes(title_text="tree budget n (nodes, root included)")
    fig.update_yaxes(title_text="depth d (levels)", dtick=2)
    return _base_layout(fig, height, "Expected tokens per step G(n, d) from the DP", showlegend=False)


def profile_figure(profile, height: int = 280, observed: dict | None = None) -> go.Figure:
    """t(n)/t(1): how much longer the target takes to verify n tokens than one; with `observed`
    (engine/observed.py summary), the verify times real runs measured, on the same scale."""
    fig = go.Figure()
    t = sorted(profile.target_seconds.items())
    base = t[0][1] if t and t[0][1] > 0 else 1.0
    fig.add_trace(go.Scatter(x=[n for n, _ in t], y=[s / base for _, s in t], mode="lines+markers",
                             name="target: t(n)/t(1)", line=dict(color=STATUS_COLORS["root"], width=2),
                             customdata=[s * 1e3 for _, s in t],
                             hovertemplate="n=%{x}: %{y:.2f}× (%{customdata:.1f} ms)<extra>target</extra>"))
    d = sorted(profile.draft_seconds.items())
    fig.add_trace(go.Scatter(x=[n for n, _ in d], y=[s / base for _, s in d], mode="lines+markers",
                             name="draft forward of w tokens / target t(1)",
                             line=dict(color=PLANNED, width=2, dash="dot"), customdata=[s * 1e3 for _, s in d],
                             hovertemplate="w=%{x}: %{y:.2f}× (%{customdata:.1f} ms)<extra>draft</extra>"))
    seen = (observed or {}).get("target") or []
    if seen:
        fig.add_trace(go.Scatter(x=[r["n"] for r in seen], y=[r["observed_seconds"] / base for r in seen],
                                 mode="markers", name="target, observed in CLI runs",
                                 marker=dict(color=STATUS_COLORS["root"], symbol="x", size=10),
                                 customdata=[[r["observed_seconds"] * 1e3, r["samples"]] for r in seen],
                                 hovertemplate="n=%{x}: %{y:.2f}× (%{customdata[0]:.1f} ms, median of "
                                               "%{customdata[1]} steps)<extra>observed</extra>"))
    # ticks at the timed sizes only: plotly's own log ticks labelled 0.9 and 9 as "9"
    sizes = sorted({n for n, _ in t} | {n for n, _ in d} | {r["n"] for r in seen})
    fig.update_xaxes(type="log", title_text="tokens in one forward", gridcolor=GRID, tickmode="array",
                     tickvals=sizes, ticktext=[str(n) for n in sizes],
                     range=[math.log10(0.85), math.log10(max(sizes, default=1) * 1.15)])
    fig.update_yaxes(title_text="time relative to target t(1)", rangemode="tozero", gridcolor=GRID)
    return _base_layout(fig, height, "Device profile", legend=dict(orientation="h", y=-0.3))


def _best_per_budget(grid, max_depth: int | None = None) -> tuple[list, list]:
    """(the best speedup, its depth) for each of the grid's budgets, over depths <= max_depth."""
    best, best_d = [], []
    for row in grid.speedup:
        cells = [(v, grid.depths[j]) for j, v in enumerate(row)
                 if v is not None and math.isfinite(v) and (max_depth is None or grid.depths[j] <= max_depth)]
        v, d = max(cells) if cells else (None, None)
        best.append(v)
        best_d.append(d)
    return best, best_d


LABEL_PLACES = ("top center", "top right", "top left", "bottom right", "bottom left", "middle right",
                "middle left", "bottom center")   # in the order a label is tried (clear_place)


def clear_place(x: float, y: float, text: str, lines: list[tuple[list, list]], x_range: tuple, y_range: tuple,
                plot_px: tuple = (560, 160)) -> str:
    """The first of LABEL_PLACES where a marker's label `text` at (x, y) crosses none of the drawn
    `lines` ((xs, ys) each, straight between points), else the one crossing the fewest; the label's
    box is sized in data units from the plot's approximate size in pixels (7 px a character, 16 px
    tall, 6 px from the marker). A label centred above the star sat on a curve climbing on to larger
    budgets, or on the steep start of the curve left of it."""
    per_x = (x_range[1] - x_range[0]) / plot_px[0] or 1.0
    per_y = (y_range[1] - y_range[0]) / plot_px[1] or 1.0
    w, h, gap = 7 * len(text) * per_x, 16 * per_y, 6
    x_span = {"center": (x - w / 2, x + w / 2), "right": (x + gap * per_x, x + gap * per_x + w),
              "left": (x - gap * per_x - w, x - gap * per_x)}
    y_span = {"top": (y + gap * per_y, y + gap * per_y + h), "bottom": (y - gap * per_y - h, y - gap * per_y),
              "middle": (y - h / 2, y + h / 2)}
    points = []   # every line sampled finely enough that a segment cannot pass between samples
    for xs, ys in lines:
        pairs = [(a, b) for a, b in zip(xs, ys) if a is not None and b is not None]
        for (x0, y0), (x1, y1) in zip(pairs, pairs[1:]):
            steps = 1 + int(max(abs(x1 - x0) / per_x, abs(y1 - y0) / per_y) / 3)
            points += [(x0 + (x1 - x0) * k / steps, y0 + (y1 - y0) * k / steps) for k in range(steps + 1)]

    def crossings(place: str) -> int:
        vertical, horizontal = place.split()
        (x0, x1), (y0, y1) = x_span[horizontal], y_span[vertical]
        return sum(x0 <= px <= x1 and y0 <= py <= y1 for px, py in points)
    counts = {place: crossings(place) for place in LABEL_PLACES}
    return next((place for place in LABEL_PLACES if counts[place] == 0), min(LABEL_PLACES, key=counts.get))


def speedup_figure(grid, chosen: tuple[int, int] | None = None, height: int = 280,
                   measured_up_to: int | None = None, imported_speedup: float | None = None,
                   imported: bool = False, depth_cap: int | None = None) -> go.Figure:
    """Predicted speedup over autoregressive vs budget (best depth for each budget).
    measured_up_to: the largest tree the device profile timed; budgets past it rest on the cost
    curve's extrapolation (engine/planner.py CostCurve) and are drawn dashed. `imported`: the mark
    is an imported tree, drawn at its own predicted speedup `imported_speedup` (none without one:
    the grid holds the DP's tree of that size and depth, not the imported one). `depth_cap`: the
    plan's Depth d; the curve is the best depth up to it (the plan's choice lies on it), and the
    best of any depth is drawn faint beside it where deeper trees would do better (the whole curve
    made a plan capped at d = 4 look as if it had missed a faster tree)."""
    budgets = list(grid.budgets)
    capped = depth_cap is not None and depth_cap < max(grid.depths)
    best, best_d = _best_per_budget(grid, depth_cap if capped else None)
    within = f"best depth ≤ {depth_cap} per budget" if capped else "best depth per budget"
    timed = [i for i, n in enumerate(budgets) if measured_up_to is None or n <= measured_up_to]
    past = [i for i, n in enumerate(budgets) if measured_up_to is not None and n >= measured_up_to]
    fig = go.Figure(go.Scatter(x=[budgets[i] for i in timed], y=[best[i] for i in timed], mode="lines",
                               name=within, line=dict(color=PLANNED, width=2),
                               customdata=[best_d[i] for i in timed],
                               hovertemplate="n=%{x} (best d=%{customdata}): %{y:.2f}×<extra></extra>"))
    if len(past) > 1:
        fig.add_trace(go.Scatter(x=[budgets[i] for i in past], y=[best[i] for i in past], mode="lines",
                                 name=f"past the profiled n={measured_up_to}: t(n) extrapolated",
                                 line=dict(color=PLANNED, width=1.5, dash="dash"), customdata=[best_d[i] for i in past],
                                 hovertemplate="n=%{x} (best d=%{customdata}): %{y:.2f}× (t(n) extrapolated past "
                                               f"n={measured_up_to})<extra></extra>"))
    deeper, deeper_d = _best_per_budget(grid) if capped else ([], [])
    if not (capped and any(a is not None and (b is None or a > b + 1e-9) for a, b in zip(deeper, best))):
        deeper = []   # not drawn: deeper trees do no better
    if deeper:
        fig.add_trace(go.Scatter(x=budgets, y=deeper, mode="lines", name=f"any depth up to {max(grid.depths)}",
                                 line=dict(color=PLANNED, width=1, dash="dot"), opacity=0.45, customdata=deeper_d,
                                 hovertemplate="n=%{x} (best d=%{customdata}): %{y:.2f}×<extra></extra>"))
    top = max([v for v in best + deeper if v is not None] + [1.0])   # the axis's range: top * 1.2 (label headroom)
    if chosen:
        n, d = chosen
        i = budgets.index(n) if n in budgets else None
        j = list(grid.depths).index(d) if d in grid.depths else None
        y = imported_speedup if imported else (grid.speedup[i][j] if i is not None and j is not None else None)
        if y is not None:
            # a plan's star sits on the curve: its label above it (one node has no depth: the root alone,
            # whatever depth was asked; it read "n=1, d=4"). An imported tree's sits off it, mostly
            # below: its longer label below, toward the side with room (centred, it ran off the axis)
            side = "right" if n <= (budgets[0] + budgets[-1]) / 2 else "left"
            label = f"imported n={n}, d={d}" if imported else " n=1: plain decoding" if n == 1 else f" n={n}, d={d}"
            drawn = [(budgets, best), (budgets, deeper), ([budgets[0], budgets[-1]], [1.0, 1.0])]   # and the 1× line
            fig.add_trace(go.Scatter(x=[n], y=[y], mode="markers+text", name="imported tree" if imported else "chosen",
                                     text=[label],
                                     textposition=(f"bottom {side}" if imported else
                                                   clear_place(n, y, label, drawn, (budgets[0], budgets[-1]),
                                                               (0, top * 1.2), (560, height - 130))),
                                     marker=dict(size=13, color="#f43f5e", symbol="star")))
    fig.add_hline(y=1, line=dict(color=FONT, width=1, dash="dash"))
    fig.update_xaxes(title_text="tree budget n", gridcolor=GRID)
    # headroom above the highest point, so the chosen tree's label is not cut by the plot's edge
    fig.update_yaxes(title_text="predicted speedup ×", range=[0, top * 1.2], gridcolor=GRID)
    return _base_layout(fig, height, "Predicted speedup vs budget (from G and the device profile)",
                        showlegend=sum(t.mode == "lines" for t in fig.data) > 1,
                        legend=dict(orientation="h", y=-0.3))


# ---------------------------------------------------------------- race
def race_height(lanes: int, height: int = 300) -> int:
    """The race chart's height: `height` for the plot, and a legend line per lane below it."""
    return height + 20 * max(1, lanes)


def race_figure(series: dict, colors: dict | None = None, height: int = 300,
                labels: dict | None = None) -> go.Figure:
    """Tokens generated vs decoding time, one line per method, named by `labels` (a lane's planned
    method, "Sequoia n=8 d=4", as its lane and the table name it) where given."""
    fig = go.Figure()
    for k, (lane, points) in enumerate(series.items()):
        color = (colors or {}).get(lane, LANE_COLORS[k % len(LANE_COLORS)])
        name = (labels or {}).get(lane) or lane
        fig.add_trace(go.Scatter(x=[0.0] + [t for t, _ in points], y=[0] + [n for _, n in points],
                                 mode="lines", name=name, line=dict(color=color, width=2.5, shape="hv"),
                                 hovertemplate="%{x:.2f} s: %{y} tokens<extra>" + html.escape(name) + "</extra>"))
    fig.update_xaxes(title_text="decoding time (s, prefill excluded)", rangemode="tozero", gridcolor=GRID)
    fig.update_yaxes(title_text="tokens generated", rangemode="tozero", gridcolor=GRID)
    # the legend's top below the x axis's title: in the half-width column it wraps to one method
    # a line, and from y = -0.25 it covered that title; the figure grows by its lines
    return _base_layout(fig, race_height(len(series), height), "Tokens vs time",
                        legend=dict(orientation="h", x=0, xanchor="left", y=-0.2 * 300 / height - 0.12,
                                    yanchor="top", font=dict(size=11)))
