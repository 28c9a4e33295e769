"""Live tab: one prompt through one method, the tree of every step drawn as it happens."""
from __future__ import annotations

import functools
import logging
import time
from collections import Counter
from typing import Callable

import gradio as gr

from app import plots, render, waiting
from app.errors import page_error
from app.state import JOB_KINDS, MAX_PAGE_SEED, METHOD_CHOICES, AppContext, Session, settings_from, spec_from
from engine import interpolation, prompt_memory
from engine.decoding import StepEvent
from engine.errors import UserError
from engine.models import prompt_is_blank
from engine.tree import Tree, TreeError
from engine.jobs import Note, Progress
from engine.planning import NeedsMeasurement
from engine.settings import MAX_NEW_TOKENS
from engine.wording import plural

log = logging.getLogger(__name__)

FIG_INTERVAL = 0.1   # tree figure: at most 10 updates per second
TEXT_INTERVAL = 0.05  # text and metric cards: at most 20 per second (step data and status: every step)
# acceptance chart: at most every 2 s. Each update cost headless Chromium ~75 ms of CPU on the cores
# the run decodes on; at 2 per second a Live run of the embedded pair ran 1.12x slower (bench/live_browser_cost.py)
ACC_INTERVAL = 2.0
READY = "Ready. Press **Generate**; move the budget or temperature to re-plan."  # the status line, no run yet
NO_PAIR = "No model pair is loaded: load one in the Models tab."   # ... and no pair (a load stopped or failed)
MODEL = dict(concurrency_id="model", concurrency_limit=1)
EMPTY_PROMPT = "the prompt is empty: type something or pick an example"
EMPTY_RACE_PROMPT = "the prompt is empty: type something to race on"   # (the Race tab has no examples)
LIGHT = dict(concurrency_limit=None)
# Events the page wires to itself (a re-plan on each edit, the plan after a run, the page's first
# plan): callable by name with every input given, but left off the "Use via API" page, which then
# lists what a script wants (/generate, /race, /plan, ...: README, The app)
PAGE_WIRING = dict(api_visibility="undocumented")


def no_pair_text(worker, while_loading: str) -> str:
    """What a tab says while no pair is loaded: that one is on its way (`while_loading` says what
    to do meanwhile), or that none is (a load stopped or failed after dropping the old pair)."""
    if worker.load_underway:
        return f"The model pair is still loading (see the header). {while_loading}"
    return NO_PAIR


def model_run(button, fn, inputs, outputs, api_name: str, prompt_at: int | None = None, check=None,
              waiting_line_in=None, worker=None, empty_prompt: str = EMPTY_PROMPT, **options):
    """Wires `button`'s click to `fn`, a run that waits for the model slot (MODEL),
    behind a check of its fields that waits for nothing (LIGHT): Gradio preprocesses the inputs
    only when an event leaves its queue, so a field out of bounds (every Number and Slider is
    checked by name there: ui.guard_numbers), an empty prompt (input number `prompt_at`) or what
    `check(*values)` refuses (UserError, TreeError: reads only, no model) was said only once the
    job ahead had ended (minutes, behind a race). The check says it at once and `fn` starts only
    if it passed. A script calling `api_name` is checked as before, when its event starts.
    `waiting_line_in` (a status line) with `worker`: where the check says that the run waits for
    another job (another page's run or race holds the model; Gradio's own queue note did not show there, and
    the line kept the last run's words for as long as the wait lasted).
    The button is greyed from then until the run has ended: a second press meanwhile did
    nothing and said nothing (its fields were checked again, and Gradio skipped the run, its
    event still pending). A run a Stop took back while it waited ends, and gives the button
    back, only when its turn comes (a press before then would be skipped the same way).
    Returns `fn`'s event."""
    assert (waiting_line_in is None) == (worker is None), "waiting_line_in and worker go together"

    def fields_checked(*values):
        if prompt_at is not None and prompt_is_blank(values[prompt_at]):
            raise page_error(empty_prompt)
        if check is not None:
            try:
                check(*values)
            except (UserError, TreeError) as exc:
                raise page_error(str(exc)) from None
        if waiting_line_in is None:
            return gr.update(interactive=False)
        return gr.update(interactive=False), waiting_line(worker.status())
    checked = button.click(fields_checked, inputs, [button, waiting_line_in] if waiting_line_in is not None else button,
                           api_name=f"{api_name}_fields", show_progress="hidden", **PAGE_WIRING, **LIGHT)
    run = checked.success(fn, inputs, outputs, api_name=api_name, **options, **MODEL)
    # in the page only: a server event to give the button back could be refused (queue full)
    after_run(run, None, None, button, f"{api_name}_ended", js=BUTTON_BACK, show_progress="hidden", **PAGE_WIRING)
    return run


def waiting_line(worker_status: dict):
    """The status line while a pressed run waits for a job that holds the model, else no change."""
    if worker_status.get("state") != "busy":
        return gr.skip()
    kind = JOB_KINDS.get(worker_status.get("job"))
    job = kind.words if kind else "another job"
    return f"… waiting: the model is busy with {job} (one job at a time, from any page); this starts when it ends."


BUTTON_BACK = "() => ({__type__: 'update', interactive: true})"   # gr.update(interactive=True), as the page reads it


def after_run(event, fn, inputs, outputs, api_name: str, **options) -> None:
    """Runs `fn` once `event` has ended, however it ended: finished, stopped, taken back or failed.
    Gradio 6.31's page runs `.then` listeners only after a success (a failed event, one that
    raised page_error, dispatches its `.failure` listeners alone; seen in Chromium), so both are
    wired; one event runs one of them."""
    event.then(fn, inputs, outputs, api_name=api_name, **options)
    event.failure(fn, inputs, outputs, api_name=f"{api_name}_after_failure", **options)


def user_message(exc: BaseException) -> str:
    if isinstance(exc, (UserError, TreeError)):
        return str(exc)
    return f"internal error: {type(exc).__name__}: {exc} (details in the server log)"


