"""Configuration of the SGLang scheduler, with upstream parameter names.

Mirrors the fields of python/sglang/srt/arg_groups/fields/schedule.py (ServerArgs) that the
scheduling path of SGLang v0.5.22 reads, plus the environment constants of
python/sglang/srt/environ.py that size the new-token ratio and the retraction eviction.
"""

from __future__ import annotations

from dataclasses import dataclass

from schedulers.config_range import (
    INT64_MAX,
    MAX_PAGE_SIZE,
    MAX_RUNNING,
    MAX_TOKENS,
    ranged,
)
from schedulers.eviction import EvictionOptions, config_error

# mirrors python/sglang/srt/managers/schedule_policy.py: CacheAwarePolicy / CacheAgnosticPolicy
# (the five policies the oracle covers; hrrn, routing-key and shortest-prefill-first are not here)
POLICIES = ("fcfs", "lpm", "dfs-weight", "lof", "random")
RETRACTION_POLICIES = ("length", "priority")


@dataclass(frozen=True, slots=True)
class SglangSchedulerConfig(EvictionOptions):
    """What `Scheduler.__init__` of SGLang v0.5.22 reads, named as upstream names it.

    `max_total_tokens` is the token-slot pool (`--max-total-tokens`); with `page_size` > 1 the
    pool holds `max_total_tokens // page_size` pages. `max_running_requests` is the request-row
    pool and the running-batch cap; None resolves it as upstream does when the flag is unset
    (mirrors mem_cache/kv_cache_configurator.py: resolve_max_num_reqs). `chunked_prefill_size`
    None (or <= 0, as upstream's -1) disables chunked prefill. `context_length` is the model's
    (None: unbounded, only the pool limits a prompt).

    The eviction options (`preemption_mode`, `host_kv_capacity_tokens`, `victim_policy`,
    `random_seed`, upstream's `--random-seed`) are every scheduler's (schedulers/eviction.py);
    `victim_policy=default` keeps upstream's retraction order (`retraction_policy`), any other
    name replaces it.

    `disable_overlap_schedule` (upstream's `--disable-overlap-schedule`): False runs
    `Scheduler.event_loop_overlap` (the next batch planned while the previous one runs:
    schedulers/sglang/overlap.py, the engine's overlap loop), True `event_loop_normal`.
    Upstream's default is False (overlap), and so is a run's (conf/scheduler/sglang.yaml);
    this class's default stays True (synchronous), so that a config built directly (the
    conformance cases recorded before the key, the unit tests) runs the loop it names. With
    `preemption_mode=swap` (ours) the run resolves it to True and says so
    (schedulers/sglang/entry.py: `_loop_fallback`); built directly, the pair is refused.
    """

    max_total_tokens: int
    page_size: int = ranged(1, low=1, high=MAX_PAGE_SIZE)
    max_running_requests: int | None = ranged(None, low=1, high=MAX_RUNNING)
    schedule_policy: str = "fcfs"
    chunked_prefill_size: int | None = ranged(8192, low=1, high=MAX_TOKENS,
                                              special={-1: "off"})
    max_prefill_tokens: int = ranged(16384, low=1, high=MAX_TOKENS)
    prefill_max_requests: int | None = ranged(None, low=1, high=MAX_RUNNING)
    # scales the reserved decode tokens; beyond 100 no request is ever admitted
    schedule_conservativeness: float = ranged(1.0, low=0.0, low_open=True, high=100.0)
    enable_priority_scheduling: bool = False
    disable_priority_preemption: bool = False
    schedule_low_priority_values_first: bool = False
    # upstream's help: the minimum priority difference for a preemption
    priority_scheduling_preemption_threshold: int = ranged(10, low=0, high=INT64_MAX)
    retraction_policy: str = "length"
    disable_overlap_schedule: bool = True
    context_length: int | None = ranged(None, low=2, high=MAX_TOKENS)
    # environ.py constants (SGLANG_*), kept overridable for experiments
    # (meanings: conf/scheduler/sglang.yaml); init_new_token_ratio is a share of max_new_tokens
    # (upstream caps its product with schedule_conservativeness at 1)
    init_new_token_ratio: float = ranged(0.7, low=0.0, low_open=True, high=1.0)
    min_new_token_ratio_factor: float = ranged(0.14, low=0.0, high=1.0)
    new_token_ratio_decay_steps: int = ranged(600, low=1, high=INT64_MAX)
    retract_decode_steps: int = ranged(20, low=0, high=MAX_TOKENS)
    clip_max_new_tokens_estimation: int = ranged(4096, low=1, high=MAX_TOKENS)
    enable_waiting_prefix_refresh: bool = True  # SGLANG_ENABLE_WAITING_PREFIX_REFRESH
    # schedule_policy.py module constants (IN_BATCH_PREFIX_CACHING_*_THRESHOLD)
    in_batch_prefix_caching_check_threshold: int = ranged(32, low=0, high=MAX_TOKENS)
    in_batch_prefix_caching_deprioritize_threshold: int = ranged(32, low=0, high=MAX_TOKENS)

    def __post_init__(self) -> None:
        def bad(name: str, value: object, why: str) -> ValueError:
            return config_error("sglang scheduler", name, value, why)

        def need_int(name: str, value: object, low: int) -> None:
            if isinstance(value, bool) or not isinstance(value, int):
                raise bad(name, value, "must be an integer")
            if value < low:
                raise bad(name, value, f"must be at least {low}")

        need_int("page_size", self.page_size, 1)
        need_int("max_total_tokens", self.max_total_tokens, 1)
        if self.max_total_tokens < self.page_size:
            raise bad("max_total_tokens", self.max_total_tokens,
                      f"must hold at least one page (page_size={self.page_size})")
        if self.max_running_requests is not None:
            need_int("max_running_requests", self.max_running_requests, 1)
        if self.schedule_policy not in POLICIES:
            raise bad("schedule_policy", self.schedule_policy, f"valid: {', '.join(POLICIES)}")
        cps = self.chunked_prefill_size
        if cps is not None:
            if isinstance(cps, bool) or not isinstance(cps, int):
                raise bad("chunked_prefill_size", cps, "must be an integer, or None / -1 (off)")
            if 0 < cps < self.page_size:
                raise bad("chunked_prefill_size", cps,
                          f"must be at least page_size ({self.page_size}) when enabled")
        need_int("max_prefill_tokens", self.max_prefill_tokens, 1)
        if self.prefill_max_requests is not None:
            need_int("prefill_max_requests", self.prefill_max_requests, 1)
        if not isinstance(self.schedule_conservativeness, (int, float)) or not (
            self.schedule_conservativeness > 0
        ):
            raise bad("schedule_conservativeness", self.schedule_conservativeness,
                      "must be a positive number")
        need_int("priority_scheduling_preemption_threshold",
                 self.priority_scheduling_preemption_threshold, -(2**62))
        if self.retraction_policy not in RETRACTION_POLICIES:
            raise bad("retraction_policy", self.retraction_policy,
                      f"valid: {', '.join(RETRACTION_POLICIES)}")
        self.check_eviction_options("sglang scheduler", self.page_size)
        if self.victim_policy != "default" and self.retraction_policy != "length":
            raise bad("victim_policy", self.victim_policy,
                      f"replaces retraction_policy={self.retraction_policy!r}; set one of "
                      "them (victim_policy=default keeps retraction_policy)")
        if not isinstance(self.disable_overlap_schedule, bool):
            raise bad("disable_overlap_schedule", self.disable_overlap_schedule,
                      "must be true or false")
        if not self.disable_overlap_schedule and self.preemption_mode == "swap":
            raise bad("disable_overlap_schedule", self.disable_overlap_schedule,
                      "preemption_mode=swap runs only in the synchronous loop; set "
                      "disable_overlap_schedule=true")
        if self.context_length is not None:
            need_int("context_length", self.context_length, 2)
        if not self.init_new_token_ratio > 0:
            raise bad("init_new_token_ratio", self.init_new_token_ratio, "must be positive")
        if not 0 <= self.min_new_token_ratio_factor <= 1:
            raise bad("min_new_token_ratio_factor", self.min_new_token_ratio_factor,
                      "must be in [0, 1]")
        need_int("new_token_ratio_decay_steps", self.new_token_ratio_decay_steps, 1)
        need_int("retract_decode_steps", self.retract_decode_steps, 0)
        need_int("clip_max_new_tokens_estimation", self.clip_max_new_tokens_estimation, 1)
        need_int("in_batch_prefix_caching_check_threshold",
                 self.in_batch_prefix_caching_check_threshold, -1)
        need_int("in_batch_prefix_caching_deprioritize_threshold",
                 self.in_batch_prefix_caching_deprioritize_threshold, 0)

    # ------------------------------------------------------------------ derived values
    @property
    def num_pages(self) -> int:
        """Pages in the pool (mirrors PagedTokenToKVPoolAllocator: size // page_size)."""
        return self.max_total_tokens // self.page_size

    @property
    def kv_capacity_tokens(self) -> int:
        return self.num_pages * self.page_size

    @property
    def resolved_max_running_requests(self) -> int:
        # mirrors mem_cache/kv_cache_configurator.py: resolve_max_num_reqs: a given flag is
        # capped at half the token slots too; unset, an unknown context length takes the
        # estimate's floor of 2048 rows.
        capacity = self.kv_capacity_tokens
        if self.max_running_requests is not None:
            return max(1, min(self.max_running_requests, capacity // 2))
        if self.context_length is None:
            estimated = 2048
        else:
            estimated = max(min(int(capacity / self.context_length * 512), 4096), 2048)
        return max(1, min(estimated, capacity // 2))

    @property
    def chunked_prefill_enabled(self) -> bool:
        return self.chunked_prefill_size is not None and self.chunked_prefill_size > 0

    @property
    def resolved_chunked_prefill_size(self) -> int | None:
        # mirrors managers/scheduler.py: Scheduler.__init__ (chunked_prefill_size <= 0 -> None)
        return self.chunked_prefill_size if self.chunked_prefill_enabled else None

    @property
    def enable_priority_preemption(self) -> bool:
        # mirrors managers/scheduler.py: Scheduler.init_schedule_policy
        return self.enable_priority_scheduling and not self.disable_priority_preemption

    @property
    def max_req_len(self) -> int:
        # mirrors managers/tp_worker.py: TpModelWorker.get_worker_info
        kv = self.kv_capacity_tokens
        if self.context_length is None:
            return kv - 1
        return min(self.context_length - 1, kv - 1)

    @property
    def max_req_input_len(self) -> int:
        return self.max_req_len - 5

    @classmethod
    def from_capacity(cls, kv_capacity_tokens: int, page_size: int = 1, **fields: object
                      ) -> SglangSchedulerConfig:
        """A config whose pool holds `kv_capacity_tokens` token slots in pages of `page_size`."""
        if isinstance(kv_capacity_tokens, bool) or not isinstance(kv_capacity_tokens, int):
            raise ValueError(
                f"sglang scheduler: kv_capacity_tokens={kv_capacity_tokens!r}: must be an integer")
        if isinstance(page_size, int) and page_size >= 1 and kv_capacity_tokens % page_size:
            raise ValueError(
                f"sglang scheduler: kv_capacity_tokens={kv_capacity_tokens} is not a multiple of "
                f"page_size={page_size}"
            )
        return cls(max_total_tokens=kv_capacity_tokens, page_size=page_size,
                   **fields)  # type: ignore[arg-type]
