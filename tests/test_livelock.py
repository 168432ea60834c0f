"""No-progress detection (issue 15, item 6): a scheduler that keeps evicting and recomputing
the same positions stops with an error naming the requests instead of running forever."""

from __future__ import annotations

import pytest
from fcfs_double import FcfsScheduler
from test_engine import req, sim

from engines.engine import Engine, StepLimitError
from engines.livelock import NoProgressError, ProgressWatch
from schedulers.contract import ScheduledChunk, StepPlan


class Thrasher(FcfsScheduler):
    """Evicts every running request at each step after admitting it: its prompt is never
    computed beyond the first chunk (a livelock, unlike an empty-plan deadlock)."""

    name = "thrasher"

    def schedule(self) -> StepPlan:
        if self.running:
            plan = StepPlan(step=self.step, page_size=self.page_size)
            self.step += 1
            for st in reversed(self.running):
                self._release(st)
                self.waiting.appendleft(st)
                plan.preempted.append(st.req.request_id)
            self.running.clear()
            return plan
        return super().schedule()


def test_a_livelocked_run_stops_naming_the_requests() -> None:
    # budget 8 < prompts of 40: each admission computes positions 0..8 again, then is evicted
    engine = Engine(Thrasher(256, max_num_batched_tokens=8), sim(),
                    [req(0, 40, 4), req(1, 40, 4)], max_steps=100_000)
    with pytest.raises(NoProgressError) as e:
        engine.run()
    assert e.value.stuck_ids == ["r0"]  # r1 never got in: r0 takes the whole budget
    msg = str(e.value)
    assert "thrasher" in msg and "no progress for" in msg and "r0" in msg and "r1" in msg
    assert engine.recorder.num_steps < 2 * (1000 + 4 * 8) + 10


def test_recomputing_is_not_progress_but_a_new_position_is() -> None:
    w = ProgressWatch(min_steps=3, factor=1)

    def step(*chunks: tuple[str, int, int], preempted: tuple[str, ...] = ()) -> None:
        plan = StepPlan(step=0, page_size=4, preempted=list(preempted), chunks=[
            ScheduledChunk(rid, [1] * n, start, [], sample=False) for rid, start, n in chunks])
        w.observe(plan, [])

    step(("a", 0, 4))
    assert w.stalled_steps == 0 and w.limit == 3 + 4
    for _ in range(7):
        step(("a", 0, 4), preempted=("a",))  # evicted and recomputed: no progress
    assert w.stalled_steps == 7
    step(("a", 4, 1))  # a new position
    assert w.stalled_steps == 0 and w.limit == 3 + 5
    for _ in range(8):
        step(("a", 0, 5), preempted=("a",))
    with pytest.raises(NoProgressError, match=r"no progress for 9 steps.*evicted: a"):
        step(("a", 0, 5), preempted=("a",))
    w.forget("a")
    assert w.limit == 3
    w.observe(StepPlan(step=0, page_size=4), ["a"])  # a request ended: progress
    assert w.stalled_steps == 0


def test_a_slow_run_with_many_evictions_is_not_flagged() -> None:
    # A tight pool: FCFS evicts and recomputes often, and every request still ends.
    reqs = [req(i, 30 + i, 20) for i in range(12)]
    res = Engine(FcfsScheduler(64, max_num_batched_tokens=16), sim(), reqs).run()
    assert res.requests.num_rows == 12
    assert sum(res.steps.column("num_preempted").to_pylist()) > 0


def test_the_step_limit_still_applies() -> None:
    with pytest.raises(StepLimitError):
        Engine(Thrasher(256, max_num_batched_tokens=8), sim(), [req(0, 40, 4)],
               max_steps=50).run()
