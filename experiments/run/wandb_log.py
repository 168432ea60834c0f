"""Weights & Biases: one run per job, grouped by sweep invocation, a sweep run at the end;
and a reader for offline runs.

`log_run` starts a run (offline by default: written under `<dir>/wandb/offline-run-*`, for
`wandb sync` later) named after the job's swept values, with job type = the scheduler, and
records:
- the flattened config (plus `git_commit`, from summary.json's git state);
- the summary: summary.json's values and nothing else (the run's totals, never a history
  bin's value), grouped by prefix (`summary_key`: `latency/`, `throughput/`, `requests/`,
  `eviction/`, `prefix_cache/`, `swap/`, `kv/`, `steps/`, `run/`);
- a history on simulated time (`sim_time_s` is the x axis), every series under `timeline/`
  (`HISTORY`) and kept out of the summary: the steps binned into `history_bins` bins
  (`experiments.results.timeseries`), mean KV used and cached, running and waiting requests,
  batch tokens and requests, and evictions, swaps and finished requests per bin, so a
  dashboard draws them as line charts;
- the per-request table (`tables/requests`: scalar columns plus TTFT / TPOT / E2EL in ms)
  and the job's figures (`figures/...`), in one write.
`log_sweep_run` logs a sweep as one more run of the group (job type `sweep`): the comparison
table, the side-by-side table, the sweep's answers as W&B charts a reader can hover (a line
per scheduler against the load parameter: evictions, requests evicted, recomputed prefill,
victims' and others' median E2E, prefix-cache recovery on resume, SLO attainment, goodput,
and the gap between the schedulers; `experiments.report.charts`) and the PNG figures;
`log_sweep_dir` builds all of it from a sweep folder. `quiet` (the default) turns off W&B's
console capture, system metrics, machine and code snapshots: what costs time and says
nothing about a simulated replay. `read_offline_run` reads an offline run's `.wandb` file
back (config, summary, group, history, the tables, charts and files it logged), which is how
the tests check what a job wrote.
"""

from __future__ import annotations

import json
import os
import struct
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from experiments.report.charts import ChartData
from experiments.results.sinks import json_safe

MODES = ("offline", "online", "disabled")


@dataclass(frozen=True, slots=True)
class WandbOptions:
    """The `logger=wandb` settings (see conf/logger/wandb.yaml)."""

    project: str = "schedbench"
    entity: str | None = None
    mode: str = "offline"
    dir: str | None = None
    group: str | None = None
    tags: tuple[str, ...] = ()
    log_requests_table: bool = True
    max_table_rows: int = 20000
    log_figures: bool = True
    history_bins: int = 300
    quiet: bool = True

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"logger.mode={self.mode!r}: valid: {', '.join(MODES)}")
        if self.max_table_rows < 0:
            raise ValueError(f"logger.max_table_rows={self.max_table_rows!r}: must be >= 0")
        if self.history_bins < 0:
            raise ValueError(f"logger.history_bins={self.history_bins!r}: must be >= 0")

    @classmethod
    def from_mapping(cls, cfg: Mapping[str, Any]) -> WandbOptions:
        """From the logger config (its `name` is ignored)."""
        d = {k: v for k, v in cfg.items() if k != "name"}
        d["tags"] = tuple(d.get("tags") or ())
        valid = set(cls.__dataclass_fields__)
        unknown = sorted(set(d) - valid)
        if unknown:
            raise ValueError(f"logger: unknown field(s) {', '.join(unknown)}; valid: "
                             f"{', '.join(sorted(valid))}")
        return cls(**d)


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one level of dotted keys."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def request_frame(requests: pa.Table, max_rows: int) -> Any:
    """The per-request table for W&B: scalar columns, the latencies in ms, prefix hits and
    the tokens computed at preemptions (sums), the first `max_rows` rows by arrival (a
    run's requests.parquet lists requests in the order they ended)."""
    import pyarrow.compute as pc

    order = pc.sort_indices(requests.select(["arrival_time"]),
                            sort_keys=[("arrival_time", "ascending")])
    t = requests.take(order.slice(0, max_rows))
    scalar = [f.name for f in t.schema if not pa.types.is_list(f.type)]
    df = t.select(scalar).to_pandas()
    arrival = df["arrival_time"].to_numpy()
    first = df["first_token_time"].to_numpy()
    finish = df["finish_time"].to_numpy()
    nout = df["output_len"].to_numpy()
    df["ttft_ms"] = (first - arrival) * 1000.0
    df["e2el_ms"] = (finish - arrival) * 1000.0
    with np.errstate(divide="ignore", invalid="ignore"):
        df["tpot_ms"] = np.where(nout > 1, (finish - first) / (nout - 1) * 1000.0, np.nan)
    for name in ("prefix_hit_tokens", "computed_at_preemption"):
        col = t.column(name).combine_chunks()
        values = np.asarray(pc.list_flatten(col).to_numpy(), dtype=np.float64)
        parents = np.asarray(pc.list_parent_indices(col).to_numpy(), dtype=np.int64)
        df[f"{name}_sum"] = np.bincount(parents, weights=values,
                                        minlength=len(col)).astype(np.int64)
    return df


