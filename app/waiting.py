"""A page's runs that wait in Gradio's queue for the model slot, so that a tab's Stop can take
them back.

Generate, Start race, Measure, Profile and Check share one Gradio concurrency group ("model", one
at a time: app/live.py MODEL), so one pressed while another of the page's runs goes waits in
Gradio's queue, where no handler of ours runs yet and nothing of ours can stop it. A tab's Stop
looks there, and the handler of each event it took back ends at once, once Gradio starts it,
saying it was stopped before it started (Session.take_back, app/live.py taken_back). Gradio's
own /cancel would drop such an event from its queue, but it also cuts a run that goes, mid-stream,
without its last line, and it is the page, not a handler, that sends it.

Gradio has no public API for what its queue holds; this reads its internals (checked on 6.31)
and finds nothing on a Gradio whose internals differ (a Stop then stops only what goes)."""
from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def event_ids(runs: dict) -> dict:
    """{function id: name} for the events a tab wired, given as {name: what `.click(...)` returned}."""
    return {dep["id"]: name for name, dep in runs.items()}


def waiting(blocks, session_hash: str | None, fn_ids) -> dict[str, int]:
    """{event id: function id} for this page's events of these functions that wait in Gradio's
    queue (not started)."""
    return _of_page(lambda: [list(q.queue) for q in list(blocks._queue.event_queue_per_concurrency_id.values())],
                    session_hash, fn_ids)


def started(blocks, session_hash: str | None, fn_ids) -> dict[str, int]:
    """{event id: function id} for this page's events of these functions that Gradio has taken out
    of its queue and runs now (a handler finds its own event here: the model group runs one at a
    time)."""
    return _of_page(lambda: [events for events in list(blocks._queue.active_jobs) if events], session_hash, fn_ids)


def _of_page(event_lists, session_hash: str | None, fn_ids) -> dict[str, int]:
    """The events of this page and these functions among `event_lists()` (Gradio's lists of Events)."""
    try:
        return {event._id: event.fn._id for events in event_lists() for event in events
                if event.session_hash == session_hash and event.fn._id in fn_ids}
    except (AttributeError, TypeError) as exc:
        log.debug("Gradio's queue not read: %r", exc)
        return {}
