"""Run-level metrics from the per-request and per-step records (DESIGN.md, "Metrics").

Names and definitions follow `vllm bench serve` where it has them: over completed requests
(finish reason "stop" or "length"), TTFT = first token - arrival, E2EL = finish - arrival,
TPOT = (E2EL - TTFT) / (output_len - 1) for requests with more than one output token, ITL =
every gap between consecutive tokens of a request; each reported as mean/median/std/p90/p99
in milliseconds (0 when there is no sample, as vLLM does). `duration` runs from the first
arrival to the last finish. Ours: preemptions (vLLM) or retractions (SGLang) and victims,
recomputed prefill, prefix-cache hits, recovery on resume (tokens found cached at each
readmission, capped at what the victim had computed when preempted, over all it had
computed), victims' latency against the others', restarts per request, KV utilisation and
batch size over the busy time, and KV swapping (`preemption_mode=swap`: swap-outs, swap-ins,
fallbacks to recompute, tokens and bytes each way, copy time, swaps per request).
Requests refused with 503 at the front door (finish reason "rejected_503", admission limits)
are counted (`rejected_503`) and rated against all arrivals (`rejection_rate_503`); like every
request that did not complete they are outside the latency statistics and never good, and
`slo_attainment` (good requests / all arrivals) counts them in its denominator.
`step_series` gives KV use and batch size over time for figures.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engines.admission import OVERLOADED

PERCENTILES = (90, 99)
LATENCY_METRICS = ("ttft", "tpot", "itl", "e2el")
SLO_KEYS = ("ttft", "tpot", "e2el")


def _f64(table: pa.Table, name: str) -> np.ndarray:
    return np.asarray(table.column(name).to_numpy(), dtype=np.float64)


def _i64(table: pa.Table, name: str) -> np.ndarray:
    return np.asarray(table.column(name).to_numpy(), dtype=np.int64)


def _stats_ms(prefix: str, seconds: np.ndarray) -> dict[str, float]:
    """mean/median/std/p90/p99 of `seconds`, in ms, under `vllm bench serve` names."""
    x = seconds * 1000.0 if seconds.size else np.zeros(1)
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


def _flat_lists(table: pa.Table, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Values of a list column and, for each value, the row it belongs to."""
    col = table.column(name).combine_chunks() if table.num_rows else None
    if col is None or len(col) == 0:
        return np.zeros(0), np.zeros(0, dtype=np.int64)
    values = np.asarray(pc.list_flatten(col).to_numpy(), dtype=np.float64)
    parents = np.asarray(pc.list_parent_indices(col).to_numpy(), dtype=np.int64)
    return values, parents


