"""The objects that cross the boundary between the engine, a scheduler and an executor.

See DESIGN.md, "The contract". A scheduler sees a `Request`, returns a `StepPlan` from
`schedule()`, and commits a `StepResult` in `update_from_output()`, which returns the
`StepEvents` of that step. Schedulers never read a clock, sleep or touch tensors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

# Token id the simulated executor emits when a request reaches its EOS length.
DEFAULT_EOS_TOKEN_ID = 2
# A chunk's token that the step still in flight samples (pipelined loops: `EngineLoop`); the
# engine puts that step's sampled token in its place before executing the chunk, as the
# upstream model runners read the previous step's sampled token on the device.
PLACEHOLDER_TOKEN_ID = -1
# In a pipelined decode run's tokens (`PipelinedDecodeRunScheduler`), the first token of a
# request that the plan in flight when the run starts does not schedule (SGLang: a running
# request beside the extend batch in flight); it gets its first token from call 1's commit.
NOT_SAMPLED_TOKEN_ID = -2


@dataclass(frozen=True, slots=True)
class EngineLoop:
    """How the engine drives a scheduler (DESIGN.md, "Engine loops"), declared by the
    scheduler (`LoopDeclaringScheduler`); the engine implements each one by its `name`.

    `batch_queue_size` is the most plans launched and not yet committed: 1 is the synchronous
    loop (schedule, execute, commit); 2 plans step k+1 while step k executes and commits k
    after, with k+1's plan already made (vLLM's `EngineCore.step_with_batch_queue`, SGLang's
    `event_loop_overlap`; they differ in when a call commits: engines/pipeline.py).
    """

    name: str
    batch_queue_size: int

    @property
    def pipelined(self) -> bool:
        """Whether a plan is made before the previous step's result is committed."""
        return self.batch_queue_size > 1


# upstream's synchronous loops: vLLM `EngineCore.step`, SGLang `event_loop_normal`
SYNCHRONOUS = EngineLoop("synchronous", 1)
# vLLM `EngineCore.step_with_batch_queue` with `max_concurrent_batches` 2 (async scheduling)
BATCH_QUEUE = EngineLoop("batch_queue", 2)
# SGLang `Scheduler.event_loop_overlap`: batch k planned and launched, then batch k-1's result
# processed (an idle iteration launches nothing and still processes k-1)
OVERLAP = EngineLoop("overlap", 2)
ENGINE_LOOPS: dict[str, EngineLoop] = {
    loop.name: loop for loop in (SYNCHRONOUS, BATCH_QUEUE, OVERLAP)}


@dataclass(slots=True, eq=False)
class Request:
    """One client request.

    `max_tokens` is the client's cap, visible to schedulers. `eos_output_len` is the output
    length at which the model will emit EOS; it comes from the workload and schedulers must
    not read it (it exists for executors and metrics). `replay_token_ids`, when given, are the
    output tokens a simulated executor samples, in order (a real run's, replayed, so that the
    prefix caches see the tokens the real model produced); schedulers must not read it either.
    `output_token_ids` grows as the scheduler commits sampled tokens.
    """

    request_id: str
    prompt_token_ids: list[int]
    max_tokens: int
    arrival_time: float = 0.0
    priority: int = 0
    ignore_eos: bool = False
    eos_output_len: int | None = None
    eos_token_id: int | None = DEFAULT_EOS_TOKEN_ID
    output_token_ids: list[int] = field(default_factory=list)
    replay_token_ids: list[int] | None = None

    def __post_init__(self) -> None:
        if self.eos_output_len is None:
            self.eos_output_len = self.max_tokens

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        """Prompt plus committed output tokens."""
        return len(self.prompt_token_ids) + len(self.output_token_ids)


@dataclass(slots=True)
class ScheduledChunk:
    """The work one request gets in one step.

    `token_ids` are the tokens whose KV is computed this step, at positions
    `start_pos .. start_pos + len(token_ids) - 1`. `page_ids` are the physical KV pages that
    cover every position from 0 to the last one (slot = page_id * page_size + offset); the
    list may be the scheduler's own and is valid only until the next `schedule()`.
    `sample` says whether a token is sampled after the last position (the request has caught
    up with its sequence). `admitted` marks the first chunk after (re)admission, whose
    `start_pos` is then the prefix-cache hit.
    """

    request_id: str
    token_ids: list[int]
    start_pos: int
    page_ids: list[int]
    sample: bool
    admitted: bool = False

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)


@dataclass(slots=True)
class SwapOp:
    """One request's KV copied between device and host pages (`preemption_mode=swap`).

    Position `p < num_tokens` lives at slot `device_page_ids[p // page_size] * page_size +
    p % page_size` on the device and at the same offset of `host_page_ids[p // page_size]`
    on the host; both lists hold `ceil(num_tokens / page_size)` pages.
    """

    request_id: str
    device_page_ids: list[int]
    host_page_ids: list[int]
    num_tokens: int


