"""The simulated executor: a cost model for time, a deterministic rule for tokens.

Tokens follow the conformance format (docs/CONFORMANCE.md): the token sampled for request
index `i` when its sequence holds `p` tokens (prompt plus outputs so far, i.e.
`start_pos + len(token_ids)` of a chunk with `sample` set) is
`3 + (i * 7919 + p * 104729) % 31000`, except that the token which brings the request's output
to `eos_output_len` is the request's `eos_token_id` ("EOS at the request's output length";
never when `eos_token_id` is None). The rule depends only on request
and position, so a recomputation after preemption samples the same tokens. A request with
`replay_token_ids` (a real run's outputs) samples those instead, output number k the k-th,
the rule beyond their end; the EOS at `eos_output_len` still comes first. Prefix caches then
see the real model's tokens: two requests with the same prompt share their output blocks, as
they do on the real executor.

KV swapped between device and host (`plan.swap_out` / `plan.swap_in`) costs its bytes (tokens
x the model's KV bytes per token) over the hardware's `host_link_bandwidth`, both directions
summed (copies are serialized with the forward pass), added to the step's duration.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engines.cost_model import CostModel, RooflineCostModel, padded_kv_tokens
from engines.executors.specs import HardwareSpec, ModelSpec
from schedulers.contract import DecodeRun, Request, StepPlan, StepResult

_INDEXED_ID = re.compile(r"r(\d+)")


def rule_token(index: int, seq_len: int) -> int:
    """The conformance format's token for request index `index` when its sequence holds
    `seq_len` tokens."""
    return 3 + (index * 7919 + seq_len * 104729) % 31000


# A request's rule tokens at consecutive positions step through the residues mod 31,000 by
# 104,729 % 31,000 = 11,729 (coprime with 31,000: one cycle through all of them). The cycle,
# written out once (twice over, so any run of up to 31,000 positions is one slice), turns a
# decode run's tokens into a list slice instead of a modulo per token.
_RULE_MOD = 31000
_RULE_STEP = 104729 % _RULE_MOD
_cycle: list[int] = []  # _cycle[k] = 3 + k * _RULE_STEP % _RULE_MOD, k < 2 * _RULE_MOD
_cycle_at: list[int] = []  # _cycle_at[r] = the k < _RULE_MOD with k * _RULE_STEP % _RULE_MOD == r


def rule_tokens(index: int, seq_len: int, n: int) -> list[int]:
    """`[rule_token(index, p) for p in range(seq_len, seq_len + n)]`, as one slice."""
    if n > _RULE_MOD:
        return [rule_token(index, p) for p in range(seq_len, seq_len + n)]
    if not _cycle:
        _cycle.extend(3 + k * _RULE_STEP % _RULE_MOD for k in range(2 * _RULE_MOD))
        _cycle_at.extend([0] * _RULE_MOD)
        for k in range(_RULE_MOD):
            _cycle_at[_cycle[k] - 3] = k
    k = _cycle_at[(index * 7919 + seq_len * 104729) % _RULE_MOD]
    return _cycle[k:k + n]


@dataclass(slots=True)
class _Registered:
    index: int
    prompt_len: int
    eos_output_len: int
    eos_token_id: int | None
    replay: list[int] | None = None  # the request's replay_token_ids


def _replayed(reg: _Registered, seq_len: int, n: int) -> list[int]:
    """The tokens sampled after sequence lengths `seq_len .. seq_len + n - 1` (at or past the
    prompt) of a request with replay tokens, before the EOS rule: the replayed ones, then rule
    tokens past their end."""
    assert reg.replay is not None
    k = seq_len - reg.prompt_len  # output number k + 1 is replay[k]
    if k < 0:
        raise ValueError(f"sim executor: a sample at sequence length {seq_len}, inside the "
                         f"prompt of {reg.prompt_len} tokens")
    toks = reg.replay[k:k + n]
    if len(toks) < n:
        toks += rule_tokens(reg.index, seq_len + len(toks), n - len(toks))
    return toks


def _sampled(reg: _Registered, seq_len: int, n: int) -> list[int]:
    """The tokens sampled after sequence lengths `seq_len .. seq_len + n - 1`, before the EOS
    rule: the replay where the request has one, else rule tokens."""
    return (_replayed(reg, seq_len, n) if reg.replay is not None
            else rule_tokens(reg.index, seq_len, n))


class SimExecutor:
    """Predicts each step's duration with a cost model and samples rule tokens.

    `cost_model` defaults to `RooflineCostModel(model, hardware, step_overhead_s,
    flops_efficiency, bandwidth_efficiency)` (see its docstring for the formula).
    A request's index is `i` for an id `r<i>`, else its registration order. `release`
    forgets an ended request, so memory holds only live ones.
    """

    def __init__(self, model: ModelSpec, hardware: HardwareSpec, step_overhead_s: float = 0.0,
                 flops_efficiency: float = 1.0, bandwidth_efficiency: float = 1.0,
                 cost_model: CostModel | None = None) -> None:
        self.model = model
        self.hardware = hardware
        self.cost_model: CostModel = cost_model or RooflineCostModel(
            model, hardware, step_overhead_s=step_overhead_s,
            flops_efficiency=flops_efficiency, bandwidth_efficiency=bandwidth_efficiency)
        # Count padded keys (a second pass over the chunks) only for a model that charges them.
        self._pads = self.cost_model.uses_padded_kv
        # A model that prices each chunk's shape (engines/measured_cost.py) gets the chunks.
        self._per_chunk = bool(getattr(self.cost_model, "uses_plan", False))
        self._requests: dict[str, _Registered] = {}
        self._num_registered = 0

    def register(self, request: Request) -> None:
        """Record the request's index, prompt length, EOS length and EOS token."""
        rid = request.request_id
        if rid in self._requests:
            raise ValueError(f"sim executor: request {rid!r} registered twice")
        m = _INDEXED_ID.fullmatch(rid)
        index = int(m.group(1)) if m else self._num_registered
        self._num_registered += 1
        eos_len = request.eos_output_len
        self._requests[rid] = _Registered(
            index=index,
            prompt_len=len(request.prompt_token_ids),
            eos_output_len=eos_len if eos_len is not None else request.max_tokens,
            eos_token_id=request.eos_token_id,
            replay=(list(request.replay_token_ids) if request.replay_token_ids is not None
                    else None),
        )

    def release(self, request_id: str) -> None:
        """Forget a request that has ended (the engine calls this; unknown ids are fine)."""
        self._requests.pop(request_id, None)

    def token_for(self, request_id: str, seq_len: int) -> int:
        """The token sampled for `request_id` after a chunk ending at sequence length `seq_len`."""
        try:
            r = self._requests[request_id]
        except KeyError:
            raise KeyError(f"sim executor: request {request_id!r} was never registered") from None
        # Sampling after `seq_len` tokens yields output number seq_len - prompt_len + 1.
        if r.eos_token_id is not None and seq_len - r.prompt_len + 1 == r.eos_output_len:
            return r.eos_token_id
        if r.replay is not None:
            return _replayed(r, seq_len, 1)[0]
        return rule_token(r.index, seq_len)

    def execute(self, plan: StepPlan) -> StepResult:
        """Sample every chunk with `sample` set; the duration comes from the cost model.

        One pass over the chunks computes both the tokens and the `StepShape` terms.
        """
        sampled: dict[str, int] = {}
        t = a = r = 0
        regs = self._requests
        for c in plan.chunks:
            n = len(c.token_ids)
            s = c.start_pos
            e = s + n
            t += n
            a += n * s + n * (n + 1) // 2
            r += e
            if c.sample:
                reg = regs.get(c.request_id)
                if reg is None:
                    raise KeyError(f"sim executor: request {c.request_id!r} was never "
                                   "registered")
                if reg.eos_token_id is not None and e - reg.prompt_len + 1 == reg.eos_output_len:
                    sampled[c.request_id] = reg.eos_token_id
                elif reg.replay is not None:
                    sampled[c.request_id] = _replayed(reg, e, 1)[0]
                else:
                    sampled[c.request_id] = 3 + (reg.index * 7919 + e * 104729) % 31000
        if not plan.chunks:
            seconds = 0.0
        elif self._per_chunk:
            seconds = self.cost_model.plan_seconds(plan.chunks)  # type: ignore[attr-defined]
        elif self._pads:
            seconds = self.cost_model.seconds(t, a, r, len(plan.chunks),
                                              padded_kv_tokens(plan.chunks))
        else:
            seconds = self.cost_model.seconds(t, a, r, len(plan.chunks))
        if not (plan.swap_out or plan.swap_in):
            return StepResult(sampled, seconds)
        per_token = self.model.kv_bytes_per_token
        out_bytes = sum(op.num_tokens for op in plan.swap_out) * per_token
        in_bytes = sum(op.num_tokens for op in plan.swap_in) * per_token
        swap_s = (out_bytes + in_bytes) / self.hardware.host_link_bandwidth
        return StepResult(sampled, seconds + swap_s, swap_s, out_bytes, in_bytes)

    # --- decode runs (DESIGN.md, "Decode runs") -------------------------------------------
    def decode_run_limit(self, run: DecodeRun) -> int:
        """How many leading steps of `run` may run: up to and including the first that samples
        a stop token (EOS at a request's output length, or a rule token equal to its
        `eos_token_id`)."""
        k = run.max_steps
        regs = self._requests
        for rid, e in zip(run.request_ids, run.seq_lens):
            reg = regs[rid]
            eos = reg.eos_token_id
            if eos is None:
                continue
            # step j samples after e + j tokens: output number e + j - prompt_len + 1
            j_eos = reg.eos_output_len + reg.prompt_len - 1 - e
            if 0 <= j_eos < k:
                k = j_eos + 1
            if reg.replay is not None or 3 <= eos < 31003:  # a sampled token could equal it
                toks = _sampled(reg, e, k)
                for j in range(k):
                    if toks[j] == eos:
                        k = j + 1
                        break
        return k

    def decode_run_tokens(self, run: DecodeRun, num_steps: int) -> list[list[int]]:
        """Each request's sampled tokens over the first `num_steps` steps of `run` (within
        `decode_run_limit`: only the last may be a stop token), as `execute` samples them."""
        regs = self._requests
        out: list[list[int]] = []
        for rid, e in zip(run.request_ids, run.seq_lens):
            reg = regs[rid]
            toks = _sampled(reg, e, num_steps)
            if (reg.eos_token_id is not None
                    and e + num_steps - 1 - reg.prompt_len + 1 == reg.eos_output_len):
                toks[-1] = reg.eos_token_id
            out.append(toks)
        return out

    def decode_step_seconds(self, num_seqs: int, seq_len_sum: int, seq_len_max: int) -> float:
        """The duration `execute` gives a step of `num_seqs` one-token decode chunks whose
        sequence lengths (after the step) sum to `seq_len_sum`, the longest `seq_len_max`."""
        if self._pads:  # one group, padded (to the longest) unless every length is equal
            padded = num_seqs * seq_len_max
            return self.cost_model.seconds(num_seqs, seq_len_sum, seq_len_sum, num_seqs,
                                           padded if padded != seq_len_sum else 0)
        return self.cost_model.seconds(num_seqs, seq_len_sum, seq_len_sum, num_seqs)
