"""SGLang's "generated shared prefix" workload (`bench_serving --dataset-name
generated-shared-prefix`): `num_groups` system prompts of `system_prompt_len` tokens, each
followed by `prompts_per_group` questions of `question_len` tokens; every request asks for
`output_len` tokens. As upstream does, the requests are shuffled (seeded) before they are given
arrival times (Poisson or gamma at `request_rate`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from experiments.inputs.workloads.arrivals import arrival_times, check_rate
from experiments.inputs.workloads.field_error import field_error
from experiments.inputs.workloads.parse import parse_params
from experiments.inputs.workloads.tokens import random_tokens
from schedulers.config_range import (
    ALL_AT_ONCE,
    INT64_MAX,
    MAX_GEN_TOKENS,
    MAX_RATE,
    MAX_TOKENS,
    MIN_RATE,
    ranged,
)
from schedulers.contract import DEFAULT_EOS_TOKEN_ID, Request


@dataclass(frozen=True, slots=True, kw_only=True)
class SharedPrefixWorkload:
    """Parameters of the shared-prefix generator (defaults are SGLang's `gsp_*` defaults).

    `mode` as in the synthetic generator: "fixed" produces exactly `output_len` tokens (EOS
    ignored); "eos" sends `max_tokens` and emits EOS at `output_len`.
    """

    # every prompt is built up front: groups x prompts_per_group stay within MAX_REQUESTS / 100
    num_groups: int = ranged(64, low=1, high=2**16)
    prompts_per_group: int = ranged(16, low=1, high=2**16)
    system_prompt_len: int = ranged(2048, low=0, high=MAX_GEN_TOKENS)
    question_len: int = ranged(128, low=1, high=MAX_GEN_TOKENS)
    output_len: int = ranged(256, low=1, high=MAX_GEN_TOKENS)
    request_rate: float = ranged(float("inf"), low=MIN_RATE, high=MAX_RATE, special=ALL_AT_ONCE)
    burstiness: float = ranged(1.0, low=0.01, high=100.0)
    shuffle: bool = True
    mode: str = "fixed"
    max_tokens: int | None = ranged(None, low=1, high=MAX_GEN_TOKENS)
    seed: int = ranged(0, low=0, high=INT64_MAX)
    vocab_size: int = ranged(32000, low=16, high=MAX_TOKENS)
    eos_token_id: int = ranged(DEFAULT_EOS_TOKEN_ID, low=0, high="vocab_size", high_open=True)

    def __post_init__(self) -> None:
        bad = partial(field_error, self)

        for name in ("num_groups", "prompts_per_group", "question_len", "output_len"):
            if getattr(self, name) < 1:
                raise bad(name, "must be at least 1")
        if self.system_prompt_len < 0:
            raise bad("system_prompt_len", "must be >= 0")
        check_rate("workload", self.request_rate, self.burstiness)
        if self.mode not in ("fixed", "eos"):
            raise bad("mode", "valid: fixed, eos")
        if self.mode == "eos" and (self.max_tokens is None or self.max_tokens < self.output_len):
            raise bad("max_tokens", "mode 'eos' needs a cap of at least output_len")


def generate_shared_prefix(w: SharedPrefixWorkload) -> list[Request]:
    """The requests `r0 ..` of a shared-prefix workload, in arrival order."""
    s_tok, s_shuf, s_arr = np.random.SeedSequence(w.seed).spawn(3)
    rng = np.random.default_rng(s_tok)
    systems = [random_tokens(rng, w.system_prompt_len, w.vocab_size)
               for _ in range(w.num_groups)]
    prompts = [systems[g] + random_tokens(rng, w.question_len, w.vocab_size)
               for g in range(w.num_groups) for _ in range(w.prompts_per_group)]
    if w.shuffle:
        order = np.random.default_rng(s_shuf).permutation(len(prompts))
        prompts = [prompts[i] for i in order]
    arrivals = arrival_times(np.random.default_rng(s_arr), len(prompts), w.request_rate,
                             w.burstiness)
    fixed = w.mode == "fixed"
    return [Request(
        request_id=f"r{i}",
        prompt_token_ids=p,
        max_tokens=w.output_len if fixed else int(w.max_tokens or w.output_len),
        arrival_time=float(arrivals[i]),
        ignore_eos=fixed,
        eos_output_len=w.output_len,
        eos_token_id=w.eos_token_id,
    ) for i, p in enumerate(prompts)]


def shared_prefix_from_config(cfg: Mapping[str, Any], seed: int | None = None) -> list[Request]:
    """Build the workload of a `name: shared_prefix` config mapping."""
    return generate_shared_prefix(parse_params(SharedPrefixWorkload, cfg, seed))
