"""The vLLM scheduler's view of a request: token debt and block hashes beside the contract's
`Request`.

Mirrors vllm/v1/request.py (Request, RequestStatus) for the fields the scheduling path reads.
"""

from __future__ import annotations

import enum

from schedulers.contract import Request
from schedulers.vllm.kv_cache_utils import BlockHash, hash_block_tokens


class RequestStatus(enum.IntEnum):
    """mirrors vllm/v1/request.py: RequestStatus (the states a local, text-only run uses)."""

    WAITING = 0
    RUNNING = 1
    PREEMPTED = 2
    FINISHED_STOPPED = 3
    FINISHED_LENGTH_CAPPED = 4
    FINISHED_ABORTED = 5

    @property
    def is_finished(self) -> bool:
        return self >= RequestStatus.FINISHED_STOPPED


# The finish reason each finished status reports (mirrors vllm/v1/request.py:
# RequestStatus.get_finished_reason).
FINISH_REASONS = {
    RequestStatus.FINISHED_STOPPED: "stop",
    RequestStatus.FINISHED_LENGTH_CAPPED: "length",
    RequestStatus.FINISHED_ABORTED: "abort",
}


class VllmRequest:
    """A request with vLLM's bookkeeping.

    `all_token_ids` is prompt plus committed outputs; `num_computed_tokens` is how much of it
    has KV (advanced optimistically when scheduled, reset to 0 on preemption). The token debt
    of a request is `num_tokens + num_output_placeholders - num_computed_tokens`.
    """

    __slots__ = (
        "all_token_ids",
        "arrival_time",
        "block_hashes",
        "block_size",
        "eos_token_id",
        "is_prefill_chunk",
        "max_tokens",
        "num_computed_tokens",
        "num_in_flight_tokens",
        "num_output_placeholders",
        "num_preemptions",
        "num_prompt_tokens",
        "num_stale_output_tokens",
        "priority",
        "request",
        "request_id",
        "status",
    )

    def __init__(self, request: Request, block_size: int) -> None:
        self.request = request
        self.request_id = request.request_id
        self.all_token_ids: list[int] = list(request.prompt_token_ids)
        self.all_token_ids.extend(request.output_token_ids)
        self.num_prompt_tokens = len(request.prompt_token_ids)
        self.max_tokens = request.max_tokens
        self.arrival_time = request.arrival_time
        self.priority = request.priority
        # mirrors vllm/sampling_params.py: ignore_eos leaves no eos_token_id to stop on
        self.eos_token_id = None if request.ignore_eos else request.eos_token_id
        self.status = RequestStatus.WAITING
        self.num_computed_tokens = 0
        # Async scheduling (schedulers/vllm/async_scheduler.py); always 0 in the synchronous
        # loop. mirrors vllm/v1/request.py: Request.num_output_placeholders (tokens sampled by
        # plans still in flight, counted in num_computed_tokens), num_in_flight_tokens (tokens
        # of plans not yet committed), num_stale_output_tokens (the in-flight tokens of a
        # preemption, whose output still arrives but changes no counter).
        self.num_output_placeholders = 0
        self.num_in_flight_tokens = 0
        self.num_stale_output_tokens = 0
        self.num_preemptions = 0
        self.is_prefill_chunk = False
        self.block_size = block_size
        self.block_hashes: list[BlockHash] = []
        self._update_block_hashes()

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.all_token_ids) - self.num_prompt_tokens

    def append_output_token_id(self, token_id: int) -> None:
        """mirrors vllm/v1/request.py: Request.append_output_token_ids (hashes new full blocks)."""
        self.all_token_ids.append(token_id)
        self.request.output_token_ids.append(token_id)
        if len(self.all_token_ids) % self.block_size == 0:
            self._update_block_hashes()

    def append_output_token_ids(self, token_ids: list[int]) -> None:
        """mirrors vllm/v1/request.py: Request.append_output_token_ids (a list of tokens)."""
        self.all_token_ids.extend(token_ids)
        self.request.output_token_ids.extend(token_ids)
        if len(self.all_token_ids) // self.block_size > len(self.block_hashes):
            self._update_block_hashes()

    def _update_block_hashes(self) -> None:
        # mirrors vllm/v1/core/kv_cache_utils.py: get_request_block_hasher (full blocks only)
        bs = self.block_size
        hashes = self.block_hashes
        tokens = self.all_token_ids
        start = len(hashes)
        if start == 0 and len(tokens) >= bs:
            hashes.append(hash_block_tokens(None, tokens[:bs]))
            start = 1
        parent = hashes[start - 1] if start else None
        end = len(tokens) // bs
        # hash_block_tokens(parent, block), inlined: a prompt hashes all its blocks here, from
        # one tuple of its tokens (a tuple's slices are tuples: no list copy per block)
        t = tuple(tokens[start * bs : end * bs])
        for j in range(end - start):
            parent = hash((parent, t[j * bs : (j + 1) * bs]))
            hashes.append(parent)

    def __hash__(self) -> int:
        # Identity, as Python gives any class without __eq__; said explicitly because a
        # compiled class (`make compiled`) that defines __lt__ would otherwise be unhashable.
        return object.__hash__(self)

    def __lt__(self, other: VllmRequest) -> bool:
        # mirrors vllm/v1/request.py: Request.__lt__ (priority, arrival time, then request id)
        if self.priority != other.priority:
            return self.priority < other.priority
        if self.arrival_time != other.arrival_time:
            return self.arrival_time < other.arrival_time
        if self.request_id != other.request_id:
            return self.request_id < other.request_id
        return id(self) < id(other)

    def __repr__(self) -> str:
        return (
            f"VllmRequest({self.request_id}, {self.status.name}, "
            f"computed={self.num_computed_tokens}/{self.num_tokens})"
        )
