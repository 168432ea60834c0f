"""Run-level metrics from the per-request and per-step records (DESIGN.md, "Metrics").

Names and definitions follow `vllm bench serve` where it has them: over completed requests
(finish reason "stop" or "length"), TTFT = first token - arrival, E2EL = finish - arrival,
TPOT = (E2EL - TTFT) / (output_len - 1) for requests with more than one output token, ITL =
every gap between consecutive tokens of a request; each reported as mean/median/std/p90/p99
in milliseconds (NaN, null in summary.json, when there is no sample: vLLM prints 0, which
reads as a measurement). `duration` runs from the first
arrival to the last finish. Ours: preemptions (vLLM) or retractions (SGLang) and victims,
recomputed prefill, prefix-cache hits, recovery on resume (tokens found cached at each
readmission, capped at what the victim had computed when preempted, over all it had
computed), victims' latency against the others', restarts per request, KV utilisation and
batch size over the busy time, and KV swapping (`preemption_mode=swap`: swap-outs, swap-ins,
fallbacks to recompute, tokens and bytes each way, copy time, swaps per request).
`offered_request_rate` is the load the workload offered: arrivals per second between the
first and the last arrival, (offered - 1) / (last arrival - first arrival).
Requests the scheduler refused (finish reason "rejected") are counted by what their reason
says (`rejection_kind`: `rejected_too_long` over the context length, `rejected_kv_pool` larger
than the whole KV pool, `rejected_other`); `offered` counts every request that arrived.
Requests refused with 503 at the front door (finish reason "rejected_503", admission limits)
are counted (`rejected_503`) and rated against all arrivals (`rejection_rate_503`); like every
request that did not complete they are outside the latency statistics and never good, and
`slo_attainment` (good requests / all arrivals) counts them in its denominator.
Everything is computed from record sources read in batches (`summarize`;
`compute_metrics_from_files` for a run's parquet files): memory holds the scalar request
columns and one batch of token times or steps, never all token times or all steps (the
inter-token gaps are kept between the passes of their statistics up to
`quantiles.REPLAY_BUDGET_BYTES`, 64 MiB, and read again from the records beyond it).
`step_series` gives KV use and batch size over time for figures.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engines.admission import OVERLOADED
from experiments.results.quantiles import replayable, stats_ms
from experiments.results.record_source import RecordSource

PERCENTILES = (90, 99)
SLO_KEYS = ("ttft", "tpot", "e2el")


def _f64(table: pa.Table | pa.RecordBatch, name: str) -> np.ndarray:
    return np.asarray(table.column(name).to_numpy(), dtype=np.float64)


def _i64(table: pa.Table | pa.RecordBatch, name: str) -> np.ndarray:
    return np.asarray(table.column(name).to_numpy(), dtype=np.int64)


def _stats_ms(prefix: str, seconds: np.ndarray) -> dict[str, float]:
    """mean/median/std/p90/p99 of `seconds`, in ms, under `vllm bench serve` names (NaN
    when there is no sample)."""
    if not seconds.size:
        return dict.fromkeys((f"mean_{prefix}_ms", f"median_{prefix}_ms", f"std_{prefix}_ms",
                              *(f"p{p}_{prefix}_ms" for p in PERCENTILES)), math.nan)
    x = seconds * 1000.0
    out = {
        f"mean_{prefix}_ms": float(np.mean(x)),
        f"median_{prefix}_ms": float(np.median(x)),
        f"std_{prefix}_ms": float(np.std(x)),
    }
    for p in PERCENTILES:
        out[f"p{p}_{prefix}_ms"] = float(np.percentile(x, p))
    return out


def _ratio(num: float, den: float) -> float:
    return num / den if den else math.nan


def _flat_lists(table: pa.Table | pa.RecordBatch, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Values of a list column and, for each value, the row it belongs to."""
    col = table.column(name)
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if table.num_rows else None
    if col is None or len(col) == 0:
        return np.zeros(0), np.zeros(0, dtype=np.int64)
    values = np.asarray(pc.list_flatten(col).to_numpy(), dtype=np.float64)
    parents = np.asarray(pc.list_parent_indices(col).to_numpy(), dtype=np.int64)
    return values, parents