@dataclass(slots=True)
class StepPlan:
    """One step's work, frozen: what to compute, where its KV lives, and what changed.

    `preempted` lists requests preempted (vLLM) or retracted (SGLang) while this plan was
    made, in the order the scheduler chose them. `aborted` holds (request id, reason) for
    requests given up while planning (they can never fit).

    With `preemption_mode=swap`, `swap_out` copies victims' KV to host pages (their device
    pages are already free in the scheduler and may be reused by this very step) and
    `swap_in` copies resumed requests' KV back; an executor applies every swap-out, then
    every swap-in, then the forward pass. `swap_fallbacks` lists victims that were to be
    swapped but were preempted by recompute because the host pool was full.
    """

    step: int
    page_size: int
    chunks: list[ScheduledChunk] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    aborted: list[tuple[str, str]] = field(default_factory=list)
    forward_mode: str = "mixed"  # "mixed" (vLLM), "extend" / "decode" (SGLang), "idle"
    swap_out: list[SwapOp] = field(default_factory=list)
    swap_in: list[SwapOp] = field(default_factory=list)
    swap_fallbacks: list[str] = field(default_factory=list)

    @property
    def has_swaps(self) -> bool:
        """Whether the executor has KV to copy (a plan may swap without any chunk)."""
        return bool(self.swap_out or self.swap_in)

    @property
    def num_tokens(self) -> int:
        return sum(len(c.token_ids) for c in self.chunks)

    @property
    def is_empty(self) -> bool:
        return not self.chunks


@dataclass(slots=True)
class StepResult:
    """What the executor returns: a sampled token for every chunk with `sample` set.

    `duration_s` includes `swap_s`, the part of the step spent copying KV between device and
    host; `swap_out_bytes` / `swap_in_bytes` are the bytes copied each way.
    """

    sampled_token_ids: dict[str, int]
    duration_s: float
    swap_s: float = 0.0
    swap_out_bytes: int = 0
    swap_in_bytes: int = 0


@dataclass(slots=True)
class StepEvents:
    """What committing a step changed.

    `new_token_ids` maps a request to the output tokens appended this step. `finished`
    holds (request id, reason) with reason one of "stop" (EOS), "length" (max_tokens or
    max_model_len) or "abort".
    """

    new_token_ids: dict[str, list[int]] = field(default_factory=dict)
    finished: list[tuple[str, str]] = field(default_factory=list)


@dataclass(slots=True)
class DecodeRun:
    """A run of steady decode steps a scheduler can commit at once (DESIGN.md, "Decode runs").

    In each of the next `max_steps` steps, if nothing arrives, the scheduler would decode
    exactly one token for every request in `request_ids` (its running order) and decide
    nothing else: no admission, preemption, retraction or abort. In the first of those steps,
    request `i` computes position `seq_lens[i] - 1` and samples after `seq_lens[i]` tokens;
    every later step adds one to each. Only the last step of a run may finish requests (a stop
    token or a length cap): the scheduler bounds the run there, and the executor too.
    `forward_mode` is the plans'.
    """

    request_ids: list[str]
    seq_lens: list[int]
    max_steps: int
    forward_mode: str

    def __post_init__(self) -> None:
        if len(self.seq_lens) != len(self.request_ids):
            raise ValueError(f"decode run: {len(self.seq_lens)} seq_lens for "
                             f"{len(self.request_ids)} requests")

    def num_steps(self, tokens: list[list[int]]) -> int:
        """The steps that `tokens` (one list per request) commit; at least 1, at most
        `max_steps`."""
        k = len(tokens[0]) if tokens else 0
        if len(tokens) != len(self.request_ids) or not 0 < k <= self.max_steps:
            raise ValueError(f"decode run: {len(tokens)} token lists of {k} for "
                             f"{len(self.request_ids)} requests (max_steps={self.max_steps})")
        return k


@dataclass(slots=True)
class DecodeRunStats:
    """What committing a decode run did: the occupancy after each step (`SchedulerStats` per
    step; the running count is constant until the last step, which may finish requests), and
    the requests the last step finished, with their reasons."""

    kv_used_tokens: list[int]
    kv_cached_tokens: list[int]
    num_running: int
    num_waiting: int | list[int]  # one count, or one per step (arrivals admitted mid-run)
    finished: list[tuple[str, str]]
    num_running_after: int  # after the last step


@runtime_checkable
class Scheduler(Protocol):
    """What the engine drives. Implemented by the schedulers of `schedulers.registry`."""

    name: str
    page_size: int

    def add_request(self, request: Request) -> str | None:
        """Queue a request. Returns None when accepted, or the reason it can never be served."""
        ...

    def schedule(self) -> StepPlan:
        """Plan the next step."""
        ...

    def update_from_output(self, plan: StepPlan, result: StepResult) -> StepEvents:
        """Commit the executor's result for `plan`: the one `schedule()` just returned, or,
        in a pipelined loop (`LoopDeclaringScheduler`), the oldest plan not yet committed."""
        ...

    def abort(self, request_id: str, reason: str) -> None:
        """Drop a request and release whatever it holds."""
        ...

    def has_unfinished(self) -> bool:
        """Whether any request is waiting or running."""
        ...

    def stats(self) -> SchedulerStats:
        """A snapshot of queue and KV occupancy."""
        ...