def itl_seconds(requests: pa.Table) -> np.ndarray:
    """Every inter-token gap within a request, over all rows of `requests`."""
    times, parents = _flat_lists(requests, "token_times")
    if times.size < 2:
        return np.zeros(0)
    same = parents[1:] == parents[:-1]
    return np.diff(times)[same]


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
    if slo_ms:
        unknown = sorted(set(slo_ms) - set(SLO_KEYS))
        if unknown:
            raise ValueError(f"slo: unknown key(s) {', '.join(unknown)}; valid: "
                             f"{', '.join(SLO_KEYS)}")
    n_all = requests.num_rows
    reason = np.asarray(requests.column("finish_reason").to_pylist(), dtype=object)
    done = (reason == "stop") | (reason == "length")
    rejected = reason == "rejected"
    overloaded = reason == OVERLOADED
    aborted = reason == "abort"
    accepted = ~(rejected | overloaded)

    arrival = _f64(requests, "arrival_time")
    finish = _f64(requests, "finish_time")
    first_tok = _f64(requests, "first_token_time")
    prompt_len = _i64(requests, "prompt_len")
    output_len = _i64(requests, "output_len")
    npre = _i64(requests, "num_preemptions")
    victim = np.asarray(requests.column("victim").to_numpy(zero_copy_only=False), dtype=bool)

    start = float(arrival.min()) if n_all else 0.0
    finished_times = finish[~np.isnan(finish)]
    end = float(finished_times.max()) if finished_times.size else start
    duration = end - start

    ttft = first_tok[done] - arrival[done]
    e2el = finish[done] - arrival[done]
    olen = output_len[done]
    multi = olen > 1
    tpot = (e2el[multi] - ttft[multi]) / (olen[multi] - 1)
    itl = itl_seconds(requests.filter(pa.array(done)))

    total_input = int(prompt_len[done].sum())
    total_output = int(olen.sum())
    out: dict[str, Any] = {
        "duration": duration,
        "completed": int(done.sum()),
        "failed": int((~done).sum()),
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": _ratio(int(done.sum()), duration),
        "output_throughput": _ratio(total_output, duration),
        "total_token_throughput": _ratio(total_input + total_output, duration),
    }
    good = attained = None
    if slo_ms:
        ok = np.ones(int(done.sum()), dtype=bool)
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
    for name, x in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2el", e2el)):
        out.update(_stats_ms(name, x))

    # --- ours: request outcomes ---
    out["num_requests"] = n_all
    out["rejected"] = int(rejected.sum())
    out["rejected_503"] = int(overloaded.sum())
    out["rejection_rate_503"] = _ratio(int(overloaded.sum()), n_all)
    out["aborted"] = int(aborted.sum())
    out["unfinished"] = int((reason == "").sum())
    # --- preemption / retraction ---
    n_acc = int(accepted.sum())
    out["num_preemptions"] = int(npre.sum())
    out["preemptions_per_1k_requests"] = _ratio(1000.0 * int(npre.sum()), n_acc)
    out["num_victims"] = int(victim.sum())
    out["preempted_request_share"] = _ratio(int(victim.sum()), n_acc)
    v_done, nv_done = done & victim, done & ~victim
    e2el_v = finish[v_done] - arrival[v_done]
    e2el_nv = finish[nv_done] - arrival[nv_done]
    for tag, x in (("victim", e2el_v), ("nonvictim", e2el_nv)):
        out[f"median_e2el_{tag}_ms"] = float(np.median(x) * 1000.0) if x.size else math.nan
        out[f"p99_e2el_{tag}_ms"] = float(np.percentile(x, 99) * 1000.0) if x.size else math.nan
    out["victim_e2el_median_ratio"] = _ratio(out["median_e2el_victim_ms"],
                                             out["median_e2el_nonvictim_ms"])
    out["victim_e2el_p99_ratio"] = _ratio(out["p99_e2el_victim_ms"],
                                          out["p99_e2el_nonvictim_ms"])
    restarts = np.bincount(npre[accepted]) if n_acc else np.zeros(1, dtype=np.int64)
    out["restarts_histogram"] = {str(k): int(c) for k, c in enumerate(restarts) if c}
    out["max_restarts_per_request"] = int(npre.max()) if n_all else 0
    # --- compute, recompute and the prefix cache ---
    prefill = int(_i64(steps, "num_prefill_tokens").sum()) if steps.num_rows else 0
    decode = int(_i64(steps, "num_decode_tokens").sum()) if steps.num_rows else 0
    recomputed = int(_i64(requests, "num_recomputed_tokens").sum())
    out["num_steps"] = steps.num_rows
    out["computed_tokens"] = int(_i64(requests, "num_computed_tokens").sum())
    out["prefill_tokens"] = prefill
    out["decode_tokens"] = decode
    out["recomputed_tokens"] = recomputed
    out["recomputed_token_share"] = _ratio(recomputed, prefill)
    hits, hit_rows = _flat_lists(requests, "prefix_hit_tokens")
    first_hit = np.ones(hits.size, dtype=bool)
    first_hit[1:] = hit_rows[1:] != hit_rows[:-1]
    out["prefix_cache_hit_tokens"] = int(hits.sum())
    admitted_prompt = int(prompt_len[np.unique(hit_rows)].sum()) if hit_rows.size else 0
    out["prefix_cache_hit_rate"] = _ratio(float(hits[first_hit].sum()), admitted_prompt)
    at_pre, _ = _flat_lists(requests, "computed_at_preemption")
    resume_hits = float(hits[~first_hit].sum())
    out["prefix_cache_hit_tokens_on_resume"] = int(resume_hits)
    out["computed_tokens_at_preemption"] = int(at_pre.sum())
    out["prefix_recovery_on_resume"] = _ratio(_recovered(requests), float(at_pre.sum()))
    out.update(_occupancy(steps, kv_capacity_tokens))
    out.update(_swaps(requests, steps))
    return out