def itl_seconds(requests: pa.Table | pa.RecordBatch) -> np.ndarray:
    """Every inter-token gap within a request, over all rows of `requests`."""
    times, parents = _flat_lists(requests, "token_times")
    if times.size < 2:
        return np.zeros(0)
    same = parents[1:] == parents[:-1]
    return np.diff(times)[same]


def _reason_is(batch: pa.RecordBatch | pa.Table, *reasons: str) -> np.ndarray:
    """A boolean mask: rows whose finish_reason is one of `reasons`."""
    mask = pc.is_in(batch.column("finish_reason"), value_set=pa.array(reasons, pa.string()))
    return np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)


def _done_mask(batch: pa.RecordBatch | pa.Table) -> np.ndarray:
    return _reason_is(batch, "stop", "length")


# What a scheduler's rejection reason says (`add_request`'s text), checked in this order:
# the prompt leaves no room under the context length (vllm: Scheduler.add_request after
# upstream's input processor; sglang: validate_input_length), or exceeds the whole KV pool.
REJECTION_KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("too_long", ("under max_model_len", "exceeds the maximum allowed length")),
    ("kv_pool", ("KV blocks; the pool holds",)),
)
REJECTION_OTHER = "other"
REJECTION_KIND_NAMES = (*(k for k, _ in REJECTION_KINDS), REJECTION_OTHER)


def rejection_kind(detail: str) -> str:
    """The kind of a scheduler's rejection reason: "too_long", "kv_pool" or "other"."""
    for kind, phrases in REJECTION_KINDS:
        if any(p in detail for p in phrases):
            return kind
    return REJECTION_OTHER


def _rejection_kinds(batch: pa.RecordBatch, rejected: np.ndarray) -> dict[str, int]:
    """Rejected rows of `batch` counted by `rejection_kind` of their finish_detail."""
    out = dict.fromkeys(REJECTION_KIND_NAMES, 0)
    if not rejected.any():
        return out
    details = batch.column("finish_detail").filter(pa.array(rejected))
    for detail in details.to_pylist():
        out[rejection_kind(detail or "")] += 1
    return out


# Request rows per batch when reading list columns (token times: a few MiB per batch).
_LIST_BATCH_ROWS = 1024
# Scalar request columns of the summary (read in batches, like the list columns).
_SCALARS = ("finish_reason", "finish_detail", "arrival_time", "finish_time", "first_token_time",
            "prompt_len", "output_len", "num_preemptions", "victim", "num_computed_tokens",
            "num_recomputed_tokens")


def compute_metrics(requests: pa.Table, steps: pa.Table,
                    slo_ms: Mapping[str, float] | None = None,
                    kv_capacity_tokens: int | None = None) -> dict[str, Any]:
    """The run summary: `vllm bench serve` keys plus ours (see the module docstring).

    `requests` and `steps` follow `engines.records.REQUEST_SCHEMA` / `STEP_SCHEMA` (as the
    engine returns them or as read back from parquet). `slo_ms` maps any of "ttft", "tpot",
    "e2el" to a target in ms; `request_goodput` counts completed requests meeting all of them
    (per second), and `slo_attainment` the share of all arrivals (503s and other rejections
    included) that are good; both are None without targets. With `kv_capacity_tokens`, KV
    use is also reported as a fraction of it.
    """
    return summarize(RecordSource.of(requests), RecordSource.of(steps), slo_ms=slo_ms,
                     kv_capacity_tokens=kv_capacity_tokens)