@runtime_checkable
class DecodeRunScheduler(Protocol):
    """Capability: a scheduler that commits runs of steady decode steps at once (DESIGN.md,
    "Decode runs"). The engine uses runs only with a scheduler (and an executor) that has it."""

    def decode_run(self, limit: int) -> DecodeRun | None:
        """The steady decode steps ahead (at most `limit`), or None when there is no run."""
        ...

    def commit_decode_run(self, run: DecodeRun, tokens: list[list[int]]) -> DecodeRunStats:
        """Commit the run's steps as the single steps would; `tokens`: one list per request."""
        ...

    def arrivals_keep_decode_run(self) -> bool:
        """Whether an arrival during a run changes none of the run's decisions (the engine
        then admits it at its step boundary instead of stopping the run before it)."""
        ...


@runtime_checkable
class PipelinedDecodeRunScheduler(Protocol):
    """Capability: a pipelined scheduler (`LoopDeclaringScheduler`, `BATCH_QUEUE`) that
    commits runs of steady loop calls at once (DESIGN.md, "Decode runs"). In call `j` of a
    run the loop makes the plan of the run's step `j` (one token for every request of the
    run) and commits the plan before it; call 0 commits the plan in flight when the run
    starts (which may schedule only some of the run's requests: SGLang's extend batch, whose
    requests join the running batch in step 0). Only the last call's commit may finish
    requests (its plan skips those it finishes by a length cap, as the scheduler would)."""

    def pipelined_decode_run(self, limit: int, in_flight: StepPlan, result: StepResult
                             ) -> DecodeRun | None:
        """The steady calls ahead (at most `limit`) with `in_flight` the one plan in flight
        (its result `result`), or None when there is no run."""
        ...

    def commit_pipelined_decode_run(self, run: DecodeRun, tokens: list[list[int]]
                                    ) -> tuple[StepPlan, DecodeRunStats]:
        """Commit `k = len(tokens[0])` calls of `run`: `tokens[i][j]` is the token that
        request `i` samples in the plan call `j` commits (`tokens[i][0]`: the plan in flight,
        `NOT_SAMPLED_TOKEN_ID` for a request it does not schedule).
        Returns the plan of the last call (step `k - 1`, its placeholders unfilled, to launch:
        it is then the one plan in flight) and the `k` commits' stats (`finished`: the last
        commit's)."""
        ...

    def arrivals_keep_decode_run(self) -> bool:
        """As `DecodeRunScheduler.arrivals_keep_decode_run`."""
        ...


@runtime_checkable
class LoopDeclaringScheduler(Protocol):
    """Capability: a scheduler that says which engine loop drives it (`EngineLoop`); one
    without it runs in the synchronous loop. A pipelined scheduler plans with the previous
    step still in flight: a chunk may hold `PLACEHOLDER_TOKEN_ID` for the token that step
    samples, and `update_from_output` may commit a plan older than the last `schedule()`."""

    engine_loop: EngineLoop


@runtime_checkable
class SelfCheckingScheduler(Protocol):
    """Capability: a scheduler that checks its own bookkeeping (`check_invariants=true`),
    for schedulers without a registered check (schedulers/registry.py)."""

    def check_invariants(self) -> None:
        """Raise when the scheduler's state breaks one of its invariants."""
        ...


@runtime_checkable
class SwappingScheduler(Protocol):
    """Capability: a scheduler that honours `preemption_mode=swap` (registry: `swaps`). Its
    `host_pool` is the `schedulers.host_pool.HostKVPool` holding swapped-out KV, or None when
    the scheduler was configured to recompute."""

    host_pool: Any


@runtime_checkable
class CapacityConfig(Protocol):
    """A scheduler config built from the pool size every scheduler of a comparison shares:
    `from_capacity(kv_capacity_tokens, **fields)` sets the config's own capacity field."""

    @classmethod
    def from_capacity(cls, kv_capacity_tokens: int, **fields: Any) -> Any:
        """A config whose KV pool holds `kv_capacity_tokens` token slots."""
        ...


@dataclass(slots=True)
class SchedulerStats:
    """Occupancy after the last step, in token slots and requests.

    `kv_used_tokens`: slots held by live requests (including cached prefixes they share);
    `kv_cached_tokens`: slots held only by the prefix cache, evictable on demand (vLLM's free
    hashed blocks, SGLang's evictable radix nodes). Free = capacity - used - cached.
    """

    num_running: int
    num_waiting: int
    kv_capacity_tokens: int
    kv_used_tokens: int
    kv_cached_tokens: int