# Summary key prefixes, first match wins: (prefix, words any of which the key contains).
SUMMARY_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("eviction/", ("preempt", "victim", "recomputed", "restarts")),
    ("swap/", ("swap",)),
    ("prefix_cache/", ("prefix",)),
    ("latency/", ("ttft", "tpot", "itl", "e2el")),
    ("throughput/", ("throughput", "goodput", "slo_attainment", "tokens_per_s", "duration")),
    ("requests/", ("completed", "rejected", "rejection", "aborted", "failed", "unfinished",
                   "offered", "dropped", "num_requests", "total_input_tokens",
                   "total_output_tokens")),
    ("kv/", ("kv_",)),
    ("steps/", ("batch", "running", "scheduled", "num_steps", "prefill_tokens",
                "decode_tokens", "computed_tokens")),
)


def summary_key(key: str) -> str:
    """The grouped name of a summary metric on W&B (`median_ttft_ms` -> `latency/...`);
    what fits no group (scheduler, model, status...) goes under `run/`."""
    for prefix, words in SUMMARY_GROUPS:
        if any(w in key for w in words):
            return prefix + key
    return "run/" + key


def grouped_summary(summary: Mapping[str, Any]) -> dict[str, Any]:
    """`summary` with every key under its group prefix (`summary_key`)."""
    return {summary_key(k): v for k, v in summary.items()}


# History series on simulated time, all under `timeline/`: no history key is a summary key,
# and W&B keeps no summary of them (`define_metric(..., summary="none")`), so the summary
# holds the run's totals (summary.json's values) and nothing else, never a bin's value under
# a run-level name. (W&B key, which `Binned` table, its column).
HISTORY_PREFIX = "timeline/"
HISTORY: tuple[tuple[str, str, str], ...] = (
    ("timeline/kv_used_tokens_mean", "mean", "kv_used_tokens"),
    ("timeline/kv_used_tokens_max", "max", "kv_used_tokens"),
    ("timeline/kv_cached_tokens_mean", "mean", "kv_cached_tokens"),
    ("timeline/running_requests_mean", "mean", "running_requests"),
    ("timeline/waiting_requests_mean", "mean", "waiting_requests"),
    ("timeline/batch_tokens_mean", "mean", "batch_tokens"),
    ("timeline/batch_requests_mean", "mean", "batch_requests"),
    ("timeline/evictions_in_bin", "total", "evictions"),
    ("timeline/swap_outs_in_bin", "total", "swap_outs"),
    ("timeline/swap_ins_in_bin", "total", "swap_ins"),
    ("timeline/finished_requests_in_bin", "total", "finished_requests"),
)
BUSY_KEY = "timeline/busy_share"
TIME_KEY = "sim_time_s"


