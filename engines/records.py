"""Per-request and per-step records of an engine run (DESIGN.md, "Metrics").

`Recorder` keeps the state of each live request in one object while the engine runs; a
request's row leaves memory once it has ended (`release_ended`), in batches of Arrow record
batches that go to a sink (`engines.record_sinks`): kept in memory (`spool=None`, the
tables are built at the end, requests in arrival order) or appended to parquet files
(`spool=(requests_path, steps_path)`, requests in the order they ended). Step rows go the same
way in batches. Everything per step is O(chunks in the step). Subclass it to observe steps
(call `super()` first). Step rows are kept as segments (`engines.step_columns`: a decode run
is one segment).

The columns are declared once, below (`REQUEST_COLUMNS`, `STEP_COLUMNS`: name, Arrow type,
meaning): the schemas, the row layouts and the column list (`columns_doc`) all come from
there. Adding a metric: DESIGN.md, "Adding a metric".
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from operator import attrgetter
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from engines.admission import OVERLOADED
from engines.record_sinks import MemorySink, ParquetSink
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



class Column(NamedTuple):
    """One record column: its name, Arrow type and meaning. `attr` (request columns) is the
    attribute of the held row that holds its value; `per_step` (step columns) marks a field
    that varies within a decode run (the others are constant over one)."""

    name: str
    type: pa.DataType
    doc: str
    attr: str = ""
    per_step: bool = False


_I, _F, _S = pa.int64(), pa.float64(), pa.string()

REQUEST_COLUMNS: tuple[Column, ...] = (
    Column("request_id", _S, "the request's id", "rid"),
    Column("arrival_time", _F, "seconds on the virtual clock", "arrival"),
    Column("first_scheduled_time", _F, "first chunk's step start (NaN: never)", "first_sched"),
    Column("first_token_time", _F, "first output token's step end (NaN: never)",
           "first_token"),
    Column("finish_time", _F, "when it ended (NaN: unfinished)", "finish"),
    Column("finish_reason", _S, 'stop, length, abort, rejected (the scheduler can never serve '
           'it), rejected_503 (refused at the front door: the queue was full, '
           'engines/admission.py), or "" when unfinished', "reason"),
    Column("finish_detail", _S, "the reason text of an abort or a rejection", "detail"),
    Column("prompt_len", _I, "prompt tokens", "prompt_len"),
    Column("max_tokens", _I, "the client's output cap", "max_tokens"),
    Column("eos_output_len", _I, "the output length at which the model emits EOS", "eos_len"),
    Column("output_len", _I, "output tokens committed", "nout"),
    Column("num_preemptions", _I, "plans whose `preempted` named it", "npre"),
    Column("victim", pa.bool_(), "num_preemptions > 0", "victim"),
    Column("num_computed_tokens", _I, "all positions computed, recomputation included",
           "computed"),
    Column("num_recomputed_tokens", _I, "positions computed again that it had computed "
           "before", "recomputed"),
    Column("prefix_hit_tokens", pa.list_(_I), "start_pos of each admitted chunk, less the "
           "tokens swapped in for it in the same step: the prefix-cache hit per admission",
           "hits"),
    Column("computed_at_preemption", pa.list_(_I), "tokens it had computed when each "
           "preemption happened", "at_pre"),
    Column("token_times", pa.list_(_F), "the time of every output token", "times"),
    Column("num_swaps", _I, "times its KV was swapped out to the host", "nswaps"),
    # The E2E breakdown: every moment from arrival to finish in exactly one part, so the five
    # sum to finish_time - arrival_time (tests/test_e2e_breakdown.py). Unfinished requests:
    # the parts up to their last change of phase.
    Column("queued_s", _F, "arrival to first scheduled (or to its end when never "
           "scheduled)", "t_queued"),
    Column("prefill_s", _F, "first scheduled to first token, less the time evicted or "
           "recomputing (steps it waited between chunks included)", "t_prefill"),
    Column("decode_s", _F, "first token to finish, less the time evicted or recomputing "
           "(steps it was not scheduled included)", "t_decode"),
    Column("evicted_s", _F, "from each eviction (the evicting step's start) to its "
           "readmission (the start of the step that schedules it again)", "t_evicted"),
    Column("recompute_s", _F, "from each readmission to the end of the step whose chunk "
           "reaches the highest position it had computed (0 when the prefix cache or a "
           "swap-in restored it all)", "t_recompute"),
)

STEP_COLUMNS: tuple[Column, ...] = (
    Column("step", _I, "row number"),
    Column("start_time", _F, "seconds on the virtual clock", per_step=True),
    Column("duration_s", _F, "the step's duration (measured, or the cost model's)",
           per_step=True),
    Column("num_scheduled_reqs", _I, "requests with a chunk"),
    Column("num_tokens", _I, "tokens computed"),
    Column("num_prefill_tokens", _I, "of which prefill (every token not decode)"),
    Column("num_decode_tokens", _I, "of which decode: a chunk of one token that samples and "
           "computes the sequence's last position, an output position (start_pos == seq_len - "
           "1 >= prompt_len)"),
    Column("num_decode_reqs", _I, "decode chunks"),
    Column("num_preempted", _I, "requests preempted (vLLM) or retracted (SGLang)"),
    Column("num_aborted", _I, "requests aborted while planning"),
    Column("num_finished", _I, "requests finished by the step", per_step=True),
    Column("kv_used_tokens", _I, "slots held by live requests after the step (`stats()`)",
           per_step=True),
    Column("kv_cached_tokens", _I, "slots held only by the prefix cache", per_step=True),
    Column("num_running", _I, "running requests after the step", per_step=True),
    Column("num_waiting", _I, "waiting requests after the step", per_step=True),
    Column("forward_mode", _S, "mixed (vLLM), extend / decode (SGLang), idle"),
    # the swap columns (`preemption_mode=swap`; zero otherwise)
    Column("num_swap_out", _I, "requests whose KV went to the host"),
    Column("num_swap_in", _I, "requests whose KV came back"),
    Column("num_swap_fallbacks", _I, "victims recomputed because the host pool was full"),
    Column("swap_out_tokens", _I, "tokens copied to the host"),
    Column("swap_in_tokens", _I, "tokens copied back"),
    Column("swap_out_bytes", _I, "bytes copied to the host"),
    Column("swap_in_bytes", _I, "bytes copied back"),
    Column("swap_s", _F, "the part of duration_s spent copying, as the executor reports it"),
    # the engine loop (DESIGN.md, "Engine loops"): when the plan was made, and what was in
    # flight then; the step's result is committed at start_time + duration_s
    Column("planned_at", _F, "when the scheduler made the plan (the clock then; start_time "
           "in the synchronous loop, earlier when it waited behind a step in flight)",
           per_step=True),
    Column("in_flight", _I, "steps launched and not yet committed when the plan was made "
           "(0: synchronous; 1 in a pipelined loop's steady state)"),
)

REQUEST_SCHEMA = pa.schema([(c.name, c.type) for c in REQUEST_COLUMNS])
STEP_SCHEMA = pa.schema([(c.name, c.type) for c in STEP_COLUMNS])
# The step fields that vary within a decode run (the others are constant over it; "step" is
# the row number).
STEP_FIELDS_PER_STEP = tuple(c.name for c in STEP_COLUMNS if c.per_step)


# A step row (what StepColumns takes), built by column name: one keyword-only parameter per
# column of STEP_COLUMNS, in its order (tests/test_record_columns.py checks both); a missing,
# unknown or positional argument is a TypeError. A plain call by keyword is the cheapest way
# to build a row by name on the hot path. A per-step column takes a list over a decode run.
def step_row(
    *,
    step: Any,
    start_time: Any,
    duration_s: Any,
    num_scheduled_reqs: Any,
    num_tokens: Any,
    num_prefill_tokens: Any,
    num_decode_tokens: Any,
    num_decode_reqs: Any,
    num_preempted: Any,
    num_aborted: Any,
    num_finished: Any,
    kv_used_tokens: Any,
    kv_cached_tokens: Any,
    num_running: Any,
    num_waiting: Any,
    forward_mode: Any,
    num_swap_out: Any,
    num_swap_in: Any,
    num_swap_fallbacks: Any,
    swap_out_tokens: Any,
    swap_in_tokens: Any,
    swap_out_bytes: Any,
    swap_in_bytes: Any,
    swap_s: Any,
    planned_at: Any,
    in_flight: Any,
) -> tuple[Any, ...]:
    """One step row as a tuple in `STEP_SCHEMA` order."""
    return (step, start_time, duration_s, num_scheduled_reqs, num_tokens, num_prefill_tokens,
            num_decode_tokens, num_decode_reqs, num_preempted, num_aborted, num_finished,
            kv_used_tokens, kv_cached_tokens, num_running, num_waiting, forward_mode,
            num_swap_out, num_swap_in, num_swap_fallbacks, swap_out_tokens, swap_in_tokens,
            swap_out_bytes, swap_in_bytes, swap_s, planned_at, in_flight)


def columns_doc(title: str, columns: Sequence[Column]) -> str:
    """The columns as a docstring section: one `name (type): meaning` line each."""
    return "\n".join([f"{title}:"] + [f"    {c.name} ({c.type}): {c.doc}" for c in columns])


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


def _column_array(values: list[object], typ: pa.DataType) -> pa.Array:
    """One column of a request batch: list columns from their typed arrays' buffers."""
    if pa.types.is_list(typ):
        float_items = pa.types.is_float64(typ.value_type)
        return _list_column(values, typ,  # type: ignore[arg-type]
                            np.float64 if float_items else np.int64)
    return pa.array(values, typ)