def failure_message(exc: BaseException, what: str) -> str:
    """The page's line for a job or handler that failed; anything but bad input is also logged."""
    if not isinstance(exc, (UserError, TreeError)):
        log.error("%s failed", what, exc_info=exc)
    return user_message(exc)


def progress_text(item: Progress) -> str:
    pct = f" — {100 * item.fraction:.0f} %" if item.fraction is not None else ""
    return f"… {item.message}{pct}"


@functools.lru_cache(maxsize=512)
def _expected(parents: tuple, acceptance: tuple) -> float:
    return Tree(parents).expected_tokens(acceptance)


class Run:
    """Everything the page shows about one Live run, rebuilt from its StepEvents."""

    def __init__(self, settings, plan=None):
        self.settings = settings
        self.events: list[StepEvent] = []
        self.plan = plan
        self.learning = None  # the last Note('learning') state: prior, observed, posterior per rank

    @property
    def greedy(self) -> bool:
        return self.settings.greedy

    @property
    def sampler(self) -> str:
        return self.plan.method.sampler if self.plan else "sequoia"

    @property
    def label(self) -> str:
        return self.plan.method.label if self.plan else ""

    @property
    def steps(self) -> list[StepEvent]:
        return [e for e in self.events if e.nodes]

    def slower_than_profiled(self, ev) -> str:
        """Words for a run whose steps took BUSY_RATIO times the device profile's prediction or more
        (its plan's seconds per step): other work on the machine slows every speed shown, and nothing
        said so (a helper saw one run at 1.1 and, later, 5.7 tokens/s, beside the same predicted speedup)."""
        predicted = getattr(self.plan, "predicted_seconds_per_step", None) if self.plan else None
        if not predicted or ev.total_steps < 3 or ev.total_seconds <= 0:
            return ""
        ratio = ev.total_seconds / ev.total_steps / predicted
        if ratio < BUSY_RATIO:
            return ""
        return (f" Its steps took {ratio:.1f}× the time the device profile predicts: the machine may be busy "
                "(other work slows every speed shown here).")

    def _planned_trees(self) -> list[tuple]:
        """The plan's tree, then each step's as planned (before a cut at the context limit, which
        is no change of plan)."""
        tree = getattr(self.plan, "tree", None)
        start = [tuple(tree.parents)] if tree is not None else []
        return start + [tuple(e.planned_parents or e.tree_parents) for e in self.steps]

    def replanned_words(self) -> str:
        """How often the tree changed during the run, by what, and the last one ("" if never): the
        Done line named only the plan the run started from (n=8 d=4 after learning had moved it to
        6 nodes, or a budget slider to 4). Counted over the steps' planned trees; the causes from
        the learner's counts (planning.Replanner: learning's re-plans, plans the page sent)."""
        trees = self._planned_trees()
        changes = sum(a != b for a, b in zip(trees, trees[1:]))
        if not changes:
            return ""
        learning = self.learning or {}
        causes = [cause for cause, count in (("learning", learning.get("tree_changes")),
                                             ("the page's controls", learning.get("user_changes"))) if count]
        last = Tree.from_parents(list(trees[-1]))
        return (f" (its tree changed {plural(changes, 'time')} during the run"
                f"{', by ' + ' and '.join(causes) if causes else ''}; the last one n={last.size} d={last.depth})")

    @property
    def label_now(self) -> str:
        """The run's label, and the tree its last step was planned with where that is another than
        the plan's (learning or a slider re-plan moved it: the status line said n=8 while the tree
        drawn had 4)."""
        trees = self._planned_trees()
        if self.plan is None or len(trees) < 2 or trees[-1] == trees[0]:
            return self.label
        now = Tree.from_parents(list(trees[-1]))
        return f"{self.label}, now n={now.size} d={now.depth}"

    def settings_words(self) -> str:
        """The sampling the run used, for its Done line: the sliders may read other values by then
        (a move during or after the run plans the next one)."""
        st = self.settings
        if st.greedy:
            return "greedy (T = 0)"
        return (f"sampled at T = {st.temperature:g}, top-k {st.top_k or 'off'}, top-p {st.top_p:g}, "
                f"seed {st.seed}")

    def predicted(self) -> tuple[float | None, str]:
        """Mean over the steps so far of F(tree of that step) under the plan's vector."""
        if self.plan is None:
            return None, ""
        vec = self.plan.acceptance
        steps = self.steps
        if self.plan.tree.size == 1 and not any(len(e.tree_parents) > 1 for e in steps):
            # the root alone drafts nothing: one token a step whatever the vector (it read "by the
            # vector measured at T=0" for plain decoding)
            return 1.0, "one token per step: nothing is drafted"
        if vec is None:
            return None, "no vector measured for these settings"
        acc = tuple(self.plan.planning_probabilities)   # a prompt run before: its memory's posterior
        if not steps:
            return self.plan.expected_tokens, "G(n, d) of the plan"
        value = sum(_expected(tuple(e.tree_parents), acc) for e in steps) / len(steps)
        measured = self.plan.measured_acceptance
        how = (f"by the vector measured at T={measured.temperature:g}" if self.plan.exact else
               f"by the vector interpolated for T={measured.temperature:g}" if interpolation.is_interpolated(measured)
               else f"by the nearest vector (measured at T={measured.temperature:g})")   # learning starts from these
        return value, how + (" and this prompt's earlier runs" if self.plan.remembered else "")

    def tree_fig(self, ev):
        return plots.tree_figure(ev, greedy=self.greedy, sampler=self.sampler)

    def widest(self) -> int | None:
        """The most children a node has in the plan's tree or any step's tree (learning and
        slider re-plans change the tree during a run); None before a plan."""
        trees = ([self.plan.tree.parents] if self.plan and self.plan.tree is not None else []) + [
            e.tree_parents for e in self.steps]
        if not trees:
            return None
        return max(max(Counter(p for p in parents if p >= 0).values(), default=0) for parents in trees)

    def planned_acc_fig(self):
        """Before a run: the vector the next run's plan reads, by rank (the chart stayed blank until
        a first step, though the plan was known); a learned posterior where learning pooled one."""
        widest = self.widest()
        vec = self.plan.acceptance if self.plan else None
        if widest == 0 or vec is None:
            return self.acc_fig()   # the root alone, or no vector: its own words
        name = "planned (measured vector)" if self.plan.exact else "planned (not measured here)"
        return plots.acceptance_figure(self.plan.planning_probabilities, ci=vec.ci95, planned_name=name,
                                       widest=widest, title="Acceptance by rank: what the next run is planned from")

    def acc_fig(self):
        widest = self.widest()   # (it walks every step's tree: once per frame)
        if widest == 0:   # n = 1 (autoregressive, or a budget of 1): no rank is ever tried
            return plots.empty_figure("The tree is the root alone: nothing is drafted, so no rank is tried "
                                      "(one token per step, as plain decoding)", 260)
        vec = self.plan.acceptance if self.plan else None
        observed = plots.observed_acceptance(self.steps)
        planned = vec.probabilities if vec is not None else None
        name = "planned (measured vector)" if (self.plan and self.plan.exact) else "planned (not measured here)"
        if self.learning is not None:  # learning on: prior (what the run started from), observed, posterior
            drift = self.learning.get("drift") or {}
            ended = bool(self.events) and self.events[-1].done   # its memory's runs are then those before it
            post_name = "posterior (at the run's end)" if ended else "posterior (plans the next steps)"
            if drift.get("applied"):   # a ratio of 1: only the measured weight (engine/answer_drift.py)
                how = (f"rank-1 misses x{drift['ratio']:.2f}" if drift["ratio"] != 1.0
                       else f"prior worth {drift['prior_weight']:g}")
                post_name = f"posterior for the answer's rest ({how} after {drift['opening']} tokens)"
            remembered = self.learning.get("remembered")
            if remembered and remembered["positions"]:   # earlier runs of this prompt (engine/prompt_memory.py)
                carried = remembered.get("carried_from", "")
                post_name += ",<br>with " + prompt_memory.described(remembered["positions"], remembered["runs"],
                                                                    carried, "<br>" if carried else " ")
                if ended:   # the next run's plan line counts this run too: a second, larger count beside it
                    post_name += " when this run started"
            return plots.acceptance_figure(self.learning["prior"], observed, ci=vec.ci95 if vec is not None else None,
                                           planned_name="prior (run start)", posterior=self.learning["posterior"],
                                           posterior_name=post_name, height=260 + 16 * post_name.count("<br>"),
                                           widest=widest,
                                           title="Acceptance by rank: prior, observed, posterior (learning)")
        return plots.acceptance_figure(planned, observed, ci=vec.ci95 if vec is not None else None,
                                       planned_name=name, title="Acceptance by rank: planned vs observed",
                                       widest=widest)

    def metrics(self) -> str:
        pred, note = self.predicted()
        return render.metrics_html(self.events, pred, note, self.label_now)

    def text(self, current: int | None = None) -> str:
        return render.text_html(self.events, current)

    def data(self, ev: StepEvent | None = None) -> dict:
        ev = ev or (self.events[-1] if self.events else None)
        if ev is None:
            return {}
        return {"step": ev.step, "done": ev.done, "finish_reason": ev.finish_reason, "method": ev.method,
                "label": self.label, "text": ev.text, "new_text": ev.new_text, "new_token_ids": ev.new_token_ids,
                "total_tokens": ev.total_tokens, "total_steps": ev.total_steps,
                "tokens_per_step": ev.tokens_per_step, "tokens_per_second": ev.tokens_per_second,
                "accepted_ranks": ev.accepted_ranks, "tree_size": len(ev.tree_parents),
                "draft_seconds": ev.draft_seconds, "verify_seconds": ev.verify_seconds,
                "other_seconds": ev.other_seconds, "prefill_seconds": ev.prefill_seconds,
                "seconds": ev.total_seconds, "temperature": self.settings.temperature, "top_k": self.settings.top_k,
                "top_p": self.settings.top_p, "seed": self.settings.seed, **({"answer": ev.answer} if ev.done else {})}