def compute_metrics_from_files(requests_path: str | Path, steps_path: str | Path,
                               slo_ms: Mapping[str, float] | None = None,
                               kv_capacity_tokens: int | None = None) -> dict[str, Any]:
    """`compute_metrics` of a run's parquet files, read in batches (bounded memory: the
    scalar request columns, one batch of list values and of steps at a time)."""
    return summarize(RecordSource.of(Path(requests_path)), RecordSource.of(Path(steps_path)),
                     slo_ms=slo_ms, kv_capacity_tokens=kv_capacity_tokens)


def summarize(requests: RecordSource, steps: RecordSource,
              slo_ms: Mapping[str, float] | None = None,
              kv_capacity_tokens: int | None = None) -> dict[str, Any]:
    """`compute_metrics` over record sources (tables or files; see `compute_metrics`).

    Row order does not matter. ITL statistics are exact (`experiments.results.quantiles`), but for
    the last bits of the mean and standard deviation, which are summed batch by batch."""
    if slo_ms:
        unknown = sorted(set(slo_ms) - set(SLO_KEYS))
        if unknown:
            raise ValueError(f"slo: unknown key(s) {', '.join(unknown)}; valid: "
                             f"{', '.join(SLO_KEYS)}")
    sc = _request_scalars(requests)
    n_all, start, duration = sc.n_all, sc.start, sc.end - sc.start
    ttft, e2el, olen = sc.ttft, sc.e2el, sc.olen
    multi = olen > 1
    tpot = (e2el[multi] - ttft[multi]) / (olen[multi] - 1)
    n_done = int(ttft.size)

    def itl_chunks() -> Iterator[np.ndarray]:
        for b in requests.batches(("finish_reason", "token_times"), _LIST_BATCH_ROWS):
            mask = _done_mask(b)
            if mask.any():
                yield itl_seconds(b.filter(pa.array(mask)))

    total_input = sc.done_input_tokens
    total_output = int(olen.sum())
    out: dict[str, Any] = {
        "duration": duration,
        "completed": n_done,
        "failed": n_all - n_done,
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": _ratio(n_done, duration),
        "output_throughput": _ratio(total_output, duration),
        "total_token_throughput": _ratio(total_input + total_output, duration),
    }
    good = attained = None
    if slo_ms:
        ok = np.ones(n_done, dtype=bool)
        if "ttft" in slo_ms:
            ok &= ttft * 1000.0 <= slo_ms["ttft"]
        if "e2el" in slo_ms:
            ok &= e2el * 1000.0 <= slo_ms["e2el"]
        if "tpot" in slo_ms:
            tp = np.zeros(olen.size)
            tp[multi] = tpot
            ok &= tp * 1000.0 <= slo_ms["tpot"]
        good = _ratio(int(ok.sum()), duration)
        attained = _ratio(int(ok.sum()), n_all)
    out["request_goodput"] = good
    out["slo_attainment"] = attained
    out["max_output_tokens_per_s"] = _max_tokens_per_second(requests, start)
    for name, x in (("ttft", ttft), ("tpot", tpot)):
        out.update(_stats_ms(name, x))
    out.update(stats_ms("itl", replayable(itl_chunks), PERCENTILES))
    out.update(_stats_ms("e2el", e2el))

    # --- ours: request outcomes ---
    out["num_requests"] = n_all
    out["offered"] = n_all
    out["offered_request_rate"] = _ratio(n_all - 1, sc.last_arrival - start)
    out["rejected"] = sc.rejected
    for kind, n in sc.rejected_kinds.items():
        out[f"rejected_{kind}"] = n
    out["rejected_503"] = sc.overloaded
    out["rejection_rate_503"] = _ratio(sc.overloaded, n_all)
    out["aborted"] = sc.aborted
    out["unfinished"] = sc.unfinished
    # --- preemption / retraction ---
    n_acc = n_all - sc.rejected - sc.overloaded
    out["num_preemptions"] = sc.preemptions
    out["preemptions_per_1k_requests"] = _ratio(1000.0 * sc.preemptions, n_acc)
    out["num_victims"] = sc.victims
    out["preempted_request_share"] = _ratio(sc.victims, n_acc)
    e2el_v = e2el[sc.done_victim]
    e2el_nv = e2el[~sc.done_victim]
    for tag, x in (("victim", e2el_v), ("nonvictim", e2el_nv)):
        out[f"median_e2el_{tag}_ms"] = float(np.median(x) * 1000.0) if x.size else math.nan
        out[f"p99_e2el_{tag}_ms"] = float(np.percentile(x, 99) * 1000.0) if x.size else math.nan
    out["victim_e2el_median_ratio"] = _ratio(out["median_e2el_victim_ms"],
                                             out["median_e2el_nonvictim_ms"])
    out["victim_e2el_p99_ratio"] = _ratio(out["p99_e2el_victim_ms"],
                                          out["p99_e2el_nonvictim_ms"])
    restarts = sc.restarts if n_acc else np.zeros(1, dtype=np.int64)
    out["restarts_histogram"] = {str(k): int(c) for k, c in enumerate(restarts) if c}
    out["max_restarts_per_request"] = sc.max_preemptions
    # --- compute, recompute and the prefix cache ---
    recomputed = sc.recomputed_tokens
    occ = _step_totals(steps, kv_capacity_tokens)
    prefill, decode = occ.pop("_prefill"), occ.pop("_decode")
    out["num_steps"] = occ.pop("_num_steps")
    out["computed_tokens"] = sc.computed_tokens
    out["prefill_tokens"] = prefill
    out["decode_tokens"] = decode
    out["recomputed_tokens"] = recomputed
    out["recomputed_token_share"] = _ratio(recomputed, prefill)
    cache = _prefix_cache_totals(requests)
    out["prefix_cache_hit_tokens"] = cache.hit_tokens
    out["prefix_cache_hit_rate"] = _ratio(float(cache.first_hit_tokens), cache.admitted_prompt)
    out["prefix_cache_hit_tokens_on_resume"] = cache.hit_tokens - cache.first_hit_tokens
    out["computed_tokens_at_preemption"] = cache.computed_at_preemption
    # over readmissions only: a victim never readmitted (unfinished at the end) resumed
    # nothing; with no readmission at all the share is undefined (NaN, "n/a"), never 0
    out["prefix_recovery_readmissions"] = cache.readmissions
    out["prefix_recovery_on_resume"] = _ratio(float(cache.recovered),
                                              float(cache.lost_at_readmission))
    out.update(occ)
    out.update(_swap_totals(requests, steps))
    return out


