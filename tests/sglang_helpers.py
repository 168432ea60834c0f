"""Small drivers shared by the SGLang scheduler tests (not a test module)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from schedulers.contract import Request, StepPlan, StepResult
from schedulers.sglang import SglangScheduler, SglangSchedulerConfig


def fake_token(request_id: str, seq_len: int) -> int:
    """The conformance format's token (request ids are r<int>)."""
    return 3 + (int(request_id[1:]) * 7919 + seq_len * 104729) % 31000


def req(i: int, prompt: list[int], max_tokens: int, *, priority: int = 0,
        ignore_eos: bool = False, eos_token_id: int | None = None) -> Request:
    return Request(request_id=f"r{i}", prompt_token_ids=list(prompt), max_tokens=max_tokens,
                   priority=priority, ignore_eos=ignore_eos, eos_token_id=eos_token_id)


def sched(max_total_tokens: int, **fields: Any) -> SglangScheduler:
    return SglangScheduler(SglangSchedulerConfig(max_total_tokens=max_total_tokens, **fields))


@dataclass
class Run:
    plans: list[StepPlan] = field(default_factory=list)
    finished: dict[str, str] = field(default_factory=dict)
    aborted: dict[str, str] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)
    requests: dict[str, Request] = field(default_factory=dict)


def step(s: SglangScheduler, run: Run, token: Any = fake_token) -> StepPlan:
    """One schedule + fake forward + commit; `token(rid, seq_len)` picks the sampled token."""
    plan = s.schedule()
    for c in plan.chunks:  # the rows are the scheduler's, valid until the next schedule()
        c.page_ids = list(c.page_ids)
    sampled = {c.request_id: token(c.request_id, run.requests[c.request_id].num_tokens)
               for c in plan.chunks if c.sample}
    events = s.update_from_output(plan, StepResult(sampled, duration_s=0.0))
    run.plans.append(plan)
    for rid, why in plan.aborted:
        run.aborted[rid] = why
    for rid, why in events.finished:
        run.finished[rid] = why
    return plan


def drive(s: SglangScheduler, arrivals: list[tuple[int, Request]], max_steps: int = 20000,
          token: Any = fake_token) -> Run:
    """Add each request at its step, then step until nothing is left (or max_steps)."""
    run = Run()
    pending = sorted(arrivals, key=lambda a: a[0])
    k = 0
    n = 0
    while (k < len(pending) or s.has_unfinished()) and n < max_steps:
        while k < len(pending) and pending[k][0] <= n:
            r = pending[k][1]
            k += 1
            why = s.add_request(r)
            if why is None:
                run.requests[r.request_id] = r
            else:
                run.rejected[r.request_id] = why
        step(s, run, token)
        n += 1
    return run
