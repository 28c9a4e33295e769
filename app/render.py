"""HTML/Markdown pieces of the page (text coloured by step, metric cards, header lines).
Pure functions of engine data; the CSS lives in assets/style.css."""
from __future__ import annotations

import html
import os
import re
from pathlib import Path

from app.plots import PLANNED, STATUS_COLORS
from engine import prompt_memory
from engine.learning import PRIOR_WEIGHT, STORED_CAP
from engine.wording import hides_words, plural, tree_shape

STEP_CLASSES = 2  # alternating step shades


def esc(text: str) -> str:
    return html.escape(text, quote=True)


def human_count(n: int | None) -> str:
    if not n:
        return "?"
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)


def human_bytes(n: float | None) -> str:
    if n is None:
        return "—"
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


APP_ROOT = str(Path(__file__).resolve().parents[1])   # resolved, as the engine names its assets


def _home() -> str | None:
    """The home folder to show as ~; None where it is the root (every path would match)."""
    return os.path.expanduser("~").rstrip(os.sep) or None


def short_path(path: str | None) -> str:
    """A file as a reader finds it: relative to the app's folder (the shipped assets), else with
    ~ for the home folder (the user's cache)."""
    if not path:
        return "—"
    return short_paths_in(path)


def short_paths_in(text: str) -> str:
    """`text` with every path it names that starts in the app's folder made relative to it, and
    one that starts in the home folder written with ~ (an engine note; the CLI prints them whole)."""
    text = re.sub(r"(?<![\w./~-])" + re.escape(APP_ROOT + os.sep), "", text)
    home = _home()
    if home is not None:
        text = re.sub(r"(?<![\w./~-])" + re.escape(home + os.sep), lambda _: "~" + os.sep, text)
    return text


# ---------------------------------------------------------------- generated text
def bonus_part(ev) -> str:
    """The text of this step's bonus token when it is really part of the step's new text."""
    bonus = next((n for n in ev.nodes if n.status == "bonus"), None)
    if bonus is None or not ev.new_token_ids or ev.new_token_ids[-1] != bonus.token_id:
        return ""
    if len(ev.new_token_ids) != len(ev.accepted_path):  # accepted (path minus root) + the bonus
        return ""
    return bonus.text if bonus.text and ev.new_text.endswith(bonus.text) else ""


def eos_part(ev) -> str:
    """The text of the token that ended the answer (e.g. <|im_end|>), when it closes this step's
    new text: shown muted, apart from the answer (it read as part of the answer's last word)."""
    if not (ev.done and ev.finish_reason == "eos" and ev.answer is not None and ev.text.startswith(ev.answer)):
        return ""
    eos = ev.text[len(ev.answer):]
    return eos if eos and ev.new_text.endswith(eos) else ""


def step_span(ev, current: bool = False) -> str:
    if not ev.new_text:
        return ""
    tail, eos = bonus_part(ev), eos_part(ev)
    accepted = len(ev.accepted_path) - 1
    tip = (f"step {ev.step}: {plural(accepted, 'drafted token')} accepted"
           f"{' + 1 bonus token' if tail else ''} ({len(ev.new_token_ids)} new)")
    if eos:   # the answer's last token (the bonus token or an accepted one) ended it: shown apart
        head, tail = ev.new_text[: len(ev.new_text) - len(eos)], ""
    else:
        head = ev.new_text[: len(ev.new_text) - len(tail)] if tail else ev.new_text
    cls = f"sq-step sq-s{ev.step % STEP_CLASSES}" + (" sq-current" if current else "")
    inner = esc(head) + (f'<span class="sq-bonus">{esc(tail)}</span>' if tail else "")
    if eos:
        inner += (f'<span class="sq-eos" title="{esc(eos)}: the end-of-answer token; the model ended its '
                  f'answer here">{esc(eos)}</span>')
    return f'<span class="{cls}" title="{esc(tip)}" data-step="{ev.step}">{inner}</span>'


def text_html(events, current_step: int | None = None, placeholder: str = "") -> str:
    """All generated text, one shaded span per step; the bonus token of each step underlined."""
    spans, shown = [], ""
    for ev in events:
        if not ev.nodes:
            continue
        if shown + ev.new_text != ev.text:  # the tokenizer re-joined earlier text: show it plainly
            spans = [f'<span class="sq-step sq-s0">{esc(ev.text[:len(ev.text) - len(ev.new_text)])}</span>']
        spans.append(step_span(ev, current=ev.step == current_step))
        shown = ev.text
    body = "".join(spans) or f'<span class="sq-placeholder">{esc(placeholder)}</span>'
    legend = ('<div class="sq-text-legend"><span class="sq-step sq-s0">one shade</span> '
              '<span class="sq-step sq-s1">per step</span> · <span class="sq-bonus">bonus token</span> '
              'underlined (the target\'s own token after the accepted guesses) · hover a span for its step</div>')
    return f'<div class="sq-text-wrap">{legend}<div class="sq-text">{body}</div></div>'