SWAP_STEP_COUNTS = ("num_swap_out", "num_swap_in", "num_swap_fallbacks", "swap_out_tokens",
                    "swap_in_tokens", "swap_out_bytes", "swap_in_bytes")


def _swap_totals(requests: RecordSource, steps: RecordSource) -> dict[str, Any]:
    """Totals of the swap columns (zeros in recompute mode, or for records written before
    the columns existed, or nulls in records built by hand), and the copy time's share of the
    busy time, one batch at a time."""
    counts = [c for c in SWAP_STEP_COUNTS if c in steps.column_names]
    totals = dict.fromkeys(SWAP_STEP_COUNTS, 0)
    swap_s = busy = 0.0
    has_s = "swap_s" in steps.column_names
    for b in steps.batches([*counts, "duration_s", *(["swap_s"] if has_s else [])]):
        for c in counts:
            totals[c] += int(pc.sum(b.column(c)).as_py() or 0)
        busy += float(pc.sum(b.column("duration_s")).as_py() or 0.0)
        if has_s:
            swap_s += float(pc.sum(b.column("swap_s")).as_py() or 0.0)
    out: dict[str, Any] = dict(totals)
    out["swap_time_s"] = swap_s
    out["swap_time_share"] = _ratio(swap_s, busy)
    swapped = max_swaps = 0
    if "num_swaps" in requests.column_names:
        for b in requests.batches(("num_swaps",)):
            col = b.column("num_swaps")
            swapped += int(pc.sum(pc.greater(col, 0)).as_py() or 0)
            max_swaps = max(max_swaps, int(pc.max(col).as_py() or 0))
    out["num_swapped_requests"] = swapped
    out["max_swaps_per_request"] = max_swaps
    return out