def build(ctx: AppContext, header: dict) -> dict:
    prompts = ctx.prompts
    with gr.Row(equal_height=False):
        with gr.Column(scale=1, min_width=300, elem_classes=["sq-controls", "sq-sliders"]):
            prompt = gr.Textbox(label="Prompt", lines=4, max_lines=12, value=prompts[0]["prompt"] if prompts else "",
                                elem_id="sq-prompt")
            example = gr.Dropdown(choices=[p["title"] for p in prompts], value=prompts[0]["title"] if prompts else None,
                                  label="Example prompts", elem_id="sq-example")
            method = gr.Dropdown(METHOD_CHOICES, value="sequoia", label="Method", elem_id="sq-method")
            hardware = gr.Checkbox(value=True, label="Hardware-aware (planner picks n ≤ budget, d ≤ depth from "
                                                      "the device profile)", elem_id="sq-hw")
            budget = gr.Slider(1, ctx.max_budget, value=ctx.default_budget, step=1,
                               label="Tree budget n (nodes, root included)", elem_id="sq-budget")
            depth = gr.Slider(1, ctx.max_depth, value=ctx.default_depth, step=1,
                              label="Depth d (levels, root included)", elem_id="sq-depth")
            temperature = gr.Slider(0, 2, value=0, step=0.05, label="Temperature (0 = greedy)",
                                    elem_id="sq-temperature")
            top_k = gr.Slider(0, 200, value=0, step=1, label="Top-k (0 = off; applied after temperature, before top-p)",
                              elem_id="sq-top-k")
            top_p = gr.Slider(0.05, 1, value=1, step=0.05, label="Top-p", elem_id="sq-top-p")
            learn = gr.Checkbox(value=True, label="Learn acceptance while it runs (re-plans between steps; "
                                                  "exact either way)", elem_id="sq-learn",
                                # a seed fixes the draws, the tree decides which draw serves which token
                                info="At T > 0 what a run learns can change the next run's tree, and with it "
                                     "the sample a seed gives; untick to repeat a sample while the plan stays "
                                     "the same.")
            with gr.Row():
                max_new = gr.Number(value=64, precision=0, minimum=1, maximum=MAX_NEW_TOKENS, label="Max new tokens",
                                    elem_id="sq-max-new", min_width=100)
                seed = gr.Number(value=0, precision=0, minimum=0, maximum=MAX_PAGE_SEED, label="Seed", elem_id="sq-seed",
                                 min_width=100)
            with gr.Row():
                go = gr.Button("Generate", variant="primary", elem_id="sq-generate", min_width=100)
                stop = gr.Button("Stop", variant="stop", elem_id="sq-stop", min_width=100)
        with gr.Column(scale=3, min_width=600):
            # until the page's first plan says Ready (or why not: the pair still loading, none loaded)
            status = gr.Markdown("… planning", label="Live status", show_label=False, elem_id="sq-live-status")
            gr.HTML(_legend_html(), elem_id="sq-legend")
            tree = gr.Plot(label="Tree figure", show_label=False, elem_id="sq-tree")
            replay = gr.Slider(1, 2, value=1, step=1, label="Replay a step (after a run)", interactive=False,
                               elem_id="sq-replay")
            with gr.Row(equal_height=False):
                with gr.Column(scale=5, min_width=360):
                    text = gr.HTML(render.text_html([], placeholder="The generated text appears here, one shade "
                                                                    "per step."),
                                   label="Generated text (HTML, shaded by step)", show_label=False, elem_id="sq-text")
                with gr.Column(scale=4, min_width=360):
                    metrics = gr.HTML(render.metrics_html([]), label="Metrics (HTML)", show_label=False,
                                      elem_id="sq-metrics")
                    acc = gr.Plot(label="Acceptance chart", show_label=False, elem_id="sq-acc")
    with gr.Accordion("Raw data (what the API returns)", open=False):
        with gr.Row():
            step_json = gr.JSON(label="Last step", elem_id="sq-step-json")
            plan_json = gr.JSON(label="Plan", elem_id="sq-plan-json")

    plan_md = header["plan"]
    # the prompt picks code/prose acceptance (and its memory); max new tokens, whether a rest is planned for
    plan_inputs = [method, budget, depth, hardware, temperature, top_p, top_k, prompt, max_new]

    # ------------------------------------------------------------ handlers
    def replan(method_v, budget_v, depth_v, hw_v, temp_v, top_p_v, top_k_v, prompt_v=None, max_new_v=64,
               request: gr.Request = None, in_page: bool = False):
        """Re-plan from caches at once; measure (with progress) only when nothing is measured. A
        re-plan reaches a run only if the run was going when it was asked for: one asked for before
        Generate, with the page's values of that moment, says nothing once it ends (Generate read
        the values the run uses; the run shows its own plan). `in_page`: asked for by the page's
        own controls, which toast a refusal once (refused); a script is always answered with it."""
        sess = ctx.sessions.get(request)
        ticket = sess.plans.ask()
        try:
            spec = spec_from(method_v, budget_v, depth_v, hw_v, sess)
            settings = settings_from(temp_v, top_p_v, max_new_v, top_k=top_k_v)
        except (UserError, TreeError) as exc:
            yield from refused(sess, str(exc), in_page)
            return
        try:
            result = ctx.worker.quick_plan(spec, settings, allow_nearest=True, learn=getattr(sess, "learn", True),
                                           prompt=prompt_v)
        except NeedsMeasurement as need:
            yield {status: f"… {need} — measuring now (the plan follows)…"}
            job = ctx.worker.plan(spec, settings, learn=getattr(sess, "learn", True), prompt=prompt_v)
            sess.add_plan_job(job)
            try:
                for item in job.stream():
                    if isinstance(item, Progress):
                        yield {status: progress_text(item)}
            except Exception as exc:  # noqa: BLE001
                message = failure_message(exc, "measuring for a plan")
                yield {status: f"✗ {message}"}
                raise page_error(message) from None
            if job.result is None:
                yield {status: "Measurement stopped: no new plan (the plan line shows the last one)."}
                return
            result = job.result
        except (UserError, TreeError) as exc:
            if ctx.worker.pair is None:   # the values are fine: the pair is not there (yet)
                yield {status: no_pair_text(ctx.worker, "Press **Generate** any time: the run starts as soon "
                                                        "as the pair is ready.")}
                return
            yield from refused(sess, str(exc), in_page)
            return
        if sess.plans.superseded(ticket):
            yield {status: gr.skip()}   # a newer plan, or a run, was asked for since
            return
        sess.plan = result
        sess.plan_shown()
        sess.publish(spec.kind, result)  # a PlanResult: the running job's learning re-plans its spec
        running = sess.running
        follows = running and sess.run_info.get("kind") == spec.kind
        run_keeps = ""
        if follows:
            note = f"Re-planned: **{result.method.label}** — the running job uses it from its next step."
            run = sess.run_info.get("run")
            ran = getattr(run, "settings", None)
            if ran is not None and _sampling(ran) != _sampling(settings):
                # only the tree reaches a running job: its draws stay those of the settings it started with
                run_keeps = run.settings_words()
                note = f"Re-planned: **{result.method.label}** — the running job {render.keeps_own_sampling(run_keeps)}."
        elif running:
            note = f"Planned **{result.method.label}** for the next run (the running one uses another method)."
        else:
            note = f"Planned **{result.method.label}**: this tree is used by the next run."
        out = {plan_md: render.plan_line(result, follows, run_keeps=run_keeps), plan_json: result.summary(),
               status: note}
        if not running:
            vec = result.planning_probabilities
            out[tree] = plots.plan_figure(result.tree, vec)
            out[acc] = Run(settings, result).planned_acc_fig()
        yield out

    def refused(sess, message: str, in_page: bool):
        """A re-plan these values refuse: the plan line and status say so, and a toast, unless
        the page's controls asked and its last toast said the same with no plan since (Session.said_already)."""
        yield no_plan(sess, message)
        if not (in_page and sess.said_already(message)):
            raise page_error(message)

    def page_replan(method_v, budget_v, depth_v, hw_v, temp_v, top_p_v, top_k_v, prompt_v=None, max_new_v=64,
                    request: gr.Request = None):
        """replan, for the page's sliders, Method and Hardware-aware box."""
        yield from replan(method_v, budget_v, depth_v, hw_v, temp_v, top_p_v, top_k_v, prompt_v, max_new_v,
                          request, in_page=True)

    def no_plan(sess, message: str) -> dict:
        """A value no plan can have (depth 1 for a DP tree, T = 0.005, no imported tree): the plan
        line and status say so; the last plan stayed up, "used by the next run", beside the error,
        while Generate was refused with it."""
        out = {plan_md: render.no_plan_line(message, sess.running), plan_json: {}}
        if sess.running:   # the running job keeps its tree and status line; its end plans again
            sess.plan_when_run_ends()   # (its Done line put the last plan back, which these values lack)
        else:
            out[status] = f"✗ {message}. No plan until then (Generate refuses these values too)."
            out[tree] = plots.empty_figure("No plan for these values", 440)
            out[acc] = plots.empty_figure("No plan for these values", 260)
        return out

    def replan_beside_run(sess, *plan_args):
        """replan, but with a Live run on screen (finished, stopped or failed) only the plan line and
        the plan JSON change: the run's last tree and status line stay (Replay still works)."""
        run_on_screen = sess.live_run_on_screen()
        for out in replan(*plan_args, in_page=True):
            if plan_md in out and run_on_screen:
                out = {k: v for k, v in out.items() if k in (plan_md, plan_json)}
            yield out

    def replan_when_idle(method_v, budget_v, depth_v, hw_v, temp_v, top_p_v, top_k_v, prompt_v=None, max_new_v=64,
                         request: gr.Request = None):
        """The prompt or max new tokens was edited: the shown plan follows, but a running job keeps
        the plan of the prompt it is answering (it is not re-planned for the next run's text). A
        Live run on screen keeps its last tree and status line, as after plan_after_run: Generate's
        own click leaves the box (the edit's plan then often lands after a short run, and its
        "Planned ..." line replaced the run's "Done" line)."""
        sess = ctx.sessions.get(request)
        if sess.running or ctx.worker.pair is None:
            # nothing to plan for yet (the header plans once the pair is ready), or a run holds its own
            # and the shown plan follows this control once it ends
            sess.plan_when_run_ends()
            yield {status: gr.skip()}   # (an empty dict is not an update: gradio counts it as one value)
            return
        yield from replan_beside_run(sess, method_v, budget_v, depth_v, hw_v, temp_v, top_p_v, top_k_v, prompt_v,
                                     max_new_v, request)

    def plan_after_run(method_v, budget_v, depth_v, hw_v, temp_v, top_p_v, top_k_v, prompt_v=None, max_new_v=64,
                       request: gr.Request = None):
        """After a Live run or a race: if a control that re-plans between runs (the prompt, an
        example, the learning switch, ...) was changed while it went, or the run learned (learning
        on) or it was a race (its lanes store what they observed), the shown plan now follows the
        controls and what was learned, as it would have had they been changed after it. A Live run on screen keeps
        its last tree and its status line (finished, stopped or failed; Replay still works): only
        the plan line and the plan JSON change, and they say what the next run uses."""
        sess = ctx.sessions.get(request)
        if not sess.plan_after_run or sess.running or ctx.worker.pair is None:
            yield {status: gr.skip()}
            return
        sess.plan_after_run = False
        yield from replan_beside_run(sess, method_v, budget_v, depth_v, hw_v, temp_v, top_p_v, top_k_v, prompt_v,
                                     max_new_v, request)

    def first_plan(method_v, budget_v, depth_v, hw_v, temp_v, top_p_v, top_k_v=0, prompt_v=None, max_new_v=64,
                   request: gr.Request = None):
        """On page load: draw the plan if caches allow; never starts a measurement. Says nothing
        once a run has started (Generate pressed while it planned): the run shows its own plan, and
        a late page-load plan must not replace it (it did, on a page opened as the pair loaded)."""
        sess = ctx.sessions.get(request)
        ticket = sess.plans.ask()
        try:
            spec = spec_from(method_v, budget_v, depth_v, hw_v, sess)
            settings = settings_from(temp_v, top_p_v, max_new_v, top_k=top_k_v)
            result = ctx.worker.quick_plan(spec, settings, allow_nearest=True, learn=getattr(sess, "learn", True),
                                           prompt=prompt_v)
        except (UserError, TreeError) as exc:
            if sess.running or sess.plans.superseded(ticket):
                return _dropped(sess)
            if isinstance(exc, NeedsMeasurement) and exc.what == "profile" and ctx.worker.profiling_now():
                return {status: f"{PROFILING_NOW} **Generate** waits for it.",
                        tree: no_tree_yet()}
            if isinstance(exc, NeedsMeasurement):
                first, button = (("profiles the device", "Profile this device") if exc.what == "profile" else
                                 ("measures it", "Measure on this pair"))
                return {status: f"{exc}. **Generate** {first} first (progress shown here), or use "
                                f"**{button}** in the Planner tab.",
                        tree: no_tree_yet()}
            if ctx.worker.pair is None:
                msg = no_pair_text(ctx.worker, "Press **Generate** any time: the run starts as soon as the pair "
                                                "is ready.")
            else:
                msg = str(exc)
            return {status: msg, tree: no_tree_yet()}
        if sess.running or sess.plans.superseded(ticket):
            return _dropped(sess)
        sess.plan = result
        vec = result.planning_probabilities
        return {plan_md: render.plan_line(result), plan_json: result.summary(),
                tree: plots.plan_figure(result.tree, vec), acc: Run(settings, result).planned_acc_fig(), status: READY}

    def _dropped(sess) -> dict:
        """The page's first plan says nothing once a run or a race has started; a race shows no plan
        of its own, so the plan line is filled in once it ends (plan_after_run)."""
        sess.plan_when_run_ends()
        return {}

    def generate(prompt_v, method_v, budget_v, depth_v, hw_v, temp_v, top_p_v, max_new_v, seed_v, top_k_v,
                 learn_v=True, request: gr.Request = None):
        sess = ctx.sessions.get(request)
        if taken_back(ctx, request, "live"):
            yield {status: TAKEN_BACK}
            return
        try:
            if prompt_is_blank(prompt_v):
                raise UserError(EMPTY_PROMPT)
            settings = settings_from(temp_v, top_p_v, max_new_v, seed_v, top_k_v)
            spec = spec_from(method_v, budget_v, depth_v, hw_v, sess)
            sess.refuse_if_running()
            sess.learn = learn_v is not False
            sess.plans.ask()   # before the job exists: a re-plan asked for before now must not reach it
            sess.plan_after_run = False   # the run reads every control as it is now
            sess.submitting = True   # and the session counts as running from here
            try:
                job = ctx.worker.generate(prompt_v, spec, settings, plan=sess.tree_source(spec.kind),
                                          learn=sess.learn)
                sess.job = job
                # with learning on, what the run stores (evidence, the prompt's memory) changes the
                # next run's plan: the plan line is redrawn once it ends
                sess.plan_after_run = sess.learn
                stop_if_taken_back(ctx, request, "live", job)
            finally:
                sess.submitting = False
        except (UserError, TreeError) as exc:
            raise page_error(str(exc)) from None
        run = Run(settings)
        sess.events = run.events
        sess.run_info = {"run": run, "kind": spec.kind}
        sess.run_going("live")
        last_fig = last_acc = last_text = 0.0
        ahead = job.position
        try:   # from the first yield: a page that goes away there stops the run too
            yield {status: f"… waiting for the model worker ({plural(ahead, 'job')} ahead)…"
                   if ahead else "… starting…",
                   # greyed, and no longer naming the last run's steps (it read "1–8", 8, all run long)
                   replay: gr.update(interactive=False, label="Replay a step (once this run ends)"),
                   # the last run's cards went on showing while a long prompt was read (minutes)
                   text: render.text_html([], placeholder="…"), metrics: render.metrics_html([])}
            for item in job.stream():
                going = not job.stop_requested   # after a Stop its "stopping…" stays until the last line
                if isinstance(item, Progress):
                    if going:
                        yield {status: progress_text(item)}
                elif isinstance(item, Note) and item.kind == "plan":
                    run.plan = item.data
                    sess.plan = item.data
                    # this run's tree until its first step draws one (not the last run's last step)
                    yield {plan_md: render.plan_line(item.data, own_run=True), plan_json: item.data.summary(),
                           tree: plots.plan_figure(item.data.tree, item.data.planning_probabilities),
                           acc: run.acc_fig(),   # the run's planned vector; its observed bars join each step
                           status: f"● running **{item.data.method.label}**…" if going else gr.skip()}
                elif isinstance(item, Note) and item.kind == "learning":
                    run.learning = item.data
                elif isinstance(item, StepEvent):
                    run.events.append(item)
                    out = {step_json: run.data(item)}
                    if item.done:
                        out[status] = sess.run_ended("live", _run_status(item, run))
                    elif going:
                        out[status] = _run_status(item, run)
                    now = time.monotonic()
                    if now - last_text >= TEXT_INTERVAL or item.done:
                        out[text], out[metrics] = run.text(), run.metrics()
                        last_text = now
                    if item.nodes and (now - last_fig >= FIG_INTERVAL or item.done):
                        out[tree] = run.tree_fig(item)
                        last_fig = now
                    if now - last_acc >= ACC_INTERVAL or item.done:
                        out[acc] = run.acc_fig()
                        last_acc = now
                    if item.done:
                        out[plan_md] = render.plan_line(sess.plan, False)
                        steps = run.steps
                        if steps and not item.nodes:
                            out[tree] = run.tree_fig(steps[-1])
                        out[replay] = _replay_update(len(steps))
                    yield out
        except GeneratorExit:   # the page went away: no last line will be shown
            sess.run_ended("live", "")
            raise
        except Exception as exc:  # noqa: BLE001 - every failure becomes a message
            message = failure_message(exc, "generate")
            yield {status: sess.run_ended("live", f"✗ {message}"), replay: _replay_update(len(run.steps))}
            raise page_error(message) from None
        finally:  # also when the page went away or the event was cancelled (GeneratorExit)
            if not job.done:
                job.stop()
        if job.state == "stopped" and not run.events:
            yield {status: sess.run_ended("live", STOPPED_BEFORE_A_STEP), replay: _replay_update(0)}

    def show_step(step_v, request: gr.Request):
        sess = ctx.sessions.get(request)
        run = sess.run_info.get("run")
        if run is None or not run.steps:
            raise page_error("no finished run to replay yet")
        steps = run.steps
        try:
            k = round(float(step_v))   # as the page's box rounds a typed fraction (assets/page.js)
        except (TypeError, ValueError, OverflowError):
            raise page_error(f"step must be a whole number (got {step_v!r})") from None
        if not 1 <= k <= len(steps):
            raise page_error(f"step must be between 1 and {len(steps)}")
        ev = steps[k - 1]
        return {tree: run.tree_fig(ev), text: run.text(current=ev.step), step_json: run.data(ev),
                status: f"Replaying step {ev.step} of {len(steps)}: {plural(len(ev.new_token_ids), 'new token')}."}

    def pick_example(title):
        for p in prompts:
            if p["title"] == title:
                return p["prompt"]
        return gr.skip()

    plan_outputs = [plan_md, tree, status, acc, plan_json]   # the plan's JSON stays last (scripts read [-1])
    for slider in (budget, depth, temperature, top_p, top_k):
        slider.release(page_replan, plan_inputs, plan_outputs, api_name=f"plan_on_{slider.elem_id[3:].replace('-', '_')}",
                       show_progress="hidden", trigger_mode="always_last", **PAGE_WIRING, **LIGHT)
    method.change(page_replan, plan_inputs, plan_outputs, api_name="plan_on_method", show_progress="hidden",
                  trigger_mode="always_last", **PAGE_WIRING, **LIGHT)
    # only a Sequoia tree is planned by the device's profile: greyed for the others (it did nothing)
    method.change(lambda m: gr.update(interactive=m == "sequoia"), method, hardware, api_name="hardware_for_method",
                  show_progress="hidden", **PAGE_WIRING, **LIGHT)
    hardware.change(page_replan, plan_inputs, plan_outputs, api_name="plan_on_hardware", show_progress="hidden",
                    trigger_mode="always_last", **PAGE_WIRING, **LIGHT)
    # the prompt picks its kind's vector and its memory; max new tokens, whether a rest is planned for
    for box, name in ((prompt, "prompt"), (max_new, "max_new")):
        box.blur(replan_when_idle, plan_inputs, plan_outputs, api_name=f"plan_on_{name}", show_progress="hidden",
                 trigger_mode="always_last", **PAGE_WIRING, **LIGHT)
    # the API entry point: same as the sliders
    plan_btn = gr.Button("Re-plan", visible=False, elem_id="sq-replan")
    plan_btn.click(replan, plan_inputs, plan_outputs, api_name="plan", show_progress="hidden", **LIGHT)

    gen_inputs = [prompt, method, budget, depth, hardware, temperature, top_p, max_new, seed, top_k, learn]
    gen_outputs = [status, tree, text, metrics, acc, replay, step_json, plan_md, plan_json]
    # the queue position shows on the status line only
    run_event = model_run(go, generate, gen_inputs, gen_outputs, "generate", prompt_at=0,
                          waiting_line_in=status, worker=ctx.worker, show_progress="minimal",
                          show_progress_on=[status])
    after_run(run_event, plan_after_run, plan_inputs, plan_outputs, "plan_after_run", show_progress="hidden",
              **PAGE_WIRING, **LIGHT)
    # a run still reading its prompt (minutes for a long one) has no step to finish
    wire_stop(ctx, stop, "live", status, api_name="stop", runs={"Live run": run_event},
              stopping=lambda sess: STOPPING if sess.events else STOPPING_BEFORE_A_STEP)
    # .input: the user's own drags and typed values (never the update a finished run sends)
    replay.input(show_step, replay, [tree, text, step_json, status], api_name="replay", show_progress="hidden",
                 trigger_mode="always_last", **LIGHT)
    # .select fires on every pick, the shown one too (it restores an edited prompt); the plan follows
    # the example's kind and memory, as when the prompt box is left (a pick never blurs the box)
    example.select(pick_example, example, prompt, api_name="pick_example", show_progress="hidden",
                   **PAGE_WIRING, **LIGHT).success(
        replan_when_idle, plan_inputs, plan_outputs, api_name="plan_on_example", show_progress="hidden",
        trigger_mode="always_last", **PAGE_WIRING, **LIGHT)

    def set_learn(learn_v, request: gr.Request):
        """The switch also decides whether slider re-plans use the learned vector."""
        ctx.sessions.get(request).learn = learn_v is not False

    # the shown plan follows the switch: with learning off it is planned without the learned evidence
    learn.change(set_learn, learn, None, api_name="set_learn", show_progress="hidden", **PAGE_WIRING, **LIGHT).success(
        replan_when_idle, plan_inputs, plan_outputs, api_name="plan_on_learn", show_progress="hidden",
        trigger_mode="always_last", **PAGE_WIRING, **LIGHT)

    return {"prompt": prompt, "method": method, "budget": budget, "depth": depth, "hardware": hardware,
            "temperature": temperature, "top_p": top_p, "top_k": top_k, "max_new": max_new, "seed": seed, "tree": tree,
            "learn": learn,
            "status": status, "plan_json": plan_json, "plan_md": plan_md, "first_plan": (first_plan, plan_inputs, plan_outputs),
            # what another tab calls after setting these controls (a value set by code fires no release)
            "replan_when_idle": (replan_when_idle, plan_inputs, plan_outputs),
            # what the Race tab calls once a race ends (Live controls may have moved meanwhile)
            "plan_after_run": (plan_after_run, plan_inputs, plan_outputs)}