# ---------------------------------------------------------------- metrics
def _card(value: str, caption: str, sub: str = "", color: str | None = None) -> str:
    style = f' style="color:{color}"' if color else ""
    return (f'<div class="sq-card"><div class="sq-big"{style}>{value}</div><div class="sq-cap">{esc(caption)}</div>'
            f'<div class="sq-sub">{sub}</div></div>')


def metrics_html(events, predicted: float | None = None, predicted_note: str = "", label: str = "") -> str:
    real = [e for e in events if e.nodes]
    if not events:
        return '<div class="sq-metrics sq-empty">Metrics appear here while a run goes.</div>'
    last = events[-1]
    last_step = real[-1] if real else None
    stepped = last.total_steps > 0   # a run stopped in its prefill has no rate to show ("0.0 tokens / s")
    cards = [
        _card(f"{last.tokens_per_second:.1f}" if stepped else "—", "tokens / s",
              f"prefill {last.prefill_seconds:.2f} s not counted"),
        _card(f"{last.tokens_per_step:.2f}" if stepped else "—", "tokens / step (mean)",
              f"last step: {len(last_step.new_token_ids)}" if last_step else "no step yet", STATUS_COLORS["accepted"]),
        _card("—" if predicted is None else f"{predicted:.2f}", "predicted tokens / step",
              esc(predicted_note) or "from the measured acceptance vector", PLANNED),
        _card(f"{last.total_steps}", "steps", plural(last.total_tokens, "token")
              + (f" · {esc(last.finish_reason.replace('_', ' '))}" if last.done else " · running")),
    ]
    draft = sum(e.draft_seconds for e in real)
    verify = sum(e.verify_seconds for e in real)
    other = sum(e.other_seconds for e in real)
    total = draft + verify + other
    bar = ""
    if total > 0:
        segs = [("draft", draft, "#0ea5e9"), ("verify", verify, "#475569"), ("other", other, "#cbd5e1")]
        bar = '<div class="sq-timebar">' + "".join(
            f'<div class="sq-seg" style="width:{100 * s / total:.2f}%;background:{c}" '
            f'title="{name}: {s:.3f} s ({100 * s / total:.0f} %)"></div>' for name, s, c in segs) + "</div>"
        bar += ('<div class="sq-timelegend">' + " · ".join(
            f'<span><span class="sq-dot" style="background:{c}"></span>{name} {s:.2f} s · {100 * s / total:.0f}%</span>'
            for name, s, c in segs) + "</div>")
    head = f'<div class="sq-runlabel">{esc(label)}</div>' if label else ""
    return f'<div class="sq-metrics">{head}<div class="sq-cards">{"".join(cards)}</div>{bar}</div>'


# ---------------------------------------------------------------- header and plan lines
def pair_line(info: dict | None, status: dict) -> str:
    if info is None:
        pair = ('<span class="sq-warn">no model pair loaded</span>' if not status.get("loading")
                else "loading the model pair…")
    else:
        pair = (f'draft <b>{esc(info["draft"])}</b> ({human_count(info.get("draft_parameters"))}) → '
                f'target <b>{esc(info["target"])}</b> ({human_count(info.get("target_parameters"))}) · '
                f'{esc(info["device"])} · {esc(info["dtype"])}')
    busy = status.get("state") == "busy"
    msg = status.get("message") or "idle"
    if busy and status.get("fraction") is not None:
        msg += f" ({100 * status['fraction']:.0f} %)"
    if status.get("queued"):
        msg += f" · {status['queued']} waiting"
    dot = "sq-busy" if busy else "sq-idle"
    err = ""
    if status.get("last_error") and not busy:
        err = (f' <span class="sq-warn" title="{esc(status["last_error"])}">· last error: '
               f'{esc(clipped(status["last_error"], 90))}</span>')
    return (f'<div class="sq-header"><div class="sq-title">Sequoia Live '
            f'<span class="sq-tagline">tree speculative decoding, step by step</span></div>'
            f'<div class="sq-pair">{pair}</div>'
            f'<div class="sq-status {dot}"><span class="sq-led"></span>{esc(msg)}{err}</div></div>')