@dataclass(slots=True)
class _Scalars:
    """What the summary needs of the scalar request columns: counts and sums, and per
    completed request (in row order) TTFT, E2EL, output length and whether it was a victim."""

    n_all: int
    start: float
    end: float
    last_arrival: float
    rejected: int
    rejected_kinds: dict[str, int]  # rejected by `rejection_kind`
    overloaded: int
    aborted: int
    unfinished: int
    done_input_tokens: int
    preemptions: int
    victims: int
    max_preemptions: int
    restarts: np.ndarray  # bincount of num_preemptions over accepted requests
    recomputed_tokens: int
    computed_tokens: int
    ttft: np.ndarray
    e2el: np.ndarray
    olen: np.ndarray
    done_victim: np.ndarray


def _request_scalars(requests: RecordSource) -> _Scalars:
    """`_Scalars` from the request records, a batch at a time (memory: O(completed requests)
    floats)."""
    n_all = rejected = overloaded = aborted = unfinished = done_input = 0
    npre_sum = victims = npre_max = recomputed = computed = 0
    start, end, last_arrival = math.inf, -math.inf, -math.inf
    kinds = dict.fromkeys(REJECTION_KIND_NAMES, 0)
    restarts = np.zeros(1, dtype=np.int64)
    parts: dict[str, list[np.ndarray]] = {"ttft": [], "e2el": [], "olen": [], "victim": []}
    for b in requests.batches(_SCALARS):
        n_all += b.num_rows
        if not b.num_rows:
            continue
        done = _done_mask(b)
        rej = _reason_is(b, "rejected")
        rejected += int(rej.sum())
        for kind, n in _rejection_kinds(b, rej).items():
            kinds[kind] += n
        over = _reason_is(b, OVERLOADED)
        overloaded += int(over.sum())
        aborted += int(_reason_is(b, "abort").sum())
        unfinished += int(_reason_is(b, "").sum())
        arrival = _f64(b, "arrival_time")
        finish = _f64(b, "finish_time")
        first_tok = _f64(b, "first_token_time")
        npre = _i64(b, "num_preemptions")
        victim = np.asarray(b.column("victim").to_numpy(zero_copy_only=False), dtype=bool)
        start = min(start, float(arrival.min()))
        last_arrival = max(last_arrival, float(arrival.max()))
        finished = finish[~np.isnan(finish)]
        if finished.size:
            end = max(end, float(finished.max()))
        done_input += int(_i64(b, "prompt_len")[done].sum())
        npre_sum += int(npre.sum())
        victims += int(victim.sum())
        npre_max = max(npre_max, int(npre.max()))
        acc = npre[~(rej | over)]
        if acc.size:
            counts = np.bincount(acc)
            if counts.size > restarts.size:
                counts[:restarts.size] += restarts
                restarts = counts
            else:
                restarts[:counts.size] += counts
        recomputed += int(_i64(b, "num_recomputed_tokens").sum())
        computed += int(_i64(b, "num_computed_tokens").sum())
        parts["ttft"].append(first_tok[done] - arrival[done])
        parts["e2el"].append(finish[done] - arrival[done])
        parts["olen"].append(_i64(b, "output_len")[done])
        parts["victim"].append(victim[done])
    if not n_all:
        start = end = last_arrival = 0.0
    elif end == -math.inf:
        end = start

    def cat(name: str, dtype: type) -> np.ndarray:
        return np.concatenate(parts[name]) if parts[name] else np.zeros(0, dtype=dtype)

    return _Scalars(n_all, start, end, last_arrival, rejected, kinds, overloaded, aborted,
                    unfinished, done_input, npre_sum,
                    victims, npre_max, restarts, recomputed, computed, cat("ttft", np.float64),
                    cat("e2el", np.float64), cat("olen", np.int64), cat("victim", bool))


