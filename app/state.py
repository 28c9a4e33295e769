"""What the page keeps per browser session (and per gradio_client), plus the small shared
context every tab gets. Nothing here touches a model: model work goes through engine.worker."""
from __future__ import annotations

import json
import math
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gradio as gr

from app.gradio_fixes import drop_orphaned_copies
from engine import export
from engine.errors import UserError
from engine.settings import Settings
from engine.tree import Tree
from engine.planning import MethodSpec
from engine.worker import LOAD_JOB, PROFILE_JOB, Worker

ASSETS = Path(__file__).resolve().parents[1] / "assets"

# (label shown, value used by the API)
METHOD_CHOICES = [("Sequoia (DP tree)", "sequoia"), ("SpecInfer k×d", "specinfer"), ("Chain", "chain"),
                  ("Autoregressive", "ar"), ("Imported tree", "tree")]
METHOD_LABELS = {v: k for k, v in METHOD_CHOICES}
RACE_CHOICES = [("Autoregressive", "ar"), ("Chain", "chain"), ("SpecInfer k×d", "specinfer"),
                ("Sequoia DP", "sequoia"), ("Sequoia hardware-aware", "sequoia-auto")]
RACE_LABELS = {v: k for k, v in RACE_CHOICES}
MAX_SESSIONS = 256
# the seed boxes' maximum: the browser holds numbers as doubles, so a larger integer arrived rounded
# (2^63 - 1 typed came as 2^63, then refused); the CLI and the API's own callers take up to 2^63 - 1
MAX_PAGE_SEED = 2**53 - 1


@dataclass(frozen=True)
class JobKind:
    """What the page says of one kind of worker job (engine/worker.py's job names)."""
    tab: str          # the tab whose Stop stops it ("load": the Stop beside Load pair)
    words: str        # what it is, in a run's waiting line ("… the model is busy with a race")
    goes_on: str      # what another tab's Stop says of it while it goes on


# every worker job by name: the Live tab's runs and the measurement its plan may need, the Race
# tab's races, the Planner's measurements, the Models tab's check and its load
JOB_KINDS = {
    "generate": JobKind("live", "a Live run", "the Live run goes on (its Stop is in the Live tab)"),
    "plan": JobKind("live", "measuring what a Live plan needs",
                    "the Live tab's plan is measuring what it needs (its Stop is in the Live tab)"),
    "race": JobKind("race", "a race", "the race goes on (its Stop is in the Race tab)"),
    "measure acceptance": JobKind("planner", "an acceptance measurement",
                                  "the acceptance measurement goes on (its Stop is in the Planner tab)"),
    PROFILE_JOB: JobKind("planner", "profiling the device",
                              "the device profile goes on (its Stop is in the Planner tab)"),
    "check pair": JobKind("models", "a pair check", "the pair check goes on (its Stop is in the Models tab)"),
    LOAD_JOB: JobKind("load", "loading a pair",
                      "the pair load goes on (its Stop is beside Load pair in the Models tab)"),
}


def tab_of_job(name: str) -> str | None:
    kind = JOB_KINDS.get(name)
    return kind.tab if kind else None


class NewestWins:
    """Tickets for work a page asks for side by side when only the newest asked for may show."""

    def __init__(self):
        self._asked = 0
        self._lock = threading.Lock()

    def ask(self) -> int:
        with self._lock:
            self._asked += 1
            return self._asked

    def superseded(self, ticket: int) -> bool:
        """Whether more was asked for after the ask that got `ticket`."""
        return self._asked != ticket


