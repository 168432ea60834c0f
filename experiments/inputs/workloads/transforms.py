"""Transformations of a replayed trace: which requests, how fast, how long their outputs.

Applied in this order by `select_records` (`apply_transforms`: just the records): a time
window on the trace's own clock and/or the first N requests, a limit on prompt length (drop or
clip), then rate scaling (arrival gaps divided by `rate_scale`, the first kept request at t=0).
Every request a step leaves out is counted by reason (`Selection.dropped`: "time_window",
"max_requests", "max_input_len") and logged, so that a run can say what it did not offer.
`output_spec` applies a `max_tokens` policy to each recorded output length.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import partial

from experiments.inputs.traces import TraceRecord
from experiments.inputs.workloads.field_error import field_error
from schedulers.config_range import (
    INT64_MAX,
    MAX_GEN_TOKENS,
    MAX_TOKENS,
    ranged,
)

log = logging.getLogger(__name__)

MAX_TOKENS_POLICIES = ("trace", "trace_eos", "fixed", "cap_eos")
LONG_INPUT_POLICIES = ("drop", "clip")
# The most realisations of one config (workload.realization): beyond it a sweep is a mistake.
MAX_REALIZATION = 1_000_000


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayOptions:
    """What every replayed workload shares (see the module docstring).

    `time_window` [start, end) keeps requests whose trace arrival falls inside it (seconds
    from the trace's first request); `max_requests` then keeps the first N. `max_input_len`
    with `long_inputs` drops or clips longer prompts. `rate_scale` > 1 compresses the arrival
    gaps (more load). `max_tokens_policy` and `max_tokens`: see `output_spec`.
    """

    seed: int = ranged(0, low=0, high=INT64_MAX)
    # k > 0: the k-th disjoint window of the trace (select_records)
    realization: int = ranged(0, low=0, high=MAX_REALIZATION)
    time_window: list[float] | None = ranged(None, low=0.0, high=1e10)  # each of [start, end]
    max_requests: int | None = ranged(None, low=1, high=INT64_MAX)
    rate_scale: float = ranged(1.0, low=1e-6, high=1e6)
    max_input_len: int | None = ranged(None, low=1, high=MAX_TOKENS)
    long_inputs: str = "drop"
    max_tokens_policy: str = "trace"
    max_tokens: int | None = ranged(None, low=1, high=MAX_GEN_TOKENS)
    vocab_size: int = ranged(32000, low=16, high=MAX_TOKENS)
    eos_token_id: int = ranged(2, low=0, high="vocab_size", high_open=True)

    def __post_init__(self) -> None:
        bad = partial(field_error, self)

        if isinstance(self.realization, bool) or not isinstance(self.realization, int) \
                or self.realization < 0:
            raise bad("realization", "must be an integer >= 0")
        w = self.time_window
        if w is not None and (len(w) != 2 or not w[0] < w[1] or w[0] < 0):
            raise bad("time_window", "must be [start, end] seconds with 0 <= start < end")
        if self.max_requests is not None and self.max_requests < 1:
            raise bad("max_requests", "must be at least 1 (or null for all)")
        if not self.rate_scale > 0:
            raise bad("rate_scale", "must be positive")
        if self.max_input_len is not None and self.max_input_len < 1:
            raise bad("max_input_len", "must be at least 1 (or null for no limit)")
        if self.long_inputs not in LONG_INPUT_POLICIES:
            raise bad("long_inputs", f"valid: {', '.join(LONG_INPUT_POLICIES)}")
        if self.max_tokens_policy not in MAX_TOKENS_POLICIES:
            raise bad("max_tokens_policy", f"valid: {', '.join(MAX_TOKENS_POLICIES)}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise bad("max_tokens", "must be at least 1")
        if self.max_tokens_policy in ("fixed", "cap_eos") and self.max_tokens is None:
            raise bad("max_tokens", f"max_tokens_policy={self.max_tokens_policy!r} needs a "
                      "max_tokens cap")
        if self.vocab_size < 16:
            raise bad("vocab_size", "must be at least 16")


@dataclass(frozen=True, slots=True)
class Selection:
    """The records a replay offers, and what the transforms left out: `dropped` maps a
    reason (the option that dropped them) to a count, `clipped` counts prompts cut to
    `max_input_len`, `source_count` is the number of records before any transform."""

    records: list[TraceRecord]
    source_count: int
    dropped: dict[str, int] = field(default_factory=dict)
    clipped: int = 0


def select_records(records: Sequence[TraceRecord], opts: ReplayOptions) -> Selection:
    """Window, first N, prompt-length limit and rate scaling, in that order (see the module
    docstring), counting and logging what each step leaves out. Raises ValueError when
    nothing is left."""
    out = list(records)
    dropped: dict[str, int] = {}

    def keep(reason: str, kept: list[TraceRecord]) -> list[TraceRecord]:
        if len(kept) < len(out):
            dropped[reason] = len(out) - len(kept)
        return kept

    k = opts.realization
    if opts.time_window is not None:
        lo, hi = opts.time_window
        lo, hi = lo + k * (hi - lo), hi + k * (hi - lo)  # realisation k: the k-th window
        out = keep("time_window", [r for r in out if lo <= r.arrival_s < hi])
        if k and not out:
            raise ValueError(f"workload.realization={k}: its window [{lo:g}, {hi:g}) s "
                             f"(time_window={opts.time_window!r} shifted {k} times its "
                             "length) holds no request of the trace")
        if opts.max_requests is not None:
            out = keep("max_requests", out[:opts.max_requests])
    elif opts.max_requests is not None:
        n = opts.max_requests
        if k and len(out) < (k + 1) * n:
            raise ValueError(f"workload.realization={k}: the k-th block of max_requests={n} "
                             f"needs trace records {k * n} to {(k + 1) * n - 1}, the trace "
                             f"has {len(out)}: use fewer realisations or fewer requests")
        out = keep("max_requests", out[k * n:(k + 1) * n])
    elif k:
        raise ValueError(f"workload.realization={k}: a trace replay's realisations are "
                         "disjoint windows of the trace; set workload.max_requests (blocks "
                         "of that many requests) or workload.time_window (windows of that "
                         "length): the whole trace is one window")
    clipped = 0
    if opts.max_input_len is not None:
        cap = opts.max_input_len
        if opts.long_inputs == "drop":
            out = keep("max_input_len", [r for r in out if r.input_length <= cap])
        else:
            clipped = sum(r.input_length > cap for r in out)
            out = [r if r.input_length <= cap else replace(r, input_length=cap) for r in out]
    _log_selection(opts, len(records), len(out), dropped, clipped)
    if not out:
        raise ValueError(f"workload: no request left after time_window={opts.time_window!r}, "
                         f"max_requests={opts.max_requests!r}, "
                         f"max_input_len={opts.max_input_len!r}")
    t0 = out[0].arrival_s
    scale = opts.rate_scale
    return Selection([replace(r, arrival_s=(r.arrival_s - t0) / scale) for r in out],
                     len(records), dropped, clipped)


def apply_transforms(records: Sequence[TraceRecord], opts: ReplayOptions
                     ) -> list[TraceRecord]:
    """The records `select_records` keeps."""
    return select_records(records, opts).records


def _log_selection(opts: ReplayOptions, n_in: int, n_out: int, dropped: dict[str, int],
                   clipped: int) -> None:
    """Say what the transforms left out: a warning for prompts dropped or clipped by
    length (a default can do it unasked), info for the window and the first-N cut."""
    what = {"time_window": f"outside time_window={opts.time_window!r}",
            "max_requests": f"after the first max_requests={opts.max_requests}",
            "max_input_len": f"with prompts longer than max_input_len={opts.max_input_len} "
                             "(long_inputs=drop)"}
    for reason, n in dropped.items():
        level = logging.WARNING if reason == "max_input_len" else logging.INFO
        log.log(level, "workload: dropped %d requests %s (%d of %d records offered)", n,
                what[reason], n_out, n_in)
    if clipped:
        log.warning("workload: clipped %d prompts to max_input_len=%d tokens (long_inputs=clip)",
                    clipped, opts.max_input_len)


@dataclass(frozen=True, slots=True)
class OutputSpec:
    """What a request asks for and what it gets: the client's `max_tokens`, the output length
    at which the model emits EOS, and whether EOS is ignored (fixed-length benchmarks)."""

    max_tokens: int
    eos_output_len: int
    ignore_eos: bool


def output_spec(length: int, policy: str, cap: int | None) -> OutputSpec:
    """Apply a `max_tokens` policy to a recorded output length.

    trace:   max_tokens = the recorded length (clipped to `cap` when one is set), EOS ignored:
             every request produces exactly that many tokens and the scheduler knows it.
    trace_eos: the same lengths, but EOS is not ignored: a scheduler that treats ignore_eos
             requests specially (SGLang reserves their whole output) estimates instead.
    fixed:   max_tokens = `cap` for every request, EOS ignored: each produces `cap` tokens.
    cap_eos: max_tokens = `cap`, the model emits EOS at min(recorded length, cap); the
             scheduler sees only the cap (what a chat client sends).
    """
    if policy in ("trace", "trace_eos"):
        n = min(length, cap) if cap is not None else length
        return OutputSpec(n, n, policy == "trace")
    if cap is None:
        raise ValueError(f"max_tokens_policy={policy!r} needs max_tokens (the cap)")
    if policy == "fixed":
        return OutputSpec(cap, cap, True)
    if policy == "cap_eos":
        return OutputSpec(cap, min(length, cap), False)
    raise ValueError(f"max_tokens_policy={policy!r}: unknown; valid: "
                     f"{', '.join(MAX_TOKENS_POLICIES)}")
