"""First-come-first-served with whole-output reservation: the simplest scheduler that can
never run out of KV once a request is admitted, and so never evicts.

A request is admitted, in arrival order, only when the free pages cover its prompt plus its
whole `max_tokens`; those pages stay reserved until it finishes (early, at EOS, or at the cap).
Prefills are chunked under a per-step token budget; running requests are served before
admission, in admission order. It is the static-reservation baseline that paged schedulers
such as vLLM's and SGLang's improve on: less KV wasted on outputs not yet written, bought with
preemptions or retractions under pressure.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from schedulers.config_range import MAX_PAGE_SIZE, MAX_RUNNING, MAX_TOKENS, ranged
from schedulers.contract import (
    Request,
    ScheduledChunk,
    SchedulerStats,
    StepEvents,
    StepPlan,
    StepResult,
)


def _check_positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"scheduler (fcfs_reserve): {name}={value!r}: must be an integer >= 1")


@dataclass(frozen=True, slots=True, kw_only=True)
class FcfsReserveConfig:
    """The scheduler's settings (docs/CONFIG.md lists each under `scheduler=fcfs_reserve`)."""

    kv_capacity_tokens: int  # the KV pool in token slots (set from the run's kv_capacity_tokens)
    page_size: int = ranged(16, low=1, high=MAX_PAGE_SIZE)  # token slots per KV page
    max_num_seqs: int = ranged(  # the most requests running at once
        256, low=1, high=MAX_RUNNING)
    max_num_batched_tokens: int = ranged(  # tokens computed per step, prefill and decode together
        2048, low=1, high=MAX_TOKENS)
    max_model_len: int | None = ranged(  # the longest prompt + output (None: the pool's size)
        None, low=1, high=MAX_TOKENS)

    def __post_init__(self) -> None:
        for name in ("kv_capacity_tokens", "page_size", "max_num_seqs", "max_num_batched_tokens"):
            _check_positive(name, getattr(self, name))
        if self.max_model_len is not None:
            _check_positive("max_model_len", self.max_model_len)
        if self.kv_capacity_tokens < self.page_size:
            raise ValueError(f"scheduler (fcfs_reserve): kv_capacity_tokens="
                             f"{self.kv_capacity_tokens}: less than one page of "
                             f"{self.page_size} slots")

    @classmethod
    def from_capacity(cls, kv_capacity_tokens: int, **fields: object) -> FcfsReserveConfig:
        """A config whose pool holds `kv_capacity_tokens` slots."""
        return cls(kv_capacity_tokens=kv_capacity_tokens, **fields)  # type: ignore[arg-type]


@dataclass(slots=True)
class _Held:
    """A request with its reserved pages and the positions computed so far."""

    req: Request
    pages: list[int]
    computed: int = 0


