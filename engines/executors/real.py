"""The real executor: runs a `StepPlan` through the paged decoder and samples greedily.

Per step: gather every chunk's tokens, positions and slots (slot = page_id * page_size +
offset, from the chunk's `page_ids`), write the new tokens' keys and values to those slots
layer by layer, attend over each request's whole sequence with the configured kernel, compute
logits only for the last token of chunks with `sample` set, and take the argmax. The step's
duration is measured from the start of the forward pass until the sampled tokens are on the
host, by one of the timers (`TIMERS`, DESIGN.md "The real executor's step clock"):

- `wall`: one measurement, `time.perf_counter` on a CPU, CUDA events on a GPU;
- `cpu`: one measurement of the process's CPU time (`time.process_time`, meaningful with one
  torch thread): without the time spent waiting for a core on a busy machine;
- `min_of_k`: the forward pass run `timer_repeats` times over the same inputs, the step's time
  the minimum of the k measurements (CPU time with one torch thread, wall time with more, CUDA
  events on a GPU). Recomputing the same positions writes the same KV values and samples the
  same tokens (checked: differing tokens are an error), so only the clock sees the repeats;
- `reference`: `min_of_k`, each step pass interleaved with a pass of a fixed reference step
  (`REFERENCE_PLAN`, on a KV cache of its own), the step's time its fastest pass scaled by
  `reference_s / (the reference's fastest pass)`: a slowdown that the step and the reference
  share (another process's cache and memory traffic, a slower core) cancels; `reference_s`
  is the reference's time, given (`timer_reference_s`, so that runs share one unit) or
  measured when the executor starts;
- `auto` (the default): `reference` on a CPU, `wall` on a GPU.

A step with a prefill chunk (a chunk of more than one token) may take more passes than a
decode step (`timer_prefill_repeats`, null: `timer_repeats`): a prefill step is long and
compute-bound, it is one of only a few in a run, and the first requests' TTFTs are sums of a
few of them, where a decode step's noise averages out over the hundreds of a run.

The executor keeps no per-request state besides the KV cache: whatever the scheduler does
(chunking, prefix hits, preemption and recompute), the plan says which slots hold what.

Swaps (`preemption_mode=swap`) copy KV between the device cache and a host pool of the same
layout (`HostKVStore`, pinned memory beside a GPU), every swap-out, then every swap-in, then the
forward pass; their time is measured apart (`StepResult.swap_s`) and included in the step's.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from engines.model import PagedDecoder, PagedKVCache
from engines.model.text import decode, has_tokenizer, load_tokenizer
from kernels import AttentionBackend, build_metadata, get_attention_backend, resolve_kernel
from schedulers.contract import Request, ScheduledChunk, StepPlan, StepResult, SwapOp

# Initial slots of a growable cache (CPU default, when no `num_slots` is given).
_GROWABLE_START_SLOTS = 1024
# Forward passes per step of timer=min_of_k and reference unless configured (DESIGN.md: the
# step clock; k = 2 under reference kept a run's clock within 3 % on this VM, k = 1 drifted 6-9 %).
DEFAULT_TIMER_REPEATS = 2
# timer=reference: the reference step, 4 decodes at context 64 in pages of 16 (about a decode
# step of the study's batches), and the passes that measure its time when none is given.
REFERENCE_BATCH, REFERENCE_CONTEXT, REFERENCE_PAGE = 4, 64, 16
REFERENCE_CALIBRATION_PASSES = 10


@dataclass(frozen=True, slots=True)
class RealExecutorConfig:
    """What `executor=real` needs: the checkpoint folder and how to run it.

    `kernel`: auto | torch | triton | flash_attn. `dtype`: None means float32 on a CPU and
    bfloat16 on a GPU. `device`: None means the GPU when there is one. `num_slots`: KV slots
    to allocate (at least the scheduler's pool: vLLM `num_blocks * block_size`, SGLang
    `max_total_tokens`); None grows the cache on demand. `timer`: auto | wall | cpu |
    min_of_k | reference (module docstring); `timer_repeats`: k, the forward passes per step
    of `min_of_k` and `reference` (at least 1); `timer_reference_s`: the reference step's
    time for `reference` (None: measured at start); `timer_prefill_repeats`: the passes of a
    step with a prefill chunk (None: `timer_repeats`).
    """

    model_path: str
    kernel: str = "auto"
    dtype: str | None = None
    device: str | None = None
    num_slots: int | None = None
    timer: str = "auto"
    timer_repeats: int = DEFAULT_TIMER_REPEATS
    timer_reference_s: float | None = None
    timer_prefill_repeats: int | None = None


TIMERS = ("auto", "wall", "cpu", "min_of_k", "reference")
_REPEATED = ("min_of_k", "reference")


@dataclass(frozen=True, slots=True)
class StepTimer:
    """How an executor times its steps, resolved for its device: `name` (wall | cpu |
    min_of_k | reference), `repeats` (forward passes per step: k for min_of_k and reference,
    else 1), `clock` (what each pass reads: perf_counter | process_time | cuda_events) and,
    for reference, `reference_s` (the reference step's time: the clock's unit) and where it
    came from (`reference_source`: config, or measured at start); `prefill_repeats`: the
    passes of a step with a prefill chunk (`repeats` unless configured)."""

    name: str
    repeats: int
    clock: str
    prefill_repeats: int
    reference_s: float | None = None
    reference_source: str | None = None

    def passes(self, plan: StepPlan) -> int:
        """The forward passes that time `plan`: `prefill_repeats` where a chunk has more than
        one token (a prefill), else `repeats`."""
        if self.prefill_repeats != self.repeats and any(len(c.token_ids) > 1
                                                        for c in plan.chunks):
            return self.prefill_repeats
        return self.repeats


def _is_pass_count(value: object) -> bool:
    """Whether `value` is a number of forward passes: an int (not a bool) of at least 1."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def resolve_timer(timer: str, repeats: int, device: torch.device,
                  num_threads: int | None = None,
                  prefill_repeats: int | None = None) -> StepTimer:
    """The timer `timer` with `repeats` passes (`prefill_repeats` for a step with a prefill
    chunk, None: `repeats`) means on `device` (`num_threads`: torch's intra-op threads,
    default torch.get_num_threads()).

    Raises ValueError naming `executor.timer`, `executor.timer_repeats` or
    `executor.timer_prefill_repeats` when one is not a valid choice.
    """
    if timer not in TIMERS:
        raise ValueError(f"real executor: executor.timer={timer!r}: valid: {', '.join(TIMERS)}")
    if not _is_pass_count(repeats):
        raise ValueError(f"real executor: executor.timer_repeats={repeats!r}: must be an "
                         "integer >= 1 (the forward passes per step of timer=min_of_k)")
    if prefill_repeats is not None and not _is_pass_count(prefill_repeats):
        raise ValueError(f"real executor: executor.timer_prefill_repeats={prefill_repeats!r}: "
                         "must be an integer >= 1 (the forward passes of a step with a "
                         "prefill chunk) or null (timer_repeats)")
    cuda = device.type == "cuda"
    if timer == "auto":
        timer = "wall" if cuda else "reference"
    if cuda:
        clock = "cuda_events"
    elif timer == "cpu":
        clock = "process_time"
    elif timer in _REPEATED:
        # process_time sums every thread's CPU seconds (spin-waits included): with more than
        # one torch thread it is no step time, the wall clock is.
        threads = torch.get_num_threads() if num_threads is None else num_threads
        clock = "process_time" if threads == 1 else "perf_counter"
    else:
        clock = "perf_counter"
    if timer not in _REPEATED:
        return StepTimer(timer, 1, clock, 1)
    return StepTimer(timer, repeats, clock,
                     repeats if prefill_repeats is None else prefill_repeats)