def no_tree_yet():
    """The Live tree's figure before any plan or step (or once the pair it planned for is gone)."""
    return plots.empty_figure("The tree appears after the first plan or step.")


BUSY_RATIO = 2.5   # a run's steps this much slower than the device profile predicts: the machine seems busy
STOPPING = "■ stopping after the current step…"   # what a tab's Stop says when it stopped its run
STOPPING_BEFORE_A_STEP = "■ stopping before the first step…"   # the Live run's, while it has none (reading the prompt)

# what a run says when it waited for the model slot and its tab's Stop took it back (app/waiting.py)
TAKEN_BACK = "■ Stopped before it started (Stop took it back while it waited for the model)."


def wire_stop(ctx: AppContext, button, tab: str, line, api_name: str, runs: dict | None = None,
              stopping: str | Callable[[Session], str] = STOPPING) -> None:
    """A tab's Stop button: stops this tab's own jobs, takes back its `runs` (what each is called:
    the event the tab wired) that wait in Gradio's queue, and says so in the tab's status `line`
    (Session.stop_tab, stop_reply); then, once that reply is shown, puts back the line the stopped
    run ended with if it has ended meanwhile (Session.line_after_stop: the reply can land last).
    The Planner's Stop is app/planner_stop.py (its two captions show more than runs)."""
    ctx.run_events[tab] = waiting.event_ids(runs or {})

    def stop(request: gr.Request = None):
        took_back = take_back_waiting(ctx, request, tab)
        sess = ctx.sessions.get(request)
        stopped = sess.stop_tab(tab)
        return stop_reply(stopped, tab, took_back, stopping(sess) if callable(stopping) else stopping)

    def line_after_stop(request: gr.Request):
        ended = ctx.sessions.get(request).line_after_stop(tab)
        return gr.skip() if ended is None else ended

    button.click(stop, None, line, api_name=api_name, show_progress="hidden", **LIGHT).then(
        line_after_stop, None, line, api_name=f"line_after_{api_name}", show_progress="hidden", **PAGE_WIRING,
        **LIGHT)