class Launched(NamedTuple):
    """What a launched plan's step row needs when it is committed (`Recorder.on_launch`),
    and the requests whose recomputation the plan completes (their recompute time ends at
    its commit)."""

    prefill: int
    decode: int
    swap_out_tokens: int
    swap_in_tokens: int
    recomputed: list[_Row] | None


# A held request's phase (the E2E breakdown columns): which part the time since `since`
# accrues to.
QUEUED, PREFILL, DECODE, EVICTED, RECOMPUTE = 0, 1, 2, 3, 4


class _Row:
    """One request's record while it is held (from arrival until `release_ended`)."""

    __slots__ = (
        "arrival",
        "at_pre",
        "computed",
        "cur",
        "detail",
        "eos_len",
        "finish",
        "first_sched",
        "first_token",
        "high",
        "hits",
        "i",
        "max_tokens",
        "nout",
        "npre",
        "nswaps",
        "phase",
        "prompt_len",
        "reason",
        "recomputed",
        "rid",
        "since",
        "t_decode",
        "t_evicted",
        "t_prefill",
        "t_queued",
        "t_recompute",
        "times",
    )

    def __init__(self, i: int, request: Request) -> None:
        self.i = i  # arrival number
        self.rid = request.request_id
        self.arrival = float(request.arrival_time)
        self.prompt_len = len(request.prompt_token_ids)
        self.max_tokens = request.max_tokens
        self.eos_len = (request.eos_output_len if request.eos_output_len is not None
                        else request.max_tokens)
        self.first_sched = NAN
        self.first_token = NAN
        self.finish = NAN
        self.reason = ""
        self.detail = ""
        self.nout = 0
        self.npre = 0
        self.computed = 0
        self.recomputed = 0
        self.high = 0  # highest position ever computed, exclusive
        self.cur = 0  # end of the last chunk computed since (re)admission
        self.hits = array("q")
        self.at_pre = array("q")
        self.times = array("d")
        self.nswaps = 0
        self.phase = QUEUED
        self.since = self.arrival  # when the current phase began
        self.t_queued = 0.0
        self.t_prefill = 0.0
        self.t_decode = 0.0
        self.t_evicted = 0.0
        self.t_recompute = 0.0

    @property
    def victim(self) -> bool:
        return self.npre > 0

    def enter(self, phase: int, now: float) -> None:
        """Close the current phase at `now` (its time accrues to its part) and begin
        `phase`."""
        dt = now - self.since
        ph = self.phase
        if ph == DECODE:
            self.t_decode += dt
        elif ph == PREFILL:
            self.t_prefill += dt
        elif ph == EVICTED:
            self.t_evicted += dt
        elif ph == RECOMPUTE:
            self.t_recompute += dt
        else:
            self.t_queued += dt
        self.phase = phase
        self.since = now

    def served_phase(self) -> int:
        """The phase of a request being served: decode once it has its first token."""
        return PREFILL if self.first_token != self.first_token else DECODE