def history_rows(steps: pa.Table, bins: int) -> list[dict[str, float]]:
    """The history of a job: one row per bin of simulated time (`TIME_KEY`: the bin's end),
    NaN values (no step ran in the bin) left out, so charts show a gap, not a made-up value."""
    from experiments.results.timeseries import bin_steps

    if bins <= 0 or steps.num_rows == 0:
        return []
    b = bin_steps(steps, min(bins, steps.num_rows))
    tables = {"mean": b.mean, "max": b.max, "total": b.total}
    rows = []
    for i in range(len(b)):
        row = {TIME_KEY: float(b.edges[i + 1]), BUSY_KEY: float(b.busy_share[i])}
        for key, table, col in HISTORY:
            v = float(tables[table][col][i])
            if np.isfinite(v):
                row[key] = v
        rows.append(row)
    return rows


def _settings(opts: WandbOptions) -> Any:
    import wandb

    if not opts.quiet:
        return wandb.Settings(console="off")
    return wandb.Settings(console="off", silent=True, save_code=False, disable_code=True,
                          disable_git=True, disable_job_creation=True, x_disable_stats=True,
                          x_disable_meta=True, x_disable_machine_info=True,
                          x_save_requirements=False)


def _table(frame: Any) -> Any:
    """A wandb.Table from a data frame, NaN as null (from row lists: many times faster than
    `wandb.Table(dataframe=...)`, which checks every cell's type)."""
    import wandb

    data = frame.astype(object).where(frame.notna(), None).values.tolist()
    return wandb.Table(columns=[str(c) for c in frame.columns], data=data)


def _init(opts: WandbOptions, root: Path, group: str | None, name: str, job_type: str,
          config: Mapping[str, Any]) -> Any:
    if opts.quiet:
        os.environ.setdefault("WANDB_SILENT", "true")
    import wandb

    root.mkdir(parents=True, exist_ok=True)
    # Keyword arguments through a dict: wandb's annotations of `mode` differ between releases,
    # and an ignore comment needed by one release is an unused ignore under another.
    init_args: dict[str, Any] = dict(
        project=opts.project, entity=opts.entity, mode=opts.mode, dir=str(root),
        group=opts.group or group, name=name, job_type=job_type, tags=list(opts.tags),
        config=json_safe(dict(config)), settings=_settings(opts))
    return wandb.init(**init_args)


def log_run(config: Mapping[str, Any], summary: Mapping[str, Any], requests: pa.Table,
            out_dir: str | Path, opts: WandbOptions, group: str | None, name: str,
            figures: Mapping[str, Path] | None = None, steps: pa.Table | None = None,
            commit: str | None = None) -> Path | None:
    """Log one job as one W&B run (see the module docstring); returns the run's folder
    (None when disabled)."""
    if opts.mode == "disabled":
        return None
    import wandb

    root = Path(opts.dir) if opts.dir else Path(out_dir)
    cfg = flatten(config)
    cfg["git_commit"] = commit if commit is not None else summary.get("git_commit")
    cfg["git_dirty"] = summary.get("git_dirty")
    cfg["core"] = summary.get("core")
    cfg["engine_loop"] = summary.get("engine_loop")
    cfg["step_time_source"] = summary.get("step_time_source")
    run = _init(opts, root, group, name, str(summary.get("scheduler", "job")), cfg)
    try:
        if steps is not None and opts.history_bins:
            run.define_metric(TIME_KEY, summary="none")
            run.define_metric(HISTORY_PREFIX + "*", step_metric=TIME_KEY, summary="none")
            for row in history_rows(steps, opts.history_bins):
                run.log(row)
        payload: dict[str, Any] = {}
        if opts.log_requests_table and opts.max_table_rows:
            payload["tables/requests"] = _table(request_frame(requests, opts.max_table_rows))
        if opts.log_figures:
            for key, path in (figures or {}).items():
                payload[f"figures/{key}"] = wandb.Image(str(path))
        if payload:
            run.log(payload)
        run.summary.update(json_safe(grouped_summary(summary)))
        run_dir = Path(run.dir).parent  # .../offline-run-*/files -> .../offline-run-*
    finally:
        run.finish()
    return run_dir