def take_back_waiting(ctx: AppContext, request: gr.Request, tab: str) -> list[str]:
    """A Stop of `tab`: marks this page's runs of that tab that wait in Gradio's queue (and any
    just out of it whose handler may not have looked yet) as taken back; returns what each one
    that waited is called."""
    blocks, key, names = ctx.sessions.blocks, getattr(request, "session_hash", None), ctx.run_events.get(tab)
    if blocks is None or not names:
        return []
    queued = waiting.waiting(blocks, key, names)
    ctx.sessions.get(request).take_back(set(queued) | set(waiting.started(blocks, key, names)))
    return [names[fn_id] for fn_id in queued.values()]


def taken_back(ctx: AppContext, request: gr.Request, tab: str) -> bool:
    """Called first by each run's handler: whether this run waited in Gradio's queue and its tab's
    Stop took it back meanwhile (the handler then only says TAKEN_BACK)."""
    sess = ctx.sessions.get(request)
    if not sess.taken_back or ctx.sessions.blocks is None:
        return False
    # the handler's own event: every run event of a tab is in the model group, which runs one at a
    # time, so this page has at most one of them started
    mine = waiting.started(ctx.sessions.blocks, getattr(request, "session_hash", None), ctx.run_events.get(tab, {}))
    return sess.was_taken_back(mine)