class FcfsReserveScheduler:
    """Implements `schedulers.contract.Scheduler` (and `SelfCheckingScheduler`)."""

    name = "fcfs_reserve"

    def __init__(self, config: FcfsReserveConfig) -> None:
        self.config = config
        self.page_size = config.page_size
        self.num_pages = config.kv_capacity_tokens // config.page_size
        self.max_model_len = config.max_model_len or self.num_pages * config.page_size
        self.free_pages: deque[int] = deque(range(self.num_pages))
        self.waiting: deque[Request] = deque()
        self.running: list[_Held] = []
        self.held: dict[str, _Held] = {}
        self.step = 0

    def _pages_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.page_size)

    def _reservation(self, req: Request) -> int:
        """Pages for the prompt and every output token but the last (whose KV is never
        computed: it is sampled, not fed back)."""
        return self._pages_for(req.num_prompt_tokens + req.max_tokens - 1)

    # ---------------------------------------------------------------- requests
    def add_request(self, request: Request) -> str | None:
        """Queue `request`, or say why it can never be served."""
        total = request.num_prompt_tokens + request.max_tokens
        if total > self.max_model_len:
            return f"prompt + max_tokens = {total} exceeds max_model_len {self.max_model_len}"
        if self._reservation(request) > self.num_pages:
            return (f"prompt + max_tokens = {total} needs more pages than the pool holds "
                    f"({self.num_pages} of {self.page_size})")
        self.waiting.append(request)
        return None

    def abort(self, request_id: str, reason: str) -> None:
        """Drop a request wherever it is, releasing its pages."""
        held = self.held.pop(request_id, None)
        if held is not None:
            self.running.remove(held)
            self.free_pages.extend(held.pages)
            return
        for req in self.waiting:
            if req.request_id == request_id:
                self.waiting.remove(req)
                return

    def has_unfinished(self) -> bool:
        return bool(self.running or self.waiting)

    # ---------------------------------------------------------------- schedule
    def _chunk(self, held: _Held, budget: int, admitted: bool) -> ScheduledChunk:
        req = held.req
        tokens = req.prompt_token_ids + req.output_token_ids
        start = held.computed
        n = min(len(tokens) - start, budget)
        return ScheduledChunk(req.request_id, tokens[start:start + n], start, held.pages,
                              sample=start + n == len(tokens), admitted=admitted)

    def schedule(self) -> StepPlan:
        """Running requests first (each its owed prefill chunk or one decode token), then
        admission in arrival order while the budget, `max_num_seqs` and the free pages allow.
        Admission stops at the first request whose reservation does not fit (no overtaking)."""
        self.step += 1
        plan = StepPlan(step=self.step, page_size=self.page_size)
        budget = self.config.max_num_batched_tokens
        for held in self.running:
            if budget == 0:
                break
            chunk = self._chunk(held, budget, admitted=False)
            plan.chunks.append(chunk)
            budget -= chunk.num_tokens
        while self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
            req = self.waiting[0]
            need = self._reservation(req)
            if need > len(self.free_pages):
                break
            self.waiting.popleft()
            held = _Held(req, [self.free_pages.popleft() for _ in range(need)])
            self.running.append(held)
            self.held[req.request_id] = held
            chunk = self._chunk(held, budget, admitted=True)
            plan.chunks.append(chunk)
            budget -= chunk.num_tokens
        plan.forward_mode = "mixed" if plan.chunks else "idle"
        return plan

    # ---------------------------------------------------------------- commit
    def update_from_output(self, plan: StepPlan, result: StepResult) -> StepEvents:
        """Advance each chunk's request; append sampled tokens; finish at EOS or the cap."""
        events = StepEvents()
        for chunk in plan.chunks:
            held = self.held.get(chunk.request_id)
            if held is None:
                continue
            held.computed = chunk.start_pos + chunk.num_tokens
            if not chunk.sample:
                continue
            req = held.req
            token = result.sampled_token_ids[req.request_id]
            req.output_token_ids.append(token)
            events.new_token_ids[req.request_id] = [token]
            reason = None
            if not req.ignore_eos and req.eos_token_id is not None and token == req.eos_token_id:
                reason = "stop"
            elif len(req.output_token_ids) >= req.max_tokens:
                reason = "length"
            if reason is not None:
                events.finished.append((req.request_id, reason))
                self.abort(req.request_id, reason)
        return events

    # ---------------------------------------------------------------- checks and stats
    def check_invariants(self) -> None:
        """Every page is free or reserved by exactly one running request, which holds its
        whole reservation; waiting requests hold none."""
        held = [p for h in self.running for p in h.pages]
        if sorted(held + list(self.free_pages)) != list(range(self.num_pages)):
            raise AssertionError(f"fcfs_reserve: pages leak or are shared ({len(held)} held, "
                                 f"{len(self.free_pages)} free of {self.num_pages})")
        for h in self.running:
            if len(h.pages) != self._reservation(h.req):
                raise AssertionError(f"fcfs_reserve: {h.req.request_id} holds "
                                     f"{len(h.pages)} pages, reserved {self._reservation(h.req)}")
        if set(self.held) != {h.req.request_id for h in self.running}:
            raise AssertionError("fcfs_reserve: the running list and the held map differ")

    def stats(self) -> SchedulerStats:
        """Reserved pages count as used: no other request can have them."""
        used = (self.num_pages - len(self.free_pages)) * self.page_size
        return SchedulerStats(num_running=len(self.running), num_waiting=len(self.waiting),
                              kv_capacity_tokens=self.num_pages * self.page_size,
                              kv_used_tokens=used, kv_cached_tokens=0)