@dataclass(slots=True)
class _CacheTotals:
    hit_tokens: int = 0  # prefix-cache hits over all admissions
    first_hit_tokens: int = 0  # hits at each request's first admission
    admitted_prompt: int = 0  # prompt tokens of the requests ever admitted
    computed_at_preemption: int = 0
    recovered: int = 0  # see `_recovered`
    lost_at_readmission: int = 0  # computed at the preemptions that a readmission followed
    readmissions: int = 0


def _prefix_cache_totals(requests: RecordSource) -> _CacheTotals:
    """Prefix-cache and recovery totals, one batch of list columns at a time."""
    tot = _CacheTotals()
    cols = ("num_preemptions", "prompt_len", "prefix_hit_tokens", "computed_at_preemption")
    for b in requests.batches(cols, _LIST_BATCH_ROWS):
        hits_col = b.column("prefix_hit_tokens")
        offsets = np.asarray(hits_col.offsets.to_numpy(), dtype=np.int64)
        hits = np.asarray(pc.list_flatten(hits_col).to_numpy(), dtype=np.int64)
        lens = np.diff(offsets)
        admitted = lens > 0
        tot.hit_tokens += int(hits.sum())
        tot.first_hit_tokens += int(hits[offsets[:-1][admitted] - offsets[0]].sum())
        tot.admitted_prompt += int(_i64(b, "prompt_len")[admitted].sum())
        at_pre = pc.list_flatten(b.column("computed_at_preemption")).to_numpy()
        tot.computed_at_preemption += int(np.asarray(at_pre, dtype=np.int64).sum())
        recovered, lost, readmissions = _recovered(b)
        tot.recovered += recovered
        tot.lost_at_readmission += lost
        tot.readmissions += readmissions
    return tot


def _recovered(requests: pa.RecordBatch) -> tuple[int, int, int]:
    """Over every readmission after a preemption: the tokens found cached, each capped at
    what the victim had computed when that preemption happened (a shared prefix can return
    more than it lost); what it had computed then; and the number of readmissions. A
    preemption that no readmission followed (the run ended first) counts in none."""
    npre = _i64(requests, "num_preemptions")
    rows = np.flatnonzero(npre > 0)
    if rows.size == 0:
        return 0, 0, 0
    sub = requests.take(pa.array(rows))
    recovered = lost_total = readmissions = 0
    for hits, lost in zip(sub.column("prefix_hit_tokens").to_pylist(),
                          sub.column("computed_at_preemption").to_pylist(), strict=True):
        for h, c in zip(hits[1:], lost, strict=False):
            recovered += min(h, c)
            lost_total += c
            readmissions += 1
    return recovered, lost_total, readmissions


_STEP_COLUMNS = ("num_prefill_tokens", "num_decode_tokens", "kv_used_tokens",
                 "num_scheduled_reqs", "duration_s", "num_running")


def _step_totals(steps: RecordSource, capacity: int | None) -> dict[str, Any]:
    """Prefill and decode totals, step count, and `_occupancy`, one batch at a time."""
    n = prefill = decode = 0
    kv_max = run_max = batch_max = 0
    busy = kv_dur = batch_dur = kv_sum = batch_sum = 0.0
    for b in steps.batches(_STEP_COLUMNS):
        if not b.num_rows:
            continue
        n += b.num_rows
        prefill += int(_i64(b, "num_prefill_tokens").sum())
        decode += int(_i64(b, "num_decode_tokens").sum())
        kv = _f64(b, "kv_used_tokens")
        batch = _f64(b, "num_scheduled_reqs")
        dur = _f64(b, "duration_s")
        busy += float(dur.sum())
        kv_dur += float((kv * dur).sum())
        batch_dur += float((batch * dur).sum())
        kv_sum += float(kv.sum())
        batch_sum += float(batch.sum())
        kv_max = max(kv_max, int(kv.max()))
        batch_max = max(batch_max, int(batch.max()))
        run_max = max(run_max, int(_i64(b, "num_running").max()))
    out: dict[str, Any] = {"_prefill": prefill, "_decode": decode, "_num_steps": n}
    out.update(_occupancy(n, kv_max, run_max, batch_max, busy, kv_dur, batch_dur, kv_sum,
                          batch_sum, capacity))
    return out