def _chart(chart: ChartData) -> Any:
    """A W&B line chart (a line per series) or, without an x column, a bar per row."""
    import wandb

    table = _table(chart.table)
    if chart.x is None:
        return wandb.plot.bar(table, chart.series, chart.y, title=chart.title)
    return wandb.plot.line(table, chart.x, chart.y, stroke=chart.series, title=chart.title)


def log_sweep_run(sweep_dir: str | Path, comparison: Any, side_by_side: Any,
                  figures: Mapping[str, Path], opts: WandbOptions, group: str | None,
                  name: str, config: Mapping[str, Any],
                  charts: Sequence[ChartData] = (), aggregated: Any = None) -> Path | None:
    """Log a sweep as one run of its group (job type `sweep`), in `<sweep_dir>/wandb/`: the
    comparison table (a row per job), the side-by-side table, the `charts` (each a W&B chart
    backed by its table, `<key>_table`), the PNG figures and, for a sweep with realisations,
    `aggregated` (a row per config: means, CI bounds, victims; `tables/aggregated`)."""
    if opts.mode == "disabled":
        return None
    import wandb

    root = Path(opts.dir) if opts.dir else Path(sweep_dir)
    run = _init(opts, root, group, name, "sweep", config)
    try:
        payload: dict[str, Any] = {"tables/comparison": _table(comparison),
                                   "tables/side_by_side": _table(side_by_side.reset_index())}
        if aggregated is not None:
            payload["tables/aggregated"] = _table(aggregated)
        payload.update({chart.key: _chart(chart) for chart in charts})
        for key, path in figures.items():
            if path.suffix == ".png":
                payload[f"figures/{key}"] = wandb.Image(str(path))
        run.log(payload)
        status = comparison.get("status")
        run.summary.update({"sweep/jobs": len(comparison),
                            "sweep/failed_jobs": int((status != "ok").sum())
                            if status is not None else 0})
        run_dir = Path(run.dir).parent
    finally:
        run.finish()
    return run_dir


def log_sweep_dir(sweep_dir: str | Path, opts: WandbOptions, group: str | None, name: str,
                  config: Mapping[str, Any], figures: Mapping[str, Path] | None = None,
                  load_param: str | None = None) -> Path | None:
    """The sweep's W&B run from its folder: the comparison and side-by-side tables of its
    jobs, the charts of `experiments.report.charts.sweep_charts` against `load_param` (else
    the parameter that reads as load, `tables.pick_load_param`) and `figures`. With
    realisations, the charts draw configs (means with CI columns and victims), the
    side-by-side table is the one across realisations (`mean [lo, hi] n=`, a column per
    config) and `tables/aggregated` holds its numbers."""
    from experiments.report.charts import sweep_charts
    from experiments.report.realizations import REALIZATION
    from experiments.report.tables import (
        aggregated_frame,
        aggregated_table,
        comparison_frame,
        load_sweep,
        pick_load_param,
        side_by_side,
        varied_params,
    )

    jobs = load_sweep(sweep_dir)
    params = varied_params(jobs)
    frame = comparison_frame(jobs, params)
    x = load_param if load_param in params else pick_load_param(params, frame)
    aggregated = None
    table = side_by_side(jobs, params)
    if REALIZATION in params:
        aggregated = aggregated_frame(jobs, params)
        table = aggregated_table(aggregated, params)
        table.index.name = "metric"
    return log_sweep_run(sweep_dir, frame, table, figures or {}, opts, group, name, config,
                         sweep_charts(frame, params, x), aggregated)


