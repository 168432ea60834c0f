"""The synthetic generator.

Poisson (or gamma, with `burstiness` != 1, as `vllm bench serve` does) arrivals at
`request_rate` requests/s, the first at t=0; prompt and output lengths drawn from named
distributions (`experiments.inputs.workloads.lengths`); prompt token ids drawn from the seed.
Two modes:
- "fixed": the benchmark mode: `max_tokens` = the drawn output length and `ignore_eos` set,
  so every request produces exactly that many tokens (`eos_output_len` = it as well);
- "eos": `max_tokens` = the `max_tokens` cap, the model emits EOS at the drawn output length
  (which the scheduler cannot see), `ignore_eos` unset.
Arrivals, lengths and tokens use independent random streams spawned from `seed`, so changing
the length distribution does not move the arrivals.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from experiments.inputs.workloads.arrivals import arrival_times, check_rate
from experiments.inputs.workloads.field_error import field_error
from experiments.inputs.workloads.lengths import LengthDist
from experiments.inputs.workloads.parse import parse_params
from experiments.inputs.workloads.stream import RequestStream, ordered_stream
from experiments.inputs.workloads.tokens import LOW_TOKEN_ID, random_tokens
from schedulers.config_range import (
    ALL_AT_ONCE,
    INT64_MAX,
    MAX_GEN_TOKENS,
    MAX_RATE,
    MAX_REQUESTS,
    MAX_TOKENS,
    MIN_RATE,
    ranged,
)
from schedulers.contract import DEFAULT_EOS_TOKEN_ID, Request

MODES = ("fixed", "eos")


@dataclass(frozen=True, slots=True, kw_only=True)
class SyntheticWorkload:
    """Parameters of the synthetic generator (see the module docstring).

    `request_rate` is requests/s (inf: all at t=0). `shared_prefix_len` > 0 starts every
    prompt with one of `num_prefix_groups` shared prefixes (counted in the prompt length; a
    drawn prompt shorter than the prefix is lengthened to prefix + 1).
    """

    num_requests: int = ranged(low=1, high=MAX_REQUESTS)
    request_rate: float = ranged(low=MIN_RATE, high=MAX_RATE, special=ALL_AT_ONCE)
    prompt_len: LengthDist
    output_len: LengthDist
    seed: int = ranged(0, low=0, high=INT64_MAX)
    burstiness: float = ranged(1.0, low=0.01, high=100.0)
    mode: str = "fixed"
    max_tokens: int | None = ranged(None, low=1, high=MAX_GEN_TOKENS)
    vocab_size: int = ranged(32000, low=16, high=MAX_TOKENS)
    eos_token_id: int = ranged(DEFAULT_EOS_TOKEN_ID, low=0, high="vocab_size", high_open=True)
    shared_prefix_len: int = ranged(0, low=0, high=MAX_GEN_TOKENS)
    num_prefix_groups: int = ranged(1, low=1, high=2**16)

    def __post_init__(self) -> None:
        bad = partial(field_error, self)

        if self.num_requests < 0:
            raise bad("num_requests", "must be >= 0")
        check_rate("workload", self.request_rate, self.burstiness)
        if self.mode not in MODES:
            raise bad("mode", f"valid: {', '.join(MODES)}")
        if self.mode == "eos" and (self.max_tokens is None or self.max_tokens < 1):
            raise bad("max_tokens", "mode 'eos' needs a positive max_tokens cap")
        if self.vocab_size < 16:
            raise bad("vocab_size", "must be at least 16")
        if self.shared_prefix_len < 0:
            raise bad("shared_prefix_len", "must be >= 0")
        if self.num_prefix_groups < 1:
            raise bad("num_prefix_groups", "must be at least 1")


def synthetic_from_config(cfg: Mapping[str, Any], seed: int | None = None) -> SyntheticWorkload:
    """Build a `SyntheticWorkload` from a config mapping (`name` is ignored)."""
    return parse_params(SyntheticWorkload, cfg, seed)


def synthetic_stream(w: SyntheticWorkload) -> RequestStream:
    """The requests `r0 .. r{n-1}` of a synthetic workload, in arrival order, built lazily
    (arrivals and lengths are drawn up front; each prompt when its request is pulled)."""
    s_arr, s_len, s_tok, s_pre = np.random.SeedSequence(w.seed).spawn(4)
    n = w.num_requests
    arrivals = arrival_times(np.random.default_rng(s_arr), n, w.request_rate, w.burstiness)

    def make() -> Iterator[Request]:
        rng_len = np.random.default_rng(s_len)
        prompt_lens = w.prompt_len.sample(rng_len, n)
        output_lens = w.output_len.sample(rng_len, n)
        rng_tok = np.random.default_rng(s_tok)
        low = LOW_TOKEN_ID
        prefixes: list[list[int]] = []
        groups = np.zeros(n, dtype=np.int64)
        if w.shared_prefix_len > 0:
            rng_pre = np.random.default_rng(s_pre)
            prefixes = [rng_pre.integers(low, w.vocab_size, size=w.shared_prefix_len).tolist()
                        for _ in range(w.num_prefix_groups)]
            groups = rng_pre.integers(0, w.num_prefix_groups, size=n)
        for i in range(n):
            plen = int(prompt_lens[i])
            olen = int(output_lens[i])
            if prefixes:
                plen = max(plen, w.shared_prefix_len + 1)
                prompt = prefixes[int(groups[i])] + random_tokens(
                    rng_tok, plen - w.shared_prefix_len, w.vocab_size)
            else:
                prompt = random_tokens(rng_tok, plen, w.vocab_size)
            if w.mode == "fixed":
                max_tokens, ignore_eos = olen, True
            else:
                max_tokens, ignore_eos = int(w.max_tokens or olen), False
            yield Request(
                request_id=f"r{i}",
                prompt_token_ids=prompt,
                max_tokens=max_tokens,
                arrival_time=float(arrivals[i]),
                ignore_eos=ignore_eos,
                eos_output_len=olen,
                eos_token_id=w.eos_token_id,
            )

    return ordered_stream(n, make, np.asarray(arrivals, dtype=np.float64))


def generate_synthetic(w: SyntheticWorkload) -> list[Request]:
    """The requests `r0 .. r{n-1}` of a synthetic workload, in arrival order."""
    return list(synthetic_stream(w).make())