def waiting_words(took_back: list[str]) -> str:
    """How a Stop names the runs of its tab it took back while they waited ("the race", "the
    measurement and the 2 profiles")."""
    counts = Counter(took_back)
    names = " and ".join(f"the {name}" if n == 1 else f"the {n} {name}s" for name, n in counts.items())
    return f"{names} waiting for the model will not start"


def stop_reply_with(stopping: str, nothing: str, took_back: list[str]) -> str:
    """A Stop's reply: `stopping` when it stopped its tab's run (and what it took back, in
    brackets), else what it took back, else `nothing`."""
    if stopping:
        return stopping + (f" ({waiting_words(took_back)})" if took_back else "")
    if took_back:
        words = waiting_words(took_back)
        return f"■ {words[0].upper()}{words[1:]}."
    return nothing


def stop_if_taken_back(ctx: AppContext, request: gr.Request, tab: str, job) -> None:
    """Called by each run's handler once its job is stored where its tab's Stop finds it: a Stop
    that came after the handler's first look (taken_back) but before the job was stored found
    nothing to stop, and only marked the event; the job is stopped here instead."""
    if taken_back(ctx, request, tab):
        job.stop()


def stop_reply(stopped: str | None, tab: str, took_back: list[str] = (), stopping: str = STOPPING) -> str:
    """What a tab's Stop says (Session.stop_tab): its own run ends after the current step (its last
    line follows), its runs waiting for the model will not start, and another tab's job is left
    going (the reply says where its Stop is)."""
    nothing = ("Nothing is running in this tab." if stopped is None else
               f"Nothing is running in this tab; {_goes_on(stopped)}.")
    return stop_reply_with(stopping if stopped == tab else "", nothing, took_back)


