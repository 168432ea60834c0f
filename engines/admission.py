"""Admission control at the front door: refuse an arrival with 503 when the queue is full.

A request is queued from the moment it is accepted until it has its first output token (its
prefill is done), or until it ends without one. An arrival that would bring the queued
requests above `max_num_queued_reqs`, or their prompt tokens above `max_num_queued_tokens`,
is refused at once with status 503, as SGLang answers under --max-queued-requests (mirrors
python/sglang/srt/managers/scheduler.py: Scheduler._abort_on_queued_limit, which counts only
its waiting queue) and as an overloaded vLLM API server does. A refusal is not a scheduler's
"can never be served" rejection: it says nothing about the request, only about the load.
"""

from __future__ import annotations

from dataclasses import dataclass

from schedulers.config_range import INT64_MAX, ranged
from schedulers.contract import Request, StepEvents, StepPlan

# The finish_reason of a request refused at the front door (engines/records.py).
OVERLOADED = "rejected_503"


@dataclass(frozen=True, slots=True)
class AdmissionLimits:
    """Front-door limits of a run; None is unlimited (the default, and upstream's)."""

    max_num_queued_reqs: int | None = ranged(None, low=1, high=INT64_MAX)
    max_num_queued_tokens: int | None = ranged(None, low=1, high=INT64_MAX)

    def __post_init__(self) -> None:
        for name in ("max_num_queued_reqs", "max_num_queued_tokens"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"admission: {name}={value!r}: must be a positive integer "
                                 "(or null: unlimited)")

    @property
    def active(self) -> bool:
        return self.max_num_queued_reqs is not None or self.max_num_queued_tokens is not None


class FrontDoor:
    """Counts queued requests and their prompt tokens; refuses arrivals over the limits."""

    def __init__(self, limits: AdmissionLimits) -> None:
        self.limits = limits
        self._queued: dict[str, int] = {}  # request id -> prompt tokens
        self.num_queued_tokens = 0

    @property
    def num_queued_reqs(self) -> int:
        return len(self._queued)

    def refusal(self, request: Request) -> str | None:
        """Why `request` gets a 503 now, or None when it may go on to the scheduler."""
        lim = self.limits
        if lim.max_num_queued_reqs is not None and \
                self.num_queued_reqs + 1 > lim.max_num_queued_reqs:
            return (f"503 Service Unavailable: {self.num_queued_reqs} requests queued; "
                    f"max_num_queued_reqs={lim.max_num_queued_reqs}")
        tokens = self.num_queued_tokens + request.num_prompt_tokens
        if lim.max_num_queued_tokens is not None and tokens > lim.max_num_queued_tokens:
            return (f"503 Service Unavailable: {self.num_queued_tokens} prompt tokens queued "
                    f"+ {request.num_prompt_tokens} > max_num_queued_tokens="
                    f"{lim.max_num_queued_tokens}")
        return None

    def enqueue(self, request: Request) -> None:
        """`request` was accepted by the scheduler: it is queued until its first token."""
        self._queued[request.request_id] = request.num_prompt_tokens
        self.num_queued_tokens += request.num_prompt_tokens

    def on_step(self, plan: StepPlan, events: StepEvents) -> None:
        """Requests that got a first token, or ended, this step leave the queue."""
        if not self._queued:
            return
        for rid in events.new_token_ids:
            self._leave(rid)
        for rid, _ in plan.aborted:
            self._leave(rid)
        for rid, _ in events.finished:
            self._leave(rid)

    def _leave(self, request_id: str) -> None:
        tokens = self._queued.pop(request_id, None)
        if tokens is not None:
            self.num_queued_tokens -= tokens