def reference_plan() -> StepPlan:
    """The reference step of timer=reference: `REFERENCE_BATCH` decodes at context
    `REFERENCE_CONTEXT`, each in its own pages of a cache of `reference_slots()` slots."""
    per = REFERENCE_CONTEXT // REFERENCE_PAGE
    return StepPlan(0, REFERENCE_PAGE, [
        ScheduledChunk(f"reference{b}", [1], REFERENCE_CONTEXT - 1,
                       list(range(b * per, (b + 1) * per)), True)
        for b in range(REFERENCE_BATCH)])


def reference_slots() -> int:
    """The KV slots the reference step uses."""
    return REFERENCE_BATCH * REFERENCE_CONTEXT


@dataclass(slots=True)
class StepInputs:
    """A plan flattened for the model (host-side lists)."""

    input_ids: list[int]
    query_lens: list[int]
    seq_lens: list[int]
    page_tables: list[list[int]]
    sample_rows: list[int]
    sample_ids: list[str]
    max_slot: int


def flatten_plan(plan: StepPlan) -> StepInputs:
    """Turn a plan's chunks into the model's inputs.

    Raises ValueError naming the request when a chunk is empty or its pages do not cover the
    positions it computes.
    """
    ps = plan.page_size
    input_ids: list[int] = []
    query_lens: list[int] = []
    seq_lens: list[int] = []
    tables: list[list[int]] = []
    sample_rows: list[int] = []
    sample_ids: list[str] = []
    max_page = -1
    rows = 0
    for c in plan.chunks:
        n = len(c.token_ids)
        start = c.start_pos
        end = start + n
        need = -(-end // ps)
        pages = c.page_ids
        if n == 0 or start < 0 or len(pages) < need:
            _bad_chunk(plan, c.request_id, n, start, len(pages))
        if len(pages) > need:
            pages = pages[:need]
        input_ids += c.token_ids
        query_lens.append(n)
        seq_lens.append(end)
        tables.append(pages)
        top = max(pages)
        if top > max_page:
            max_page = top
        rows += n
        if c.sample:
            sample_rows.append(rows - 1)
            sample_ids.append(c.request_id)
    return StepInputs(input_ids, query_lens, seq_lens, tables, sample_rows, sample_ids,
                      (max_page + 1) * ps - 1)


def _bad_chunk(plan: StepPlan, rid: str, n: int, start: int, num_pages: int) -> None:
    if n == 0 or start < 0:
        raise ValueError(f"real executor: step {plan.step}: request {rid!r} has {n} tokens at "
                         f"start_pos={start}")
    ps = plan.page_size
    raise ValueError(
        f"real executor: step {plan.step}: request {rid!r} computes positions {start}.."
        f"{start + n - 1} but its {num_pages} page(s) of {ps} slots cover {num_pages * ps} "
        "positions")


def op_slots(page_ids: list[int], num_tokens: int, page_size: int) -> torch.Tensor:
    """Slots of positions `0 .. num_tokens - 1` in pages `page_ids`."""
    pages = torch.tensor(page_ids, dtype=torch.long)
    slots = (pages[:, None] * page_size + torch.arange(page_size)).flatten()
    return slots[:num_tokens]


class HostKVStore:
    """The host copy of swapped KV: per layer `[2, num_slots, num_kv_heads, head_dim]` on the
    CPU, slot = host_page_id * page_size + offset; grows (doubling) on demand."""

    def __init__(self, cache: PagedKVCache) -> None:
        self.cache = cache
        self.pin = cache.device.type == "cuda"
        self.kv: list[torch.Tensor] = [self._new(0) for _ in range(cache.num_layers)]

    def _new(self, num_slots: int) -> torch.Tensor:
        c = self.cache
        return torch.zeros((2, num_slots, c.num_kv_heads, c.head_dim), dtype=c.dtype,
                           device="cpu", pin_memory=self.pin and num_slots > 0)

    def ensure_slots(self, needed: int) -> None:
        have = self.kv[0].shape[1]
        if needed <= have:
            return
        size = max(needed, 2 * have)
        for i, old in enumerate(self.kv):
            new = self._new(size)
            new[:, :have] = old
            self.kv[i] = new

    def swap_out(self, op: SwapOp, page_size: int) -> None:
        """Copy the op's tokens from the device cache to the host."""
        dev = op_slots(op.device_page_ids, op.num_tokens, page_size)
        host = op_slots(op.host_page_ids, op.num_tokens, page_size)
        self.ensure_slots(int(host.max()) + 1)
        dev = dev.to(self.cache.device)
        for layer, kv in enumerate(self.cache.kv):
            self.kv[layer][:, host] = kv[:, dev].to("cpu")

    def swap_in(self, op: SwapOp, page_size: int) -> None:
        """Copy the op's tokens from the host back into the device cache."""
        dev = op_slots(op.device_page_ids, op.num_tokens, page_size)
        host = op_slots(op.host_page_ids, op.num_tokens, page_size)
        self.cache.ensure_slots(int(dev.max()) + 1)
        dev = dev.to(self.cache.device)
        for layer, kv in enumerate(self.cache.kv):
            kv[:, dev] = self.kv[layer][:, host].to(self.cache.device, non_blocking=True)


class RealExecutor:
    """Implements `engines.executors.base.Executor` with the paged decoder."""

    def __init__(self, model: PagedDecoder, kernel: str = "auto",
                 num_slots: int | None = None, timer: str = "auto",
                 timer_repeats: int = DEFAULT_TIMER_REPEATS,
                 timer_reference_s: float | None = None,
                 timer_prefill_repeats: int | None = None) -> None:
        self.timer = resolve_timer(timer, timer_repeats, model.device,
                                   prefill_repeats=timer_prefill_repeats)
        if timer_reference_s is not None and self.timer.name != "reference":
            raise ValueError(f"real executor: executor.timer_reference_s={timer_reference_s!r}"
                             f" is for executor.timer=reference, not {self.timer.name!r}")
        if timer_reference_s is not None and not (
                isinstance(timer_reference_s, int | float)
                and not isinstance(timer_reference_s, bool)
                and math.isfinite(timer_reference_s) and timer_reference_s > 0):
            raise ValueError(f"real executor: executor.timer_reference_s={timer_reference_s!r}"
                             ": must be a number of seconds > 0 (or null: measured at start)")
        self.model = model
        self._clock = (time.process_time if self.timer.clock == "process_time"
                       else time.perf_counter)
        self.kernel = kernel
        resolve_kernel(kernel, model.device)  # fail early on an unknown choice
        growable = num_slots is None
        self.kv_cache: PagedKVCache = model.new_kv_cache(
            num_slots if num_slots is not None else _GROWABLE_START_SLOTS, growable=growable)
        self.host_kv = HostKVStore(self.kv_cache)
        self._backends: dict[int, AttentionBackend] = {}
        self._vocab = model.config.vocab_size
        self._cuda = model.device.type == "cuda"
        # The checkpoint folder when it carries a tokenizer (outputs are then decoded to text).
        self.tokenizer_path: str | None = None
        self._reference: tuple[StepPlan, PagedKVCache] | None = None
        if self.timer.name == "reference":
            self._reference = (reference_plan(), model.new_kv_cache(reference_slots()))
            if timer_reference_s is None:
                self._reference_pass()  # warm-up
                measured = min(self._reference_pass()
                               for _ in range(REFERENCE_CALIBRATION_PASSES))
                self.timer = replace(self.timer, reference_s=measured, reference_source=(
                    f"measured at start: the fastest of {REFERENCE_CALIBRATION_PASSES} "
                    "passes"))
            else:
                self.timer = replace(self.timer, reference_s=float(timer_reference_s),
                                     reference_source="config")

    @classmethod
    def from_config(cls, cfg: RealExecutorConfig) -> RealExecutor:
        """Load the checkpoint of `cfg.model_path` and build the executor."""
        model = PagedDecoder.from_pretrained(Path(cfg.model_path), dtype=cfg.dtype,
                                             device=cfg.device)
        executor = cls(model, kernel=cfg.kernel, num_slots=cfg.num_slots, timer=cfg.timer,
                       timer_repeats=cfg.timer_repeats,
                       timer_reference_s=cfg.timer_reference_s,
                       timer_prefill_repeats=cfg.timer_prefill_repeats)
        if has_tokenizer(cfg.model_path):
            executor.tokenizer_path = str(cfg.model_path)
        return executor

    def decode(self, token_ids: list[int]) -> str | None:
        """The text of `token_ids` by the checkpoint's tokenizer (special tokens left out);
        None when the checkpoint has no tokenizer."""
        if self.tokenizer_path is None:
            return None
        return decode(load_tokenizer(self.tokenizer_path), token_ids)

    def backend(self, page_size: int) -> AttentionBackend:
        """The attention backend for plans of `page_size` (resolved once per page size)."""
        b = self._backends.get(page_size)
        if b is None:
            b = get_attention_backend(self.kernel, self.model.device, page_size)
            self._backends[page_size] = b
        return b

    def register(self, request: Request) -> None:
        """Check that the prompt's token ids are in the model's vocabulary."""
        bad = [t for t in request.prompt_token_ids if not 0 <= t < self._vocab]
        if bad:
            raise ValueError(f"real executor: request {request.request_id!r}: token id "
                             f"{bad[0]} is outside the vocabulary (vocab_size={self._vocab})")

    def execute(self, plan: StepPlan) -> StepResult:
        """Apply the plan's swaps; compute its chunks; sample greedily where `sample` is set;
        time the step."""
        swap = self._apply_swaps(plan) if plan.has_swaps else (0.0, 0, 0)
        if not plan.chunks:
            return StepResult({}, swap[0], *swap)
        result = self._forward(plan)
        if not plan.has_swaps:
            return result
        return StepResult(result.sampled_token_ids, result.duration_s + swap[0], *swap)

    def _apply_swaps(self, plan: StepPlan) -> tuple[float, int, int]:
        """Every swap-out, then every swap-in; returns (seconds, bytes out, bytes in)."""
        t0 = time.perf_counter()
        ps = plan.page_size
        for op in plan.swap_out:
            self.host_kv.swap_out(op, ps)
        for op in plan.swap_in:
            self.host_kv.swap_in(op, ps)
        if self._cuda:
            torch.cuda.synchronize(self.model.device)
        seconds = time.perf_counter() - t0
        per_token = self.kv_cache.num_bytes() // self.kv_cache.num_slots
        return (seconds, sum(op.num_tokens for op in plan.swap_out) * per_token,
                sum(op.num_tokens for op in plan.swap_in) * per_token)

    def _forward(self, plan: StepPlan) -> StepResult:
        """Compute the plan's chunks `timer.passes(plan)` times; the step's time is the
        fastest pass (one pass but for min_of_k and reference), for reference scaled by the
        reference step's time over its fastest pass, a pass of it before each of the step's.
        Every pass writes the same KV slots with the same values, so the cache and the
        sampled tokens after k passes equal those after one; a pass that samples otherwise
        than the first is an error."""
        fastest_reference = duration = math.inf
        sample_ids: list[str] = []
        tokens: list[int] = []
        for k in range(self.timer.passes(plan)):
            if self._reference is not None:
                fastest_reference = min(fastest_reference, self._reference_pass())
            ids, sampled, seconds = self._timed_pass(plan)
            if k == 0:
                sample_ids, tokens = ids, sampled
            else:
                self._check_same(plan, tokens, sampled)
            duration = min(duration, seconds)
        if self._reference is not None:
            assert self.timer.reference_s is not None
            duration *= self.timer.reference_s / fastest_reference
        return StepResult(dict(zip(sample_ids, tokens, strict=True)), duration)

    def _reference_pass(self) -> float:
        """One pass of the reference step on its own cache: its seconds."""
        assert self._reference is not None
        plan, cache = self._reference
        return self._timed_pass(plan, cache)[2]

    def _check_same(self, plan: StepPlan, first: list[int], again: list[int]) -> None:
        if again != first:
            raise RuntimeError(
                f"real executor: step {plan.step}: a repeated forward pass sampled "
                f"{again} where the first sampled {first} (timer={self.timer.name} needs a "
                "deterministic kernel; use executor.timer=wall or cpu)")

    def _timed_pass(self, plan: StepPlan, cache: PagedKVCache | None = None
                    ) -> tuple[list[str], list[int], float]:
        """One forward pass over the plan on `cache` (default: the executor's), host
        preparation included: (the sampled requests, their tokens, seconds)."""
        kv_cache = self.kv_cache if cache is None else cache
        start_event = end_event = None
        if self._cuda:
            start_event = torch.cuda.Event(enable_timing=True)
            end_event = torch.cuda.Event(enable_timing=True)
            start_event.record()
        t0 = self._clock()
        inp = flatten_plan(plan)
        kv_cache.ensure_slots(inp.max_slot + 1)  # grows on the first pass only
        dev = self.model.device
        meta = build_metadata(inp.query_lens, inp.seq_lens, inp.page_tables, plan.page_size,
                              dev)
        input_ids = torch.tensor(inp.input_ids, dtype=torch.long).to(dev, non_blocking=True)
        rows = torch.tensor(inp.sample_rows, dtype=torch.long).to(dev, non_blocking=True)
        with torch.inference_mode():
            logits = self.model.forward(input_ids, meta, kv_cache,
                                        self.backend(plan.page_size), rows)
            tokens = logits.argmax(dim=-1).tolist() if inp.sample_rows else []
        if start_event is not None and end_event is not None:
            end_event.record()
            end_event.synchronize()
            return inp.sample_ids, tokens, start_event.elapsed_time(end_event) / 1000.0
        return inp.sample_ids, tokens, self._clock() - t0
