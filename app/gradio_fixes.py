"""A work-around for a Gradio memory growth that a long-running page would otherwise hit.

Gradio 6 (checked on 6.31) answers every output a handler leaves out of a dict-yield with a
property update: it builds a fresh copy of that component and stores it in the session under the
original id. When a later yield gives the same output a value, Gradio looks the copy up and then
also stores it under the copy's own new id (blocks.py, `postprocess_data`). The page never uses
those ids, and they live as long as the session, so every run leaked a few components and their
configs (about 0.3 MB and 370 objects per Live run here; tests/robustness/test_app_memory.py).
Dropping them keeps each session at its original size."""
from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def drop_orphaned_copies(blocks, session_hash: str | None) -> int:
    """Forget this session's component copies stored under ids the page does not have; returns
    how many were dropped. Does nothing if Gradio's internals are not the ones this was written for."""
    try:
        state = blocks.state_holder.session_data.get(session_hash) if session_hash else None
        if state is None:
            return 0
        known = blocks.default_config.blocks
        orphans = [key for key in list(state.blocks_config.blocks) if key not in known]
        for key in orphans:
            state.blocks_config.blocks.pop(key, None)
            state.config_values.pop(key, None)
        return len(orphans)
    except (AttributeError, TypeError) as exc:  # another Gradio version: leave its state alone
        log.debug("session clean-up skipped: %r", exc)
        return 0
