"""The new-token ratio: the share of each running request's remaining output that admission
reserves (mirrors python/sglang/srt/managers/scheduler_components/new_token_ratio_tracker.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class _DecodingReq(Protocol):
    output_ids: list[int]
    max_new_tokens: int


class NewTokenRatioTracker:
    """`current` starts at `init`, decays linearly to `min` over `decay_steps` decode steps
    without retraction, is re-estimated after a retraction and reset when fully idle."""

    __slots__ = ("current", "decay", "init", "min", "retract_decode_steps")

    def __init__(self, init: float, min_ratio: float, decay: float,
                 retract_decode_steps: int = 20) -> None:
        self.init = init
        self.min = min_ratio
        self.decay = decay
        self.current = init
        self.retract_decode_steps = retract_decode_steps

    @classmethod
    def from_config(cls, schedule_conservativeness: float, init_new_token_ratio: float = 0.7,
                    min_new_token_ratio_factor: float = 0.14, decay_steps: int = 600,
                    retract_decode_steps: int = 20) -> NewTokenRatioTracker:
        # mirrors new_token_ratio_tracker.py: NewTokenRatioTracker.from_config
        init = min(init_new_token_ratio * schedule_conservativeness, 1.0)
        min_ratio = min(init * min_new_token_ratio_factor, 1.0)
        decay = (init - min_ratio) / decay_steps
        return cls(init, min_ratio, decay, retract_decode_steps)

    def decay_step(self) -> None:
        # mirrors new_token_ratio_tracker.py: NewTokenRatioTracker.decay_step
        self.current = max(self.current - self.decay, self.min)

    def reset(self) -> None:
        # mirrors new_token_ratio_tracker.py: NewTokenRatioTracker.reset
        self.current = self.init

    def estimate_after_retract(self, reqs: Sequence[_DecodingReq]) -> float:
        # mirrors new_token_ratio_tracker.py: estimate_new_token_ratio_after_retract
        total_decoded_tokens = 0
        total_max_new_tokens = 0
        for r in reqs:
            total_decoded_tokens += len(r.output_ids)
            total_max_new_tokens += r.max_new_tokens
        ratio = (total_decoded_tokens + self.retract_decode_steps * len(reqs)) / (
            total_max_new_tokens + 1
        )
        return min(1.0, ratio)