def _goes_on(job_name: str) -> str:
    kind = JOB_KINDS.get(job_name)
    return kind.goes_on if kind else "another job goes on"


# a hardware-aware plan asked for while the device is being timed (a first load's profile)
PROFILING_NOW = ("Hardware-aware planning needs a device profile, and the device is being profiled now (the "
                 "header shows how far): the plan follows once it is done.")


STOPPED_BEFORE_A_STEP = "Stopped before the first step."


def _sampling(settings) -> tuple:
    """What decides a run's draws: at T = 0 top-k and top-p change nothing."""
    return ("greedy",) if settings.greedy else (settings.temperature, settings.top_k, settings.top_p)


def _run_status(ev: StepEvent, run: Run) -> str:
    if ev.done:
        if ev.finish_reason == "stopped" and not ev.total_steps:
            return STOPPED_BEFORE_A_STEP   # stopped during the prefill: nothing to count or replay
        head = ("■ Stopped" if ev.finish_reason == "stopped" else "✓ Done ({})".format(
            {"eos": "the model ended its answer", "max_new_tokens": "max new tokens reached",
             "context": "the context is full"}.get(ev.finish_reason, ev.finish_reason)))
        return (f"{head}: **{plural(ev.total_tokens, 'token')} in {plural(ev.total_steps, 'step')}**, "
                f"{ev.tokens_per_step:.2f} tokens/step, {ev.tokens_per_second:.1f} tokens/s with {run.label}"
                f"{run.replanned_words()}, {run.settings_words()}."
                + run.slower_than_profiled(ev)
                + (" Drag *Replay a step* to look at any step." if ev.total_steps >= 2 else ""))
    return f"● {run.label_now}: step {ev.step} · {plural(ev.total_tokens, 'token')} · {ev.tokens_per_second:.1f} tokens/s"


def _replay_update(n: int):
    if n >= 2:
        return gr.update(minimum=1, maximum=n, value=n, interactive=True, label=f"Replay a step (1–{n})")
    # back to the empty slider: a run of no steps left the last run's 5 of 5 showing
    return gr.update(minimum=1, maximum=2, value=1, interactive=False,
                     label="Replay a step (after a run of 2 or more steps)")


def _legend_html() -> str:
    items = "".join(f'<span class="sq-chip"><span class="sq-dot" style="background:{plots.STATUS_COLORS[s]}"></span>'
                    f'{render.esc(plots.STATUS_LABELS[s])}</span>' for s in plots.STATUS_COLORS)
    return (f'<div class="sq-legend">{items}<span class="sq-chip sq-muted">thick green line = the accepted path · dotted amber = the bonus token · '
            f'hover a node for its token, rank, draft q and target p</span></div>')