SWAP_STEP_COUNTS = ("num_swap_out", "num_swap_in", "num_swap_fallbacks", "swap_out_tokens",
                    "swap_in_tokens", "swap_out_bytes", "swap_in_bytes")


def _swaps(requests: pa.Table, steps: pa.Table) -> dict[str, Any]:
    """Totals of the swap columns (zeros in recompute mode, or for records written before
    the columns existed), and the copy time's share of the busy time."""
    def total(table: pa.Table, name: str) -> float:
        # a missing column or nulls (records built by hand) count as zero
        if name not in table.column_names:
            return 0
        return pc.sum(table.column(name)).as_py() or 0

    out: dict[str, Any] = {name: int(total(steps, name)) for name in SWAP_STEP_COUNTS}
    swap_s = float(total(steps, "swap_s"))
    busy = float(_f64(steps, "duration_s").sum()) if steps.num_rows else 0.0
    out["swap_time_s"] = swap_s
    out["swap_time_share"] = _ratio(swap_s, busy)
    nswaps = requests.column("num_swaps") if "num_swaps" in requests.column_names else None
    out["num_swapped_requests"] = (int(pc.sum(pc.greater(nswaps, 0)).as_py() or 0)
                                   if nswaps is not None else 0)
    out["max_swaps_per_request"] = int(pc.max(nswaps).as_py() or 0) if nswaps is not None else 0
    return out


def _recovered(requests: pa.Table) -> float:
    """Tokens found cached at each readmission, each capped at what the victim had computed
    when that preemption happened (a shared prefix can return more than it lost)."""
    npre = _i64(requests, "num_preemptions")
    rows = np.flatnonzero(npre > 0)
    if rows.size == 0:
        return 0.0
    sub = requests.take(pa.array(rows))
    total = 0
    for hits, lost in zip(sub.column("prefix_hit_tokens").to_pylist(),
                          sub.column("computed_at_preemption").to_pylist(), strict=True):
        total += sum(min(h, c) for h, c in zip(hits[1:], lost, strict=False))
    return float(total)


def _occupancy(steps: pa.Table, capacity: int | None) -> dict[str, Any]:
    """KV slots and batch size: peaks, and means weighted by step duration (busy time)."""
    out: dict[str, Any] = {}
    if not steps.num_rows:
        out["max_kv_used_tokens"] = out["max_running_requests"] = 0
        out["mean_scheduled_reqs_per_step"] = out["mean_batch_size"] = 0.0
        out["max_batch_size"] = 0
        out["mean_kv_used_tokens"] = 0.0
        out["mean_kv_utilization"] = out["max_kv_utilization"] = 0.0 if capacity else None
        return out
    kv = _f64(steps, "kv_used_tokens")
    batch = _f64(steps, "num_scheduled_reqs")
    dur = _f64(steps, "duration_s")
    busy = float(dur.sum())

    def tmean(x: np.ndarray) -> float:
        return float((x * dur).sum() / busy) if busy > 0 else float(x.mean())

    out["max_kv_used_tokens"] = int(kv.max())
    out["mean_kv_used_tokens"] = tmean(kv)
    out["max_running_requests"] = int(_i64(steps, "num_running").max())
    out["mean_scheduled_reqs_per_step"] = float(batch.mean())
    out["mean_batch_size"] = tmean(batch)
    out["max_batch_size"] = int(batch.max())
    out["mean_kv_utilization"] = _ratio(tmean(kv), capacity) if capacity else None
    out["max_kv_utilization"] = _ratio(float(kv.max()), capacity) if capacity else None
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


def _max_tokens_per_second(requests: pa.Table, start: float) -> float:
    """The most output tokens produced in any one-second window [start + k, start + k + 1)."""
    times, _ = _flat_lists(requests, "token_times")
    if times.size == 0:
        return 0.0
    bins = np.floor(times - start).astype(np.int64)
    return float(np.bincount(bins - bins.min()).max())