@dataclass
class Session:
    """One browser tab (or one gradio_client). `live` is the tree a running job of this session
    should use from its next step on: (version, spec kind, tree); a job only takes trees newer
    than the version it started with, so an old re-plan never leaks into a new run."""
    job: Any = None                       # the running/last generate or race Job
    # one slot per kind of side job, so that one never hides another from its tab's Stop
    aux: Any = None                       # the Planner's measurement or profile
    planner_run: str = "measurement"      # which of the two the Planner ran last (its caption gets its Stop's reply)
    plan_jobs: list = field(default_factory=list)   # the measurements Live re-plans needed (add_plan_job)
    check_job: Any = None                 # the Models tab's pair check
    load_job: Any = None                  # the Models tab's pair load
    events: list = field(default_factory=list)   # StepEvents of the last Live run (for replay)
    run_info: dict = field(default_factory=dict)  # greedy, sampler, planned vector, label, ...
    live: tuple = (0, None, None)
    imported: Tree | None = None
    imported_name: str = ""               # the imported tree's file name (the Planner's line says it)
    plan: Any = None                      # last PlanResult shown
    submitting: bool = False              # Generate is handing a run to the worker (no job object yet)
    # plans of one page run side by side and the one shown must be the newest asked for, not the
    # last to finish. Generate takes a plan ticket before its job exists: the run plans with the
    # values it was given, so a plan asked for before it must not replace the plan the run shows
    plans: NewestWins = field(default_factory=NewestWins)
    # Planner tab redraws: a tab select, an import and a new profile each redraw it, and a slow one
    # ending last (the tab select's, planned for the method before an import) put back the old plan
    planner_views: NewestWins = field(default_factory=NewestWins)
    # Measure and Profile presses ({"measurement" | "profile": time.monotonic()}): a redraw finishing
    # just after a press leaves that caption's waiting or progress line (app/planner_tab.py)
    planner_pressed: dict = field(default_factory=dict)
    plan_after_run: bool = False          # re-plan once the run ends: a control that re-plans was changed
                                          # while it went, or it learned (learning on, or a race)
    plan_profile: Any = None              # the device profile's stamp when the header last planned
    # per tab ("live", "race", "planner", "load"): the status line its last run ended with (None while it
    # goes), and the tabs whose going run this page's last Stop stopped (see line_after_stop)
    ended_with: dict = field(default_factory=dict)
    stopped_going: set = field(default_factory=set)
    # ids of this page's events a Stop took back while they waited in Gradio's queue (app/waiting.py)
    taken_back: OrderedDict = field(default_factory=OrderedDict)
    plan_refused: str = ""                # the plan refusal this page was last told in a toast (said_already)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def running(self) -> bool:
        return self.submitting or (self.job is not None and not self.job.done)

    def refuse_if_running(self) -> None:
        """Generate and Start race refuse while this page's run or race goes (the worker runs one
        at a time, and a page keeps one run), naming the tab whose Stop ends it."""
        if self.running:   # `job` holds a run or a race; while submitting, it is a Live run's turn
            race = not self.submitting and getattr(self.job, "name", None) == "race"
            what, tab = ("a race", "Race") if race else ("a Live run", "Live")
            raise UserError(f"{what} is already going: press Stop in the {tab} tab first")

    def live_run_on_screen(self) -> bool:
        """Whether the Live tab shows a run (finished, stopped or failed, even one that failed
        or stopped before its first step): a later plan then leaves its tree and status line alone
        (a race leaves the Live tab as it was)."""
        return bool(self.events) or self.run_info.get("run") is not None

    def said_already(self, refusal: str) -> bool:
        """Whether this plan refusal is the one the page was last told in a toast, with no plan shown
        since (else it is noted as told now). One click can fire two re-plans (an option picked in the
        Method list lets the mouse's release land on the Budget slider under the list, whose release
        re-plans too: one toast held the refusal twice, "Error (2)"), and with one bad value each
        later edit of another control raised it again ("Error (3)"); the plan line and the status
        line say it all the while."""
        with self.lock:
            if self.plan_refused == refusal:
                return True
            self.plan_refused = refusal
            return False

    def plan_shown(self) -> None:
        """A plan is on the page again: its next refusal is toasted (said_already)."""
        with self.lock:
            self.plan_refused = ""

    def plan_when_run_ends(self) -> None:
        """A plan the page asked for was not shown because a run or a race goes: show one once it
        ends (app/live.py plan_after_run, chained after Generate and Start race)."""
        if self.running:
            self.plan_after_run = True

    def jobs_going(self) -> list:
        """This session's jobs that have not finished (queued or running)."""
        return [job for job in (self.job, self.aux, *self.plan_jobs, self.check_job, self.load_job)
                if job is not None and not job.done]

    def add_plan_job(self, job) -> None:
        """A Live re-plan's measurement. Each re-plan that finds nothing measured submits one (two
        slider moves before the first ends: two, the second then reads the first's result), so
        all of them are kept till they end: one slot let the newer hide the older from the Stop."""
        with self.lock:
            self.plan_jobs = [going for going in self.plan_jobs if not going.done] + [job]

    def stop_all(self) -> bool:
        """Stop every job of this session (the page went away) but a pair load, which every page
        uses; True if something was running or queued."""
        going = [job for job in self.jobs_going() if job is not self.load_job]
        for job in going:
            job.stop()
        return bool(going)

    # Stop's reply ("stopping after the current step") and the run's own last status line travel as
    # two events' outputs: when the run ends right after Stop, the reply can reach the page last and
    # stay there. So a tab's Stop is followed by line_after_stop, which puts the run's last line back.
    def run_going(self, tab: str) -> None:
        self.ended_with[tab] = None

    def run_ended(self, tab: str, line: str) -> str:
        """Record (before it is shown) the status line `tab`'s run ended with; returns it."""
        self.ended_with[tab] = line
        return line

    def stop_tab(self, tab: str) -> str | None:
        """`tab`'s Stop button: stops that tab's own jobs (JOB_KINDS), never another tab's. Returns
        `tab` when it stopped one (or the tab's run has ended and its handler has not shown its last
        line yet), else the name of a job of another tab that goes on (the reply says where its
        Stop is), else None."""
        tab_going = tab in self.ended_with and self.ended_with[tab] is None
        self.stopped_going.discard(tab)
        jobs = self.jobs_going()
        own = [job for job in jobs if tab_of_job(job.name) == tab]
        for job in own:
            job.stop()
        if tab_going:
            self.stopped_going.add(tab)
        if own or tab_going:
            return tab
        return next((job.name for job in jobs), None)

    def take_back(self, event_ids) -> None:
        """A Stop found these events of its tab waiting in Gradio's queue (or just out of it): each
        one's handler ends at once when it starts (was_taken_back). An id is never used twice, so
        one whose handler had already looked is harmless; the oldest are forgotten past 64."""
        with self.lock:
            for event_id in event_ids:
                self.taken_back[event_id] = True
            while len(self.taken_back) > 64:
                self.taken_back.popitem(last=False)

    def was_taken_back(self, event_ids) -> bool:
        """Whether one of these events (a handler's own, just started) was taken back; forgets it."""
        with self.lock:
            hits = [event_id for event_id in event_ids if event_id in self.taken_back]
            for event_id in hits:
                del self.taken_back[event_id]
            return bool(hits)

    def line_after_stop(self, tab: str) -> str | None:
        """After Stop's reply is shown: the line `tab`'s run ended with, if that Stop stopped it and
        it has ended (else None: its last line is still to come, and will land after the reply)."""
        if tab not in self.stopped_going or self.ended_with.get(tab) is None:
            return None
        self.stopped_going.discard(tab)
        return self.ended_with[tab]

    def publish(self, kind: str, tree: Tree) -> None:
        with self.lock:
            self.live = (self.live[0] + 1, kind, tree)

    def tree_source(self, kind: str):
        """A zero-arg callable for Decoder(plan=...): the newest tree published for `kind`
        after this moment, else None (keep the current tree)."""
        start = self.live[0]

        def next_tree():
            version, k, tree = self.live
            return tree if version > start and k == kind else None
        return next_tree


