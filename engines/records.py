"""Per-request and per-step records of an engine run (DESIGN.md, "Metrics").

`Recorder` keeps plain Python lists indexed by request number while the engine runs and
builds two Arrow tables at the end (`REQUEST_SCHEMA`, `STEP_SCHEMA`). Everything per step is
O(chunks in the step). Subclass it to observe steps (call `super()` first).

Request columns:
    request_id, arrival_time, first_scheduled_time, first_token_time, finish_time (seconds on
    the virtual clock; NaN when it never happened), finish_reason ("stop", "length", "abort",
    "rejected" (the scheduler can never serve it), "rejected_503" (refused at the front door:
    the queue was full, engines/admission.py), or "" when unfinished), finish_detail (the
    reason text of an abort or a rejection), prompt_len, max_tokens, eos_output_len,
    output_len (tokens committed),
    num_preemptions (plans whose `preempted` named it), victim (num_preemptions > 0),
    num_computed_tokens (all positions computed, recomputation included),
    num_recomputed_tokens (positions computed again that this request had computed before),
    prefix_hit_tokens (start_pos of each admitted chunk, less the tokens swapped in for it in
    the same step: the prefix-cache hit per admission), num_swaps (times its KV was swapped
    out to the host),
    computed_at_preemption (tokens it had computed when each preemption happened),
    token_times (the time of every output token).
Step columns:
    step, start_time, duration_s, num_scheduled_reqs, num_tokens, num_prefill_tokens,
    num_decode_tokens, num_decode_reqs, num_preempted, num_aborted, num_finished,
    kv_used_tokens, kv_cached_tokens, num_running, num_waiting (from `stats()` after the
    step), forward_mode, then the swap columns (`preemption_mode=swap`; zero otherwise):
    num_swap_out, num_swap_in, num_swap_fallbacks (victims recomputed because the host pool
    was full), swap_out_tokens, swap_in_tokens, swap_out_bytes, swap_in_bytes, swap_s (the
    part of duration_s spent copying, as the executor reports it).
A chunk is decode when it has one token, samples, and computes the sequence's last position,
which is an output position (start_pos == seq_len - 1 >= prompt_len); every other token is
prefill.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from engines.admission import OVERLOADED
from engines.step_columns import StepColumns
from schedulers.contract import (
    DecodeRun,
    DecodeRunStats,
    Request,
    SchedulerStats,
    StepEvents,
    StepPlan,
    StepResult,
)

NAN = math.nan

REQUEST_SCHEMA = pa.schema([
    ("request_id", pa.string()),
    ("arrival_time", pa.float64()),
    ("first_scheduled_time", pa.float64()),
    ("first_token_time", pa.float64()),
    ("finish_time", pa.float64()),
    ("finish_reason", pa.string()),
    ("finish_detail", pa.string()),
    ("prompt_len", pa.int64()),
    ("max_tokens", pa.int64()),
    ("eos_output_len", pa.int64()),
    ("output_len", pa.int64()),
    ("num_preemptions", pa.int64()),
    ("victim", pa.bool_()),
    ("num_computed_tokens", pa.int64()),
    ("num_recomputed_tokens", pa.int64()),
    ("prefix_hit_tokens", pa.list_(pa.int64())),
    ("computed_at_preemption", pa.list_(pa.int64())),
    ("token_times", pa.list_(pa.float64())),
    ("num_swaps", pa.int64()),
])

STEP_SCHEMA = pa.schema([
    ("step", pa.int64()),
    ("start_time", pa.float64()),
    ("duration_s", pa.float64()),
    ("num_scheduled_reqs", pa.int64()),
    ("num_tokens", pa.int64()),
    ("num_prefill_tokens", pa.int64()),
    ("num_decode_tokens", pa.int64()),
    ("num_decode_reqs", pa.int64()),
    ("num_preempted", pa.int64()),
    ("num_aborted", pa.int64()),
    ("num_finished", pa.int64()),
    ("kv_used_tokens", pa.int64()),
    ("kv_cached_tokens", pa.int64()),
    ("num_running", pa.int64()),
    ("num_waiting", pa.int64()),
    ("forward_mode", pa.string()),
    ("num_swap_out", pa.int64()),
    ("num_swap_in", pa.int64()),
    ("num_swap_fallbacks", pa.int64()),
    ("swap_out_tokens", pa.int64()),
    ("swap_in_tokens", pa.int64()),
    ("swap_out_bytes", pa.int64()),
    ("swap_in_bytes", pa.int64()),
    ("swap_s", pa.float64()),
])

# The step fields that vary within a decode run (the others are constant over it).
STEP_FIELDS_PER_STEP = ("step", "start_time", "duration_s", "num_finished", "kv_used_tokens",
                        "kv_cached_tokens", "num_running", "num_waiting")

FINISH_REASONS = ("stop", "length", "abort", "rejected", OVERLOADED)


def _list_column(values: Sequence[array], typ: pa.DataType, np_dtype: type) -> pa.Array:
    lengths = np.fromiter((len(v) for v in values), dtype=np.int64, count=len(values))
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > np.iinfo(np.int32).max:
        raise OverflowError("records: a list column holds more than 2**31 values")
    joined = array("d" if np_dtype is np.float64 else "q")
    for v in values:
        joined.extend(v)  # same type code: a copy of the buffer
    flat: np.ndarray = np.frombuffer(joined, dtype=np_dtype)
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)),
                                    pa.array(flat, type=typ.value_type), type=typ)


class Recorder:
    """Collects per-request and per-step records for one engine run."""

    def __init__(self) -> None:
        self._index: dict[str, int] = {}
        self._live: dict[int, None] = {}
        self._steps = StepColumns(STEP_SCHEMA, STEP_FIELDS_PER_STEP)

    # --- setup -------------------------------------------------------------------------
    def start(self, requests: Sequence[Request]) -> None:
        """Allocate one row per request, in the given order (the engine's arrival order)."""
        n = len(requests)
        self._ids = [r.request_id for r in requests]
        self._index = {rid: i for i, rid in enumerate(self._ids)}
        if len(self._index) != n:
            dups = sorted(rid for rid, k in Counter(self._ids).items() if k > 1)
            raise ValueError(f"records: duplicate request ids: {', '.join(dups[:10])}")
        self._arrival = [float(r.arrival_time) for r in requests]
        self._prompt_len = [len(r.prompt_token_ids) for r in requests]
        self._max_tokens = [r.max_tokens for r in requests]
        self._eos_len = [r.eos_output_len if r.eos_output_len is not None else r.max_tokens
                         for r in requests]
        self._first_sched = [NAN] * n
        self._first_token = [NAN] * n
        self._finish = [NAN] * n
        self._reason = [""] * n
        self._detail = [""] * n
        self._nout = [0] * n
        self._npre = [0] * n
        self._computed = [0] * n
        self._recomputed = [0] * n
        self._high = [0] * n  # highest position ever computed, exclusive
        self._cur = [0] * n  # end of the last chunk computed since (re)admission
        self._hits = [array("q") for _ in range(n)]
        self._at_pre = [array("q") for _ in range(n)]
        self._times = [array("d") for _ in range(n)]
        self._nswaps = [0] * n

    def index_of(self, request_id: str) -> int:
        try:
            return self._index[request_id]
        except KeyError:
            raise KeyError(f"records: unknown request id {request_id!r}") from None

    # --- events ------------------------------------------------------------------------
    def on_admit(self, i: int) -> None:
        """Request `i` was accepted by the scheduler."""
        self._live[i] = None

    def on_reject(self, i: int, reason: str, now: float) -> None:
        """Request `i` was refused by `add_request` with `reason`."""
        self._end(i, "rejected", reason, now)

    def on_overload(self, i: int, detail: str, now: float) -> None:
        """Request `i` was refused with 503 at the front door (admission limits)."""
        self._end(i, OVERLOADED, detail, now)

    def _end(self, i: int, reason: str, detail: str, now: float) -> None:
        if self._reason[i]:
            return  # the first report stands (an abort may be reported by plan and events)
        self._reason[i] = reason
        self._detail[i] = detail
        self._finish[i] = now
        self._live.pop(i, None)

    def on_step(self, plan: StepPlan, result: StepResult, events: StepEvents,
                start: float, end: float, stats: SchedulerStats) -> None:
        """Record one committed step that ran from `start` to `end` on the virtual clock."""
        index = self._index
        first_sched, high, cur = self._first_sched, self._high, self._cur
        prompt_len, nout = self._prompt_len, self._nout
        computed, recomputed = self._computed, self._recomputed
        prefill = decode = 0
        swapped_in: dict[str, int] = {}
        swap_out_tokens = swap_in_tokens = 0
        if plan.swap_out or plan.swap_in:
            for op in plan.swap_out:
                self._nswaps[index[op.request_id]] += 1
                swap_out_tokens += op.num_tokens
            for op in plan.swap_in:
                swapped_in[op.request_id] = op.num_tokens
                swap_in_tokens += op.num_tokens
        for rid in plan.preempted:
            i = index[rid]
            self._npre[i] += 1
            self._at_pre[i].append(cur[i])
            cur[i] = 0
        for c in plan.chunks:
            i = index[c.request_id]
            n = len(c.token_ids)
            s = c.start_pos
            e = s + n
            if first_sched[i] != first_sched[i]:  # NaN: first time scheduled
                first_sched[i] = start
            if c.admitted:
                self._hits[i].append(s - swapped_in.get(c.request_id, 0) if swapped_in else s)
            hi = high[i]
            if s < hi:
                recomputed[i] += (e if e < hi else hi) - s
            if e > hi:
                high[i] = e
            cur[i] = e
            computed[i] += n
            if n == 1 and c.sample and s >= prompt_len[i] and s == prompt_len[i] + nout[i] - 1:
                decode += 1
            else:
                prefill += n
        if events.new_token_ids:
            first_token, times = self._first_token, self._times
            for rid, toks in events.new_token_ids.items():
                k = len(toks)
                if k:
                    i = index[rid]
                    if first_token[i] != first_token[i]:  # NaN: first token
                        first_token[i] = end
                    nout[i] += k
                    if k == 1:
                        times[i].append(end)
                    else:
                        times[i].extend([end] * k)
        for rid, why in plan.aborted:
            self._end(index[rid], "abort", why, end)
        for rid, why in events.finished:
            self._end(index[rid], why, "", end)
        self._steps.append((
            len(self._steps), start, end - start, len(plan.chunks), prefill + decode,
            prefill, decode, decode, len(plan.preempted), len(plan.aborted),
            len(events.finished), stats.kv_used_tokens, stats.kv_cached_tokens,
            stats.num_running, stats.num_waiting, plan.forward_mode,
            len(plan.swap_out), len(plan.swap_in), len(plan.swap_fallbacks), swap_out_tokens,
            swap_in_tokens, result.swap_out_bytes, result.swap_in_bytes, result.swap_s,
        ))

    def on_decode_run(self, run: DecodeRun, starts: Sequence[float], ends: Sequence[float],
                      stats: DecodeRunStats) -> None:
        """Record a committed decode run: step `j` ran from `starts[j]` to `ends[j]`, and every
        request of `run` computed one position and got one token in each step (what `on_step`
        records for those steps one by one)."""
        k = len(starts)
        index, high = self._index, self._high
        computed, recomputed = self._computed, self._recomputed
        first_token, nout, times = self._first_token, self._nout, self._times
        for rid, e in zip(run.request_ids, run.seq_lens, strict=True):
            i = index[rid]
            s = e - 1  # the first step's position; the run computes s .. s + k - 1
            hi = high[i]
            if s < hi:
                recomputed[i] += min(s + k, hi) - s
            if s + k > hi:
                high[i] = s + k
            self._cur[i] = s + k
            computed[i] += k
            if first_token[i] != first_token[i]:  # NaN: first token
                first_token[i] = ends[0]
            nout[i] += k
            times[i].extend(ends)
        for rid, why in stats.finished:
            self._end(index[rid], why, "", ends[-1])
        b = len(run.request_ids)
        first = len(self._steps)
        running: int | list[int] = stats.num_running
        num_finished: int | list[int] = 0
        if stats.finished:
            num_finished = [0] * (k - 1) + [len(stats.finished)]
            after = stats.num_running if stats.num_running_after is None \
                else stats.num_running_after
            running = [stats.num_running] * (k - 1) + [after]
        self._steps.extend(k, (
            range(first, first + k), starts, [e - s for s, e in zip(starts, ends, strict=True)],
            b, b, 0, b, b, 0, 0, num_finished, stats.kv_used_tokens, stats.kv_cached_tokens,
            running, stats.num_waiting, run.forward_mode, 0, 0, 0, 0, 0, 0, 0, 0.0))

    # --- queries and output ------------------------------------------------------------
    def live_ids(self) -> list[str]:
        """Ids of accepted requests that have not finished, in arrival order."""
        return [self._ids[i] for i in sorted(self._live)]

    @property
    def num_steps(self) -> int:
        return len(self._steps)

    def requests_table(self) -> pa.Table:
        """The per-request records as an Arrow table (`REQUEST_SCHEMA`)."""
        nout, npre = self._nout, self._npre
        cols = [
            pa.array(self._ids, pa.string()),
            pa.array(self._arrival, pa.float64()),
            pa.array(self._first_sched, pa.float64()),
            pa.array(self._first_token, pa.float64()),
            pa.array(self._finish, pa.float64()),
            pa.array(self._reason, pa.string()),
            pa.array(self._detail, pa.string()),
            pa.array(self._prompt_len, pa.int64()),
            pa.array(self._max_tokens, pa.int64()),
            pa.array(self._eos_len, pa.int64()),
            pa.array(nout, pa.int64()),
            pa.array(npre, pa.int64()),
            pa.array([p > 0 for p in npre], pa.bool_()),
            pa.array(self._computed, pa.int64()),
            pa.array(self._recomputed, pa.int64()),
            _list_column(self._hits, pa.list_(pa.int64()), np.int64),
            _list_column(self._at_pre, pa.list_(pa.int64()), np.int64),
            _list_column(self._times, pa.list_(pa.float64()), np.float64),
            pa.array(self._nswaps, pa.int64()),
        ]
        return pa.Table.from_arrays(cols, schema=REQUEST_SCHEMA)

    def steps_table(self) -> pa.Table:
        """The per-step records as an Arrow table (`STEP_SCHEMA`)."""
        return self._steps.table()
