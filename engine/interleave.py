"""Several generations on one worker, interleaved step by step (the bench's lanes, the Race).

On a shared machine the speed drifts over seconds to minutes (here plain decoding took 83-137 ms
per token within one benchmark when methods ran one after another), so a method timed in a slow
minute looked worse than one timed in a fast minute. run_together always advances the lane
furthest behind (the smallest share of its max-new-tokens), so every lane spreads its steps over
the same minutes and the drift reaches all alike. Lanes never run at the same instant: one step at
a time, on one thread. A lane's clock runs only while it steps.

Ties are broken in turn, not in list order: two lanes that gain the same tokens per step (a Race's
chain lane and a hardware-aware plan that chose the same chain) tie before every step, and in list
order the second always stepped right after the first, so whatever the first one's event set off
(the Race page re-drawing on the same cores) always landed on the second."""
from __future__ import annotations

import time
from typing import Any, Iterator


class Lane:
    """One generation (an iterator of StepEvents, e.g. engine.decoding.generate) with its own clock."""

    def __init__(self, name: str, steps: Iterator[Any], max_new_tokens: int):
        self.name, self.max_new_tokens = name, max_new_tokens
        self._steps = steps
        self.events: list = []
        self.wall = self.cpu = 0.0  # seconds spent inside this lane's steps (prefill included)
        self.finished = False

    @property
    def share_done(self) -> float:
        return self.events[-1].total_tokens / max(self.max_new_tokens, 1) if self.events else 0.0

    def advance(self) -> Any | None:
        """One step: its event, or None when the generation has ended."""
        cpu0, wall0 = time.process_time(), time.perf_counter()
        try:
            event = next(self._steps)
        except StopIteration:
            event, self.finished = None, True
        self.wall += time.perf_counter() - wall0
        self.cpu += time.process_time() - cpu0
        if event is not None:
            self.events.append(event)
        return event


def run_together(lanes: list[Lane]) -> Iterator[tuple[Lane, Any]]:
    """(lane, event) for every step of every lane, the lane furthest behind stepping next; the
    k-th tie between lanes goes to the (k mod ties)-th of them in list order."""
    ties_broken = 0
    while True:
        running = [lane for lane in lanes if not lane.finished]
        if not running:
            return
        behind = min(lane.share_done for lane in running)
        tied = [lane for lane in running if lane.share_done == behind]
        lane = tied[ties_broken % len(tied)]
        ties_broken += len(tied) > 1
        event = lane.advance()
        if event is not None:
            yield lane, event
