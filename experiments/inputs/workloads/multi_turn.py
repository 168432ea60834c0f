"""Multi-turn conversations whose prompts grow a shared history.

Conversations start at Poisson (or gamma) arrivals of `conversation_rate` per second. Each has
a drawn number of turns; turn k's prompt is the conversation's history (an optional system
prompt shared by every conversation, then every earlier user message and answer) followed by
a new user message. The next turn arrives an exponential think time (mean `turn_gap_s`) after
the previous one. Earlier answers are written into the history as the simulated executor
produces them (`tokens.sim_answer`), so a prefix cache can hold the whole history; on the real
executor only the user messages would match.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from experiments.inputs.workloads.arrivals import arrival_times, check_rate
from experiments.inputs.workloads.field_error import field_error
from experiments.inputs.workloads.lengths import LengthDist
from experiments.inputs.workloads.parse import parse_params
from experiments.inputs.workloads.tokens import random_tokens, sim_answer
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
class MultiTurnWorkload:
    """Parameters of the multi-turn generator (see the module docstring).

    `turns`, `user_len` and `output_len` are length distributions (turns per conversation,
    tokens per user message, tokens per answer). `max_context_len` ends a conversation before
    a turn whose prompt plus answer would exceed it. `mode` as in the synthetic generator.
    """

    # every turn is built up front (a turn's prompt holds its conversation's history)
    num_conversations: int = ranged(low=1, high=10**5)
    conversation_rate: float = ranged(low=MIN_RATE, high=MAX_RATE, special=ALL_AT_ONCE)
    turns: LengthDist
    user_len: LengthDist
    output_len: LengthDist
    system_prompt_len: int = ranged(0, low=0, high=MAX_GEN_TOKENS)
    turn_gap_s: float = ranged(10.0, low=0.0, high=1e6)
    burstiness: float = ranged(1.0, low=0.01, high=100.0)
    max_context_len: int | None = ranged(None, low=2, high=MAX_GEN_TOKENS)
    mode: str = "fixed"
    max_tokens: int | None = ranged(None, low=1, high=MAX_GEN_TOKENS)
    seed: int = ranged(0, low=0, high=INT64_MAX)
    vocab_size: int = ranged(32000, low=16, high=MAX_TOKENS)
    eos_token_id: int = ranged(DEFAULT_EOS_TOKEN_ID, low=0, high="vocab_size", high_open=True)

    def __post_init__(self) -> None:
        bad = partial(field_error, self)

        if self.num_conversations < 0:
            raise bad("num_conversations", "must be >= 0")
        check_rate("workload", self.conversation_rate, self.burstiness)
        if self.system_prompt_len < 0:
            raise bad("system_prompt_len", "must be >= 0")
        if self.turn_gap_s < 0:
            raise bad("turn_gap_s", "must be >= 0")
        if self.max_context_len is not None and self.max_context_len < 2:
            raise bad("max_context_len", "must be at least 2")
        if self.mode not in ("fixed", "eos"):
            raise bad("mode", "valid: fixed, eos")
        if self.mode == "eos" and (self.max_tokens is None or self.max_tokens < 1):
            raise bad("max_tokens", "mode 'eos' needs a positive max_tokens cap")


def generate_multi_turn(w: MultiTurnWorkload) -> list[Request]:
    """Every turn of every conversation as a request (`r0 ..` in conversation order, each
    conversation's turns in order), sorted by arrival."""
    s_arr, s_len, s_gap, s_tok = np.random.SeedSequence(w.seed).spawn(4)
    starts = arrival_times(np.random.default_rng(s_arr), w.num_conversations,
                           w.conversation_rate, w.burstiness)
    rng_len = np.random.default_rng(s_len)
    rng_gap = np.random.default_rng(s_gap)
    rng_tok = np.random.default_rng(s_tok)
    n_turns = w.turns.sample(rng_len, w.num_conversations)
    system = random_tokens(rng_tok, w.system_prompt_len, w.vocab_size)
    fixed = w.mode == "fixed"
    reqs: list[Request] = []
    for c in range(w.num_conversations):
        history = list(system)
        t = float(starts[c])
        k = int(n_turns[c])
        user_lens = w.user_len.sample(rng_len, k)
        out_lens = w.output_len.sample(rng_len, k)
        gaps = rng_gap.exponential(w.turn_gap_s, size=k) if w.turn_gap_s > 0 else np.zeros(k)
        for j in range(k):
            prompt = history + random_tokens(rng_tok, int(user_lens[j]), w.vocab_size)
            olen = int(out_lens[j])
            if w.max_context_len is not None and len(prompt) + olen > w.max_context_len:
                break
            i = len(reqs)
            reqs.append(Request(
                request_id=f"r{i}",
                prompt_token_ids=prompt,
                max_tokens=olen if fixed else int(w.max_tokens or olen),
                arrival_time=t,
                ignore_eos=fixed,
                eos_output_len=olen,
                eos_token_id=w.eos_token_id,
            ))
            # The answer as the executor gives it: cut at the cap, EOS only when reached.
            got = olen if fixed else min(olen, int(w.max_tokens or olen))
            eos = w.eos_token_id if got == olen else None
            history = prompt + sim_answer(i, len(prompt), got, eos)
            t += float(gaps[j])
    reqs.sort(key=lambda r: r.arrival_time)
    return reqs


def multi_turn_from_config(cfg: Mapping[str, Any], seed: int | None = None) -> list[Request]:
    """Build the workload of a `name: multi_turn` config mapping."""
    return generate_multi_turn(parse_params(MultiTurnWorkload, cfg, seed))