def _occupancy(n: int, kv_max: int, run_max: int, batch_max: int, busy: float,
               kv_dur: float, batch_dur: float, kv_sum: float, batch_sum: float,
               capacity: int | None) -> dict[str, Any]:
    """KV slots and batch size: peaks, and means weighted by step duration (busy time)."""
    out: dict[str, Any] = {}
    if not n:
        # no step: peaks are 0, means over no step are undefined
        out["max_kv_used_tokens"] = out["max_running_requests"] = 0
        out["mean_scheduled_reqs_per_step"] = out["mean_batch_size"] = math.nan
        out["max_batch_size"] = 0
        out["mean_kv_used_tokens"] = math.nan
        out["mean_kv_utilization"] = math.nan if capacity else None
        out["max_kv_utilization"] = 0.0 if capacity else None
        return out
    kv_mean = kv_dur / busy if busy > 0 else kv_sum / n
    out["max_kv_used_tokens"] = kv_max
    out["mean_kv_used_tokens"] = kv_mean
    out["max_running_requests"] = run_max
    out["mean_scheduled_reqs_per_step"] = batch_sum / n
    out["mean_batch_size"] = batch_dur / busy if busy > 0 else batch_sum / n
    out["max_batch_size"] = batch_max
    out["mean_kv_utilization"] = _ratio(kv_mean, capacity) if capacity else None
    out["max_kv_utilization"] = _ratio(float(kv_max), capacity) if capacity else None
    return out


def step_series(steps: pa.Table, max_points: int = 2000) -> dict[str, np.ndarray]:
    """KV slots used, running requests and batch size against step end time (seconds), cut
    to at most `max_points` points by keeping every k-th step (the peaks of each stretch are
    kept for KV use, so a plot does not hide a full pool)."""
    if not steps.num_rows:
        z = np.zeros(0)
        return {"time_s": z, "kv_used_tokens": z, "num_running": z, "batch_size": z}
    t = _f64(steps, "start_time") + _f64(steps, "duration_s")
    cols = {"time_s": t, "kv_used_tokens": _f64(steps, "kv_used_tokens"),
            "num_running": _f64(steps, "num_running"),
            "batch_size": _f64(steps, "num_scheduled_reqs")}
    n = t.size
    if n <= max_points:
        return cols
    k = -(-n // max_points)
    m = n // k * k
    out = {name: x[:m:k] for name, x in cols.items()}
    out["kv_used_tokens"] = cols["kv_used_tokens"][:m].reshape(-1, k).max(axis=1)
    return out


def _max_tokens_per_second(requests: RecordSource, start: float) -> float:
    """The most output tokens produced in any one-second window [start + k, start + k + 1)."""
    counts: dict[int, int] = {}
    for b in requests.batches(("token_times",), _LIST_BATCH_ROWS):
        times = np.asarray(pc.list_flatten(b.column("token_times")).to_numpy(),
                           dtype=np.float64)
        if times.size == 0:
            continue
        bins, n = np.unique(np.floor(times - start).astype(np.int64), return_counts=True)
        for k, c in zip(bins.tolist(), n.tolist(), strict=True):
            counts[k] = counts.get(k, 0) + c
    return float(max(counts.values())) if counts else 0.0
