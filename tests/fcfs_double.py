"""A small first-come-first-served scheduler that honours the contract, for engine tests.

Paged KV (a free list of pages), chunked prefill under a token budget, recompute preemption
of the most recently admitted running request when a page cannot be found, no prefix cache.
It is a test double, not a model of any upstream scheduler.

It joins the harness the way any scheduler does, through the registry alone (`ENTRY`,
registered by tests/conftest.py as a test-only scheduler): `FcfsConfig.from_capacity` builds
its config, `check_invariants()` (`schedulers.contract.SelfCheckingScheduler`) checks its
pages, and tests/test_scheduler_contract.py runs it through the same contract as vllm and
sglang, including a whole `experiments.run` job with no YAML file of its own.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field

from schedulers.contract import (
    Request,
    ScheduledChunk,
    SchedulerStats,
    StepEvents,
    StepPlan,
    StepResult,
)
from schedulers.eviction import EvictionOptions
from schedulers.registry import SchedulerEntry
from schedulers.victim_policy import VictimFacts, rank_victims


@dataclass(frozen=True, slots=True, kw_only=True)
class FcfsConfig(EvictionOptions):
    """The double's settings; `kv_capacity_tokens` is the pool (a multiple of `page_size`).
    It evicts, so it carries the shared eviction options (recompute only: it does not swap)."""

    kv_capacity_tokens: int
    page_size: int = 4
    max_num_seqs: int = 8
    max_num_batched_tokens: int = 64
    reject_oversized: bool = True

    def __post_init__(self) -> None:
        self.check_eviction_options("fcfs_double scheduler", self.page_size)

    @classmethod
    def from_capacity(cls, kv_capacity_tokens: int, **fields: object) -> FcfsConfig:
        """A config whose pool holds `kv_capacity_tokens` slots."""
        return cls(kv_capacity_tokens=kv_capacity_tokens, **fields)  # type: ignore[arg-type]


@dataclass
class _State:
    req: Request
    computed: int = 0
    pages: list[int] = field(default_factory=list)


class FcfsScheduler:
    """FCFS with chunked prefill and recompute preemption."""

    name = "fcfs_double"

    def __init__(self, kv_capacity_tokens: int, page_size: int = 4, max_num_seqs: int = 8,
                 max_num_batched_tokens: int = 64, reject_oversized: bool = True,
                 victim_policy: str = "default", random_seed: int = 0) -> None:
        if kv_capacity_tokens % page_size:
            raise ValueError(f"fcfs_double: kv_capacity_tokens={kv_capacity_tokens} is not a "
                             f"multiple of page_size={page_size}")
        self.page_size = page_size
        self.capacity = kv_capacity_tokens
        self.max_num_seqs = max_num_seqs
        self.budget = max_num_batched_tokens
        self.reject_oversized = reject_oversized
        self.free_pages: deque[int] = deque(range(kv_capacity_tokens // page_size))
        self.waiting: deque[_State] = deque()
        self.running: list[_State] = []
        self.states: dict[str, _State] = {}
        self.step = 0
        self.victim_policy = victim_policy
        self.victim_rng = random.Random(random_seed)

    @classmethod
    def from_config(cls, config: FcfsConfig) -> FcfsScheduler:
        """The scheduler `config` describes (the registry's `build`)."""
        return cls(config.kv_capacity_tokens, page_size=config.page_size,
                   max_num_seqs=config.max_num_seqs,
                   max_num_batched_tokens=config.max_num_batched_tokens,
                   reject_oversized=config.reject_oversized,
                   victim_policy=config.victim_policy, random_seed=config.random_seed)

    def check_invariants(self) -> None:
        """Every page is free or held by exactly one running request, which holds the pages
        its computed tokens need; waiting requests hold none."""
        held = [p for st in self.running for p in st.pages]
        pages = held + list(self.free_pages)
        if sorted(pages) != list(range(self.capacity // self.page_size)):
            raise AssertionError(f"fcfs_double: pages leak or are shared ({len(held)} held, "
                                 f"{len(self.free_pages)} free)")
        for st in self.running:
            if len(st.pages) < self._pages_for(st.computed):
                raise AssertionError(f"fcfs_double: {st.req.request_id} computed "
                                     f"{st.computed} tokens on {len(st.pages)} pages")
        if any(st.pages for st in self.waiting):
            raise AssertionError("fcfs_double: a waiting request holds pages")

    # -- helpers ----------------------------------------------------------------------
    def _pages_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.page_size)

    def _grow(self, st: _State, upto: int) -> bool:
        need = self._pages_for(upto) - len(st.pages)
        if need > len(self.free_pages):
            return False
        st.pages.extend(self.free_pages.popleft() for _ in range(need))
        return True

    def _release(self, st: _State) -> None:
        self.free_pages.extend(st.pages)
        st.pages = []
        st.computed = 0

    def _victim(self, first: int) -> _State:
        """Take the victim out of `running`: the latest admitted, or, under another
        victim_policy, its first choice among `running[first:]` (the requests this step has
        not scheduled yet, so that no chunk of the plan loses its pages)."""
        if self.victim_policy == "default":
            return self.running.pop()
        facts = [VictimFacts(request_id=s.req.request_id, arrival_time=s.req.arrival_time,
                             num_output_tokens=len(s.req.output_token_ids),
                             num_prompt_tokens=s.req.num_prompt_tokens,
                             computed_tokens=s.computed,
                             kv_slots=len(s.pages) * self.page_size,
                             remaining_tokens=s.req.max_tokens - len(s.req.output_token_ids))
                 for s in self.running[first:]]
        pick = rank_victims(facts, self.victim_policy, self.victim_rng)[0]
        return self.running.pop(first + pick)

    def _chunk(self, st: _State, n: int, admitted: bool) -> ScheduledChunk:
        r = st.req
        all_ids = r.prompt_token_ids + r.output_token_ids
        start = st.computed
        return ScheduledChunk(r.request_id, all_ids[start:start + n], start, list(st.pages),
                              sample=start + n == r.num_tokens, admitted=admitted)

    # -- contract ---------------------------------------------------------------------
    def add_request(self, request: Request) -> str | None:
        total = request.num_prompt_tokens + request.max_tokens
        if self.reject_oversized and total > self.capacity:
            return f"prompt + max_tokens = {total} exceeds the KV capacity {self.capacity}"
        st = _State(request)
        self.states[request.request_id] = st
        self.waiting.append(st)
        return None

    def schedule(self) -> StepPlan:
        plan = StepPlan(step=self.step, page_size=self.page_size)
        self.step += 1
        budget = self.budget
        i = 0
        while i < len(self.running) and budget > 0:
            st = self.running[i]
            n = min(st.req.num_tokens - st.computed, budget)
            while not self._grow(st, st.computed + n):
                victim = self._victim(i)
                self._release(victim)
                self.waiting.appendleft(victim)
                plan.preempted.append(victim.req.request_id)
                if victim is st:
                    break
            else:
                plan.chunks.append(self._chunk(st, n, admitted=False))
                budget -= n
                i += 1
                continue
            break
        if not plan.preempted:
            while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
                st = self.waiting[0]
                if st.req.num_tokens + 1 > self.capacity:
                    break  # can never fit: blocks the queue (reject_oversized=False)
                n = min(st.req.num_tokens, budget)
                if not self._grow(st, n):
                    break
                self.waiting.popleft()
                self.running.append(st)
                plan.chunks.append(self._chunk(st, n, admitted=True))
                budget -= n
        return plan

    def update_from_output(self, plan: StepPlan, result: StepResult) -> StepEvents:
        events = StepEvents()
        for c in plan.chunks:
            st = self.states[c.request_id]
            st.computed = c.start_pos + len(c.token_ids)
            if not c.sample:
                continue
            r = st.req
            tok = result.sampled_token_ids[c.request_id]
            r.output_token_ids.append(tok)
            events.new_token_ids[r.request_id] = [tok]
            reason = None
            if not r.ignore_eos and r.eos_token_id is not None and tok == r.eos_token_id:
                reason = "stop"
            elif len(r.output_token_ids) >= r.max_tokens:
                reason = "length"
            if reason is not None:
                events.finished.append((r.request_id, reason))
                self.running.remove(st)
                self._release(st)
                del self.states[r.request_id]
        return events

    def abort(self, request_id: str, reason: str) -> None:
        st = self.states.pop(request_id, None)
        if st is None:
            return
        if st in self.running:
            self.running.remove(st)
        elif st in self.waiting:
            self.waiting.remove(st)
        self._release(st)

    def has_unfinished(self) -> bool:
        return bool(self.running or self.waiting)

    def stats(self) -> SchedulerStats:
        used = (self.capacity // self.page_size - len(self.free_pages)) * self.page_size
        return SchedulerStats(num_running=len(self.running), num_waiting=len(self.waiting),
                              kv_capacity_tokens=self.capacity, kv_used_tokens=used,
                              kv_cached_tokens=0)


def make_scheduler(kv_capacity_tokens: int, **fields: object) -> FcfsScheduler:
    """Factory for `scheduler.target` in Hydra configs (see experiments/run/build.py)."""
    return FcfsScheduler(kv_capacity_tokens, **fields)  # type: ignore[arg-type]


# The double's registry entry: all it takes to join the harness (tests/conftest.py registers it).
ENTRY = SchedulerEntry(name="fcfs_double", config_cls=FcfsConfig, build=FcfsScheduler.from_config,
                       capacity_field="kv_capacity_tokens", evicts=True, page_field="page_size",
                       self_check=True, test_only=True)