def timed(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    """`fn(*args, **kwargs)` and the wall seconds it took."""
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0


def run_name(overrides: Sequence[str], swept: Sequence[str], fallback: str) -> str:
    """A job's W&B run name from its swept values only: a config group choice by its value
    (`sglang`), any other key as `last_part=value` (`rate_scale=2`)."""
    from experiments.run.config import GROUPS

    parts = []
    for item in overrides:
        key, sep, value = str(item).partition("=")
        key = key.lstrip("+~")
        if sep and key in swept:
            parts.append(value if key in GROUPS else f"{key.split('.')[-1]}={value}")
    return " ".join(parts) or fallback


# --- reading an offline run back ------------------------------------------------------------

_HEADER = b":W&B"
_BLOCK = 32768
_REC_HEADER = 7  # crc32 (4), length (2), type (1): the LevelDB log format W&B writes


@dataclass
class OfflineRun:
    """What an offline run's `.wandb` file holds, decoded."""

    path: Path
    run_id: str = ""
    project: str = ""
    group: str = ""
    name: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    history_keys: set[str] = field(default_factory=set)
    history: list[dict[str, Any]] = field(default_factory=list)
    job_type: str = ""
    exited: bool = False  # the exit record is there: W&B has written the whole run

    @property
    def charts(self) -> dict[str, dict[str, Any]]:
        """The custom charts the run logged (`wandb.plot.*`): key -> W&B's panel config
        (`panel_config.fieldSettings` names the columns drawn)."""
        return dict((self.config.get("_wandb") or {}).get("visualize") or {})

    def table(self, key: str) -> tuple[list[str], list[list[Any]]]:
        """The columns and rows of the table logged under `key` (as the summary holds it;
        a chart's table is `<chart key>_table`)."""
        entry = self.summary.get(key)
        if not isinstance(entry, dict) or "path" not in entry:
            raise KeyError(f"{self.path.parent}: no table {key!r} in the summary")
        data = json.loads((self.path.parent / "files" / entry["path"]).read_text())
        return list(data["columns"]), list(data["data"])


def _records(data: bytes) -> list[bytes]:
    if data[:4] != _HEADER:
        raise ValueError("not a W&B run file (no :W&B header)")
    pos, buf, out = 7, b"", []
    while pos + _REC_HEADER <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _REC_HEADER:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + _REC_HEADER])
        pos += _REC_HEADER
        if kind == 0 and length == 0:
            continue
        buf += data[pos:pos + length]
        pos += length
        if kind in (1, 4):  # FULL, LAST
            out.append(buf)
            buf = b""
    return out


def _set(target: dict[str, Any], item: Any) -> None:
    keys = list(item.nested_key) or [item.key]
    node = target
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    node[keys[-1]] = json.loads(item.value_json)


def read_offline_run(run_dir: str | Path) -> OfflineRun:
    """Decode the `run-*.wandb` file of an offline run folder. W&B's service process writes
    the file's last records after `run.finish()` returns: in the process that logged the run,
    `wandb.teardown()` first (or check `exited`)."""
    import importlib

    # Generated protobuf code: typed as Any, since not every wandb release ships its stubs.
    pb: Any = importlib.import_module("wandb.proto.wandb_internal_pb2")

    files = sorted(Path(run_dir).glob("run-*.wandb"))
    if not files:
        raise FileNotFoundError(f"{run_dir}: no run-*.wandb file")
    out = OfflineRun(path=files[0])
    for raw in _records(files[0].read_bytes()):
        rec = pb.Record()
        rec.ParseFromString(raw)
        kind = rec.WhichOneof("record_type")
        if kind == "run":
            out.run_id, out.project = rec.run.run_id, rec.run.project
            out.group, out.name = rec.run.run_group, rec.run.display_name
            out.job_type = rec.run.job_type
            for item in rec.run.config.update:
                _set(out.config, item)
        elif kind == "config":
            for item in rec.config.update:
                _set(out.config, item)
        elif kind == "summary":
            for item in rec.summary.update:
                _set(out.summary, item)
        elif kind == "history":
            row: dict[str, Any] = {}
            for i in rec.history.item:
                key = "/".join(i.nested_key) if i.nested_key else i.key
                row[key] = json.loads(i.value_json)
            out.history_keys.update(row)
            out.history.append(row)
        elif kind == "files":
            out.files.extend(f.path for f in rec.files.files)
        elif kind == "exit":
            out.exited = True
    return out


def offline_runs(root: str | Path) -> list[Path]:
    """The offline run folders under `root` (e.g. a job folder)."""
    return sorted(p for p in Path(root).glob("**/offline-run-*") if p.is_dir())