# A held row's values in `REQUEST_SCHEMA` order.
_row_values = attrgetter(*(c.attr for c in REQUEST_COLUMNS))


class Recorder:
    """Collects per-request and per-step records for one engine run.

    Per-request state lives in one object per request, only while the request is held:
    `release_ended()` (called by the engine between steps) moves the rows of ended requests
    into a batch, and full batches go to the sinks. `spool=None` keeps the
    batches in memory (`requests_table()` / `steps_table()`, requests in arrival order);
    `spool=(requests_path, steps_path)` streams them to two parquet files (requests in the
    order they ended), so a replay holds only its live requests and the current batches.
    """

    def __init__(self, spool: tuple[str | Path, str | Path] | None = None,
                 request_batch_rows: int = 1024, step_batch_rows: int = 16384,
                 batch_token_times: int = 1 << 18) -> None:
        if spool is None:
            self._req_sink: MemorySink | ParquetSink = MemorySink(REQUEST_SCHEMA)
            self._step_sink: MemorySink | ParquetSink = MemorySink(STEP_SCHEMA)
        else:
            self._req_sink = ParquetSink(REQUEST_SCHEMA, spool[0],
                                         use_dictionary=["finish_reason", "finish_detail"])
            self._step_sink = ParquetSink(STEP_SCHEMA, spool[1], use_dictionary=False)
        self.spooled = spool is not None
        self._request_batch_rows = request_batch_rows
        self._step_batch_rows = step_batch_rows
        self._batch_token_times = batch_token_times
        self._rows: dict[str, _Row] = {}  # held requests by id
        self._by_num: dict[int, _Row] = {}  # the same, by arrival number
        self._live: dict[int, None] = {}
        self._ended: list[_Row] = []
        self._steps = StepColumns(STEP_SCHEMA, STEP_FIELDS_PER_STEP, "step")
        self._num_steps = 0
        self._num_requests = 0
        self._row_batch: list[tuple[object, ...]] = []
        self._row_order = array("q")  # arrival number of each written row (in-memory mode)
        self._batch_times = 0
        self._closed = False
        self._req_table: pa.Table | None = None
        self._step_table: pa.Table | None = None

    # --- setup -------------------------------------------------------------------------
    def start(self, total: int | None = None) -> None:
        """The run begins; `total` is the number of requests when known (progress bars)."""

    def on_arrival(self, request: Request) -> int:
        """Open a row for `request` (in arrival order); returns its arrival number."""
        rid = request.request_id
        if rid in self._rows:
            raise ValueError(f"records: duplicate request ids: {rid} (arrival "
                             f"{request.arrival_time!r}) is still live")
        i = self._num_requests
        self._num_requests += 1
        self._rows[rid] = self._by_num[i] = _Row(i, request)
        return i

    # --- events ------------------------------------------------------------------------
    def on_admit(self, i: int) -> None:
        """Request `i` was accepted by the scheduler."""
        self._live[i] = None

    def on_reject(self, i: int, reason: str, now: float) -> None:
        """Request `i` was refused by `add_request` with `reason`."""
        self._end(self._by_num[i], "rejected", reason, now)

    def on_overload(self, i: int, detail: str, now: float) -> None:
        """Request `i` was refused with 503 at the front door (admission limits)."""
        self._end(self._by_num[i], OVERLOADED, detail, now)

    def _end(self, row: _Row, reason: str, detail: str, now: float) -> None:
        if row.reason:
            return  # the first report stands (an abort may be reported by plan and events)
        row.reason = reason
        row.detail = detail
        row.finish = now
        row.enter(row.phase, now)
        self._live.pop(row.i, None)
        self._ended.append(row)

    def on_step(self, plan: StepPlan, result: StepResult, events: StepEvents,
                start: float, end: float, stats: SchedulerStats) -> None:
        """Record one step of the synchronous loop, planned at `start` and run from `start`
        to `end` on the virtual clock: `on_launch`, then `on_commit`."""
        launched = self.on_launch(plan, start)
        self.on_commit(plan, result, events, launched, start, end, stats, start, 0)

    def on_launch(self, plan: StepPlan, start: float) -> Launched:
        """A plan starts executing at `start`: its evictions and chunks (what requests
        computed). Returns the counts its step row needs (`on_commit`)."""
        rows = self._rows
        prefill = decode = 0
        swapped_in: dict[str, int] = {}
        swap_out_tokens = swap_in_tokens = 0
        if plan.swap_out or plan.swap_in:
            for op in plan.swap_out:
                rows[op.request_id].nswaps += 1
                swap_out_tokens += op.num_tokens
            for op in plan.swap_in:
                swapped_in[op.request_id] = op.num_tokens
                swap_in_tokens += op.num_tokens
        recomputed: list[_Row] | None = None
        for rid in plan.preempted:
            row = rows[rid]
            row.npre += 1
            row.at_pre.append(row.cur)
            row.cur = 0
            row.enter(EVICTED, start)
        for c in plan.chunks:
            row = rows[c.request_id]
            n = len(c.token_ids)
            s = c.start_pos
            e = s + n
            ph = row.phase
            if ph != DECODE and ph != PREFILL:  # first scheduled, readmitted or recomputing
                if ph == QUEUED:
                    row.first_sched = start
                    row.enter(PREFILL, start)
                elif ph == EVICTED:
                    row.enter(RECOMPUTE if s < row.high else row.served_phase(), start)
                if row.phase == RECOMPUTE and e >= row.high:
                    if recomputed is None:
                        recomputed = []
                    recomputed.append(row)
            if c.admitted:
                row.hits.append(s - swapped_in.get(c.request_id, 0) if swapped_in else s)
            hi = row.high
            if s < hi:
                row.recomputed += (e if e < hi else hi) - s
            if e > hi:
                row.high = e
            row.cur = e
            row.computed += n
            plen = row.prompt_len
            # the sequence's last position: plen + nout - 1, or plen + nout when the token
            # there is still to be committed (a pipelined loop)
            if n == 1 and c.sample and s >= plen and s >= plen + row.nout - 1:
                decode += 1
            else:
                prefill += n
        return Launched(prefill, decode, swap_out_tokens, swap_in_tokens, recomputed)

    def on_commit(self, plan: StepPlan, result: StepResult, events: StepEvents,
                  launched: Launched, start: float, end: float, stats: SchedulerStats,
                  planned_at: float, in_flight: int) -> None:
        """The result of `plan` (launched at `start`, see `on_launch`) is committed at `end`:
        its tokens, finishes and aborts, and its step row."""
        rows = self._rows
        if launched.recomputed is not None:
            for done in launched.recomputed:
                if done.phase == RECOMPUTE:  # not evicted again meanwhile
                    done.enter(done.served_phase(), end)
        if events.new_token_ids:
            for rid, toks in events.new_token_ids.items():
                k = len(toks)
                if k:
                    row = rows[rid]
                    if row.first_token != row.first_token:  # NaN: first token
                        row.first_token = end
                        if row.phase == PREFILL:
                            row.enter(DECODE, end)
                    row.nout += k
                    if k == 1:
                        row.times.append(end)
                    else:
                        row.times.extend([end] * k)
        for rid, why in plan.aborted:
            held = rows.get(rid)  # None: ended and released in an earlier step
            if held is not None:
                self._end(held, "abort", why, end)
        for rid, why in events.finished:
            held = rows.get(rid)
            if held is not None:
                self._end(held, why, "", end)
        prefill, decode = launched.prefill, launched.decode
        self._add_step_row(step_row(
            step=self._num_steps, start_time=start, duration_s=end - start,
            num_scheduled_reqs=len(plan.chunks), num_tokens=prefill + decode,
            num_prefill_tokens=prefill, num_decode_tokens=decode, num_decode_reqs=decode,
            num_preempted=len(plan.preempted), num_aborted=len(plan.aborted),
            num_finished=len(events.finished), kv_used_tokens=stats.kv_used_tokens,
            kv_cached_tokens=stats.kv_cached_tokens, num_running=stats.num_running,
            num_waiting=stats.num_waiting, forward_mode=plan.forward_mode,
            num_swap_out=len(plan.swap_out), num_swap_in=len(plan.swap_in),
            num_swap_fallbacks=len(plan.swap_fallbacks),
            swap_out_tokens=launched.swap_out_tokens, swap_in_tokens=launched.swap_in_tokens,
            swap_out_bytes=result.swap_out_bytes, swap_in_bytes=result.swap_in_bytes,
            swap_s=result.swap_s, planned_at=planned_at, in_flight=in_flight,
        ))

    def on_decode_run(self, run: DecodeRun, starts: Sequence[float], ends: Sequence[float],
                      stats: DecodeRunStats, planned_at: Sequence[float] | None = None,
                      in_flight: int = 0) -> None:
        """Record a committed decode run: step `j` ran from `starts[j]` to `ends[j]`, and every
        request of `run` computed one position and got one token in each step (what `on_step`
        records for those steps one by one). In the batch-queue loop step `j` was planned at
        `planned_at[j]` with `in_flight` plans launched (default: the synchronous loop's,
        planned at its start with none)."""
        k = len(starts)
        rows = self._rows
        end_times = array("d", ends)  # each request's token times: one copy of the buffer
        for rid, e in zip(run.request_ids, run.seq_lens):
            row = rows[rid]
            s = e - 1  # the first step's position; the run computes s .. s + k - 1
            hi = row.high
            if s < hi:
                row.recomputed += min(s + k, hi) - s
                if row.phase == RECOMPUTE and s + k >= hi:  # ends with step hi - s - 1
                    row.enter(row.served_phase(), ends[hi - s - 1])
            if s + k > hi:
                row.high = s + k
            row.cur = s + k
            row.computed += k
            if row.first_token != row.first_token:  # NaN: first token
                row.first_token = ends[0]
                if row.phase == PREFILL:
                    row.enter(DECODE, ends[0])
            row.nout += k
            row.times.extend(end_times)
        for rid, why in stats.finished:
            self._end(rows[rid], why, "", ends[-1])
        b = len(run.request_ids)
        first = self._num_steps
        running: int | list[int] = stats.num_running
        num_finished: int | list[int] = 0
        if stats.finished:
            num_finished = [0] * (k - 1) + [len(stats.finished)]
            running = [stats.num_running] * (k - 1) + [stats.num_running_after]
        self._steps.extend(k, step_row(
            step=first, start_time=starts,
            duration_s=[e - s for s, e in zip(starts, ends)],
            num_scheduled_reqs=b, num_tokens=b, num_prefill_tokens=0, num_decode_tokens=b,
            num_decode_reqs=b, num_preempted=0, num_aborted=0, num_finished=num_finished,
            kv_used_tokens=stats.kv_used_tokens, kv_cached_tokens=stats.kv_cached_tokens,
            num_running=running, num_waiting=stats.num_waiting, forward_mode=run.forward_mode,
            num_swap_out=0, num_swap_in=0, num_swap_fallbacks=0, swap_out_tokens=0,
            swap_in_tokens=0, swap_out_bytes=0, swap_in_bytes=0, swap_s=0.0,
            planned_at=starts if planned_at is None else planned_at, in_flight=in_flight))
        self._num_steps += k
        if len(self._steps) >= self._step_batch_rows:
            self._flush_steps()

    def _add_step_row(self, row: tuple[int | float | str, ...]) -> None:
        """Append one step row (`STEP_SCHEMA` order); full batches go to the sink."""
        self._steps.append(row)
        self._num_steps += 1
        if len(self._steps) >= self._step_batch_rows:
            self._flush_steps()

    # --- releasing rows ----------------------------------------------------------------
    def release_ended(self) -> list[str]:
        """Move the rows of requests that ended since the last call into the current batch
        (written out when full) and forget their state; returns their ids, so the engine can
        tell the executor. Call it between steps, never inside one."""
        if not self._ended:
            return []
        ended, self._ended = self._ended, []
        for row in ended:
            self._release(row)
        return [row.rid for row in ended]

    def _release(self, row: _Row) -> None:
        del self._rows[row.rid], self._by_num[row.i]
        self._row_batch.append(_row_values(row))
        if not self.spooled:
            self._row_order.append(row.i)
        self._batch_times += len(row.times)
        if (len(self._row_batch) >= self._request_batch_rows
                or self._batch_times >= self._batch_token_times):
            self._flush_requests()

    def _flush_requests(self) -> None:
        rows, self._row_batch = self._row_batch, []
        self._batch_times = 0
        if not rows:
            return
        # lists, not tuples: pyarrow converts a tuple of strings a hundred times slower
        cols = [list(c) for c in zip(*rows, strict=True)]
        arrays = [_column_array(c, f.type) for c, f in zip(cols, REQUEST_SCHEMA, strict=True)]
        self._req_sink.write(pa.RecordBatch.from_arrays(arrays, schema=REQUEST_SCHEMA))

    def _flush_steps(self) -> None:
        if not len(self._steps):
            return
        steps = self._steps
        self._steps = StepColumns(STEP_SCHEMA, STEP_FIELDS_PER_STEP, "step", self._num_steps)
        for batch in steps.table().to_batches():
            self._step_sink.write(batch)

    def finish(self) -> None:
        """Write out every remaining row (requests still live get finish reason "") and
        close the sinks; a spooled recorder's files are then complete. Idempotent."""
        if self._closed:
            return
        self.release_ended()
        for i in sorted(self._by_num):
            self._release(self._by_num[i])
        self._live.clear()
        self._flush_requests()
        self._flush_steps()
        self._req_sink.close()
        self._step_sink.close()
        self._closed = True

    def discard(self) -> None:
        """Drop everything written (a spooled recorder deletes its files)."""
        self._closed = True
        self._req_sink.discard()
        self._step_sink.discard()

    @property
    def spool_paths(self) -> tuple[Path, Path]:
        """The (requests, steps) parquet files of a spooled recorder."""
        if not isinstance(self._req_sink, ParquetSink) or \
                not isinstance(self._step_sink, ParquetSink):
            raise RuntimeError("records: this recorder keeps its rows in memory (spool=None)")
        return self._req_sink.path, self._step_sink.path

    # --- queries and output ------------------------------------------------------------
    def live_ids(self) -> list[str]:
        """Ids of accepted requests that have not finished, in arrival order."""
        return [self._by_num[i].rid for i in sorted(self._live)]

    @property
    def num_steps(self) -> int:
        return self._num_steps

    @property
    def num_requests(self) -> int:
        """Requests seen so far (arrived)."""
        return self._num_requests

    def requests_table(self) -> pa.Table:
        """The per-request records as an Arrow table (`REQUEST_SCHEMA`): in memory, in
        arrival order; spooled, read back from the file (in the order requests ended)."""
        self.finish()
        if isinstance(self._req_sink, ParquetSink):
            return pq.read_table(self._req_sink.path)
        if self._req_table is None:
            table = self._req_sink.table()
            order = np.frombuffer(self._row_order, dtype=np.int64)
            if order.size and np.any(order[1:] < order[:-1]):
                table = table.take(pa.array(np.argsort(order, kind="stable"))).combine_chunks()
            self._req_table = table
        return self._req_table

    def steps_table(self) -> pa.Table:
        """The per-step records as an Arrow table (`STEP_SCHEMA`)."""
        self.finish()
        if isinstance(self._step_sink, ParquetSink):
            return pq.read_table(self._step_sink.path)
        if self._step_table is None:
            self._step_table = self._step_sink.table()
        return self._step_table