class Sessions:
    def __init__(self):
        self._items: OrderedDict[str, Session] = OrderedDict()
        self._lock = threading.Lock()
        self.blocks = None  # the gr.Blocks serving these sessions (set once the page is built)

    def get(self, request: gr.Request | None) -> Session:
        key = getattr(request, "session_hash", None) or "default"
        if self.blocks is not None:
            drop_orphaned_copies(self.blocks, key)
        with self._lock:
            sess = self._items.get(key)
            if sess is None:
                sess = self._items[key] = Session()
                while len(self._items) > MAX_SESSIONS:
                    _, old = self._items.popitem(last=False)
                    old.stop_all()
            self._items.move_to_end(key)
            return sess

    def known(self, request: gr.Request | None) -> bool:
        """Whether this page has a session (get() would make one): events the page did not ask
        for, arriving after it closed, must not bring its session back."""
        with self._lock:
            return (getattr(request, "session_hash", None) or "default") in self._items

    def drop(self, request: gr.Request | None) -> None:
        key = getattr(request, "session_hash", None) or "default"
        with self._lock:
            sess = self._items.pop(key, None)
        if sess is not None:
            sess.stop_all()


@dataclass
class AppContext:
    worker: Worker
    sessions: Sessions
    prompts: list[dict]
    max_budget: int = 128
    max_depth: int = 16
    default_budget: int = 32
    default_depth: int = 8
    # per tab, the ids of its events that wait for the model slot and its Stop may take back
    # (app/live.py wire_stop; app/waiting.py)
    run_events: dict = field(default_factory=dict)

    def for_device(self, device: str | None) -> "AppContext":
        """Slider defaults that suit the device: on a CPU a tree forward costs more with every
        row past a few, so the Race's baselines (chain of d levels, SpecInfer k x d) and the DP lane
        start at n = 8, d = 4; GPUs keep n = 32, d = 8. (Hardware-aware Sequoia treats them as bounds.)"""
        from engine.models import resolve_device
        try:
            cpu = resolve_device(device).type == "cpu"
        except Exception:  # noqa: BLE001 - a bad device is reported when the pair loads
            cpu = False
        if cpu:
            self.default_budget, self.default_depth = 8, 4
        return self