def clipped(text: str, limit: int) -> str:
    """`text` cut to about `limit` characters at a word's end, with "…" where it was cut (the
    header's last error stopped mid-word: "… in the local Hugg")."""
    if len(text) <= limit:
        return text
    cut = text[:limit + 1].rsplit(" ", 1)[0] if " " in text[:limit + 1] else text[:limit]
    return cut.rstrip(" ,;:·") + "…"


def interval_words(vec) -> str:
    """What a vector's ±95 % bars are over (engine/intervals.py): its prompts, each one draw (an
    interpolated vector: the prompts of the vectors it mixes), only its positions (vectors
    measured before prompts were recorded), or the learner's posterior (pooled with learned evidence)."""
    kind = getattr(vec, "interval", "positions")
    if kind == "posterior":
        return (f"bars: the learner's 95 % interval (its prior counts as {PRIOR_WEIGHT:g} observations per rank, "
                "so they are wider than the measured vector's, which are about its prompts' mean rate)")
    if kind == "prompts":
        counted = [row for row in getattr(vec, "prompt_counts", None) or [] if row and row[0] > 0]
        return (f"bars: ±95 % interval over its {len(counted)} prompts" if counted
                else "bars: ±95 % interval over the prompts of the vectors it mixes")
    return "bars: ±95 % interval over positions (narrower than one over prompts would be)"


def measured_words(vec, caption: str, hidden=None) -> str:
    """What a Measure just made, said before the tab's caption: where the prompt's kind has a vector
    of its own the chart shows that one, and a measurement that showed nowhere read as lost.
    `hidden`: a shipped vector of more positions it now stands in for (profiler.shipped_hidden_by)."""
    what = (f"✓ Measured just now: {plural(vec.positions, 'position')} over {plural(vec.prompts, 'prompt')}, "
            f"{'its ' + vec.domain + ' prompts' if vec.domain else 'pooled over every kind of prompt'} "
            f"(`{short_path(vec.source)}`)")
    warn = "" if hidden is None else f"⚠ {hides_words(vec, hidden, f'`{short_path(vec.source)}`')}. "
    if short_path(vec.source) in caption:
        return what + ", shown below. " + warn
    return (what + ". The chart shows the vector this prompt's plan uses: code and prose prompts are planned "
            "from their own kind's vector where the two differ (engine/domains.py); the pooled one serves "
            "prompts of neither kind. " + warn)


def kept_profile_words(noisy, kept) -> str:
    """A Profile whose timing was noisy while the cached one was clean: said before the caption
    (engine/jobs.ProfileKept), or the press seemed to do nothing."""
    load = noisy.quality.get("load_average_before")   # (a noisy profile has its quality recorded)
    return (f"✗ Timed again, but the repeats disagreed by {noisy.quality.get('worst_spread', 0) * 100:.0f} %"
            + (f" (load average {load[0]:.2f} while it timed)" if load else "")
            + f", so the clean profile measured {kept.measured_at} stays. Profile again when the machine is quiet. ")


def keeps_own_sampling(run_keeps: str) -> str:
    """What a re-plan for other sampling settings does to a running job (only the tree reaches it)."""
    return (f"takes this tree from its next step but keeps its own sampling ({run_keeps}); the new sampling "
            "applies to the next run")