def load_prompts() -> list[dict]:
    try:
        items = json.loads((ASSETS / "prompts.json").read_text(encoding="utf-8"))
        return [p for p in items if isinstance(p, dict) and p.get("prompt")]
    except (OSError, ValueError):
        return [{"title": "Hello", "kind": "text", "prompt": "Write a short poem about trees."}]


# ---------------------------------------------------------------- parsing what the page sends
def _number(value, name: str, kind: str) -> float:
    """`value` as a finite float; `kind` ("a number", "a whole number") names what the field wants."""
    if value is None or value == "":
        raise UserError(f"{name} is empty")
    try:
        f = float(value)
    except (TypeError, ValueError, OverflowError):
        raise UserError(f"{name} must be {kind} (got {repr(value)[:40]})") from None
    if not math.isfinite(f):
        raise UserError(f"{name} must be a finite number (got {value})")
    return f


def _int(value, name: str) -> int:
    f = _number(value, name, "a whole number")
    if f != int(f):
        raise UserError(f"{name} must be a whole number (got {value})")
    return int(f)


def _float(value, name: str) -> float:
    return _number(value, name, "a number")


def settings_from(temperature, top_p, max_new_tokens=64, seed=0, top_k=0) -> Settings:
    return Settings(temperature=_float(temperature, "temperature"), top_p=_float(top_p, "top-p"),
                    max_new_tokens=_int(max_new_tokens, "max new tokens"), seed=_int(seed, "seed"),
                    top_k=0 if top_k is None else _int(top_k, "top-k"))


def spec_from(method: str, budget, depth, hardware_aware: bool = False, session: Session | None = None) -> MethodSpec:
    method = (method or "").strip()
    if method not in METHOD_LABELS and method != "sequoia-auto":
        raise UserError(f"unknown method {method!r} (use one of {', '.join(METHOD_LABELS)})")
    budget, depth = _int(budget, "budget"), _int(depth, "depth")
    if method == "tree":
        if session is None or session.imported is None:
            raise UserError("no imported tree: import a tree JSON or growmap in the Planner tab first")
        spec = MethodSpec("tree", tree=session.imported)
    elif method == "sequoia" and hardware_aware:
        spec = MethodSpec("sequoia-auto", budget, depth)
    else:
        spec = MethodSpec(method, budget, depth)
    spec.check()
    return spec


def read_tree_file(path: str) -> Tree:
    # every format the Planner exports reads back (its own vLLM and Medusa exports were refused)
    return export.read_tree_file(path, "the uploaded file")