def plan_line(result, running: bool = False, own_run: bool = False, run_keeps: str = "") -> str:
    """The plan's one line (and its notes). `running`: a re-plan the running job takes from its
    next step; `own_run`: the plan the running job started from (it re-planned nothing);
    `run_keeps`: the running job's own sampling, where the plan is for other settings (only the
    tree reaches a running job)."""
    if result is None:
        return '<div class="sq-plan">No plan yet.</div>'
    t = result.tree
    parts = [f"<b>{esc(result.method.label)}</b>", tree_shape(t)]
    if result.expected_tokens is not None:
        parts.append(f"predicted <b>{result.expected_tokens:.2f}</b> tokens/step")
    if result.predicted_speedup is not None:
        parts.append(f"predicted speedup <b>{result.predicted_speedup:.2f}×</b> (device profile)")
    elif result.expected_tokens is None:   # the profile may be there: the vector is what is missing
        parts.append("speedup: no prediction without an acceptance vector for these settings")
    else:
        parts.append("speedup: profile the device (Planner tab) to predict it")
    note = ""
    drafts = getattr(getattr(result, "spec", None), "kind", None) != "ar"
    if not drafts:   # plain decoding reads no vector: its lines (and "plan backed by") said nothing of it
        note = '<div class="sq-note">autoregressive: one token per step, no acceptance vector needed</div>'
    elif result.acceptance is not None:
        # the measured vector itself; what learning added is said once, on the "backed by" line
        vec = result.measured_acceptance
        cls = "sq-warn" if not result.exact else "sq-note"
        # after "; ": which prompt domain's vector stands, and why (engine/domains.py)
        said = [part for part in short_paths_in(result.acceptance_note).split("; ")
                if not part.startswith("pooled with")]
        why = "; ".join(said[1:])
        note = (f'<div class="{cls}">acceptance: {esc("; ".join(said) if not result.exact else "")}'
                f'{"" if not result.exact else f"measured at T={vec.temperature:g}, top-p={vec.top_p:g} over {vec.positions} positions · {esc(short_path(vec.source))}"}'
                f'{f" · {esc(why)}" if why and result.exact else ""}</div>')
    elif result.acceptance_note:
        note = f'<div class="sq-note">{esc(short_paths_in(result.acceptance_note))}</div>'
    learned = getattr(result, "learned", None)
    if learned is not None and result.acceptance is not None and drafts:
        note += (f'<div class="sq-note">plan backed by {result.backing_positions} positions '
                 f'({backing_detail(result)})</div>')
    tail = (f' <span class="sq-note">(the running job {esc(keeps_own_sampling(run_keeps))})</span>'
            if running and run_keeps else
            ' <span class="sq-note">(the running job uses it from its next step)</span>' if running else
            ' <span class="sq-note">(the running job started from it)</span>' if own_run else "")
    return f'<div class="sq-plan">Plan: {" · ".join(parts)}{tail}{note}</div>'


def no_plan_line(message: str, running: bool = False) -> str:
    """The plan line where the page's values allow no plan (the last plan stayed up, "used by the
    next run", beside the error); `running`: a run on, which keeps its own tree."""
    tail = ' <span class="sq-note">(the running job keeps its tree)</span>' if running else ""
    return f'<div class="sq-plan">✗ <b>No plan for these values:</b> {esc(message)}{tail}</div>'


def backing_detail(result) -> str:
    """Which of a plan's backing positions were learned, and which remembered for this prompt."""
    learned = getattr(result, "learned", None) or {}
    cap = f" (the store is full at {STORED_CAP:,.0f}: older runs fade)" if learned.get("at_cap") else ""
    parts = ([f"{learned['positions']} learned over {plural(learned.get('runs', 0), 'run')}{cap}"]
             if learned.get("positions") else [])
    remembered = getattr(result, "remembered", None)
    if remembered:   # engine/prompt_memory.py: the tree was planned from these runs' posterior
        parts.append(prompt_memory.described(remembered["positions"], remembered["runs"],
                                             remembered.get("carried_from", "")))
    return ", ".join(parts) or "none learned yet"


def profile_quality(prof, seen: dict | None, timed_again: bool = False) -> str:
    """How far to trust the profile: the load it saw, whether its repeats agreed (timed_again: a
    noisy one will be timed again while idle, engine/reprofile.py), and what real CLI runs observed
    since (the planner blends those in: engine/observed.py)."""
    q = getattr(prof, "quality", None) or {}
    out = ""
    if q:
        load = q.get("load_average_before")
        again = "; timed again once the app is idle and the machine quiet" if timed_again else ""
        out += (f" · load {load[0]:.2f} when profiled" if load else "") + (
            f" · **noisy** (repeats spread {q.get('worst_spread', 0) * 100:.0f} %{again})" if q.get("noisy")
            else f" · repeats agree within {q.get('worst_spread', 0) * 100:.0f} %")
    if seen and seen.get("steps"):
        rows = ", ".join(f"t({r['n']}) {r['observed_seconds'] * 1e3:.0f} ms"
                         + (f" vs {r['profiled_seconds'] * 1e3:.0f} profiled" if r.get("profiled_seconds") else "")
                         for r in seen["target"][:6])
        scale = ", ".join(f"{k} ×{v:.2f}" for k, v in (seen.get("draft_scale") or {}).items())
        out += f" · **observed in {seen['steps']} CLI steps:** {rows}" + (f"; draft cost vs profile {scale}" if scale else "")
    return out
