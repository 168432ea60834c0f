"""The Hydra entry point: one job = one scheduler x one workload x one executor.

    python -m experiments.run                                  # one job (conf/config.yaml)
    python -m experiments.run scheduler.max_num_seqs=32 kv_capacity_tokens=32768
    python -m experiments.run -m                               # vLLM and SGLang side by side
    python -m experiments.run -m experiment=preemption         # a preset study (conf/experiment)
    python -m experiments.run -m scheduler=vllm scheduler.max_num_batched_tokens=512,2048

Each job writes requests.parquet, steps.parquet and summary.json into its folder (Hydra's
runtime.output_dir), and with `logger=wandb` one W&B run; a single run prints its summary, a
multirun one line per job and, at the end, the side-by-side table (experiments/run/callbacks.py).
A typo in an override fails before anything runs, with the valid keys.

`check_invariants=true` checks the scheduler's KV bookkeeping after every step (slower);
`resume=true` skips a job whose folder already holds a verified complete result (its
completion marker checks out, experiments/results/job_folder.py) with status ok and the same
`config_hash` (the resolved config, less the keys of `HASH_EXCLUDED`, and the content of its
input files); `on_error=record` turns any error of a job into a summary.json with status
"failed" (the folder's older tables are deleted). A job holds a lock on its folder while it
runs: a second run into the same folder fails at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import hashlib
import json
import logging
import os
import sys
import time
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import hydra
import pyarrow as pa
import pyarrow.parquet as pq
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from engines.compiled_core import core_summary
from engines.engine import Engine, SchedulerCheck
from engines.executors.base import DetokenizingExecutor, Executor
from engines.records import Recorder
from experiments.inputs.input_changes import ContextCapCounter, context_limit
from experiments.inputs.input_files import input_fingerprints
from experiments.inputs.workloads import stream_workload, workload_seed
from experiments.inputs.workloads.realization import check_realization, realization_seed
from experiments.results.arrow_pandas import defer_pandas_import
from experiments.results.job_folder import (
    FolderBusyError,
    JobLock,
    UnsafeFolderError,
    commit_failure,
    commit_run,
    refuse_unsafe_folder,
    remove_stale_spools,
    restore_files,
    snapshot_files,
    verify_folder,
)
from experiments.results.metrics import compute_metrics_from_files
from experiments.results.sinks import (
    REQUESTS_FILE,
    STEPS_FILE,
    temp_path,
    write_table,
)
from experiments.run.build import (
    as_dict,
    build_admission,
    build_executor,
    build_hardware,
    build_job_scheduler,
    build_model,
    check_context_length,
    cost_model_summary,
    effective_context_length,
    job_context_length,
    job_kv_capacity,
    model_context_length,
    parse_kv_capacity,
    step_time_source,
)
from experiments.run.caveats import run_warnings
from experiments.run.config import (
    CONF_DIR,
    explain_override_error,
    register_configs,
    to_container,
)
from experiments.run.host_load import load_fields, overload_warning, sample_host_load
from experiments.run.load import resolve_load
from experiments.run.orphan_guard import exit_with_parent
from experiments.run.preflight import (
    ConfigError,
    check_command_line,
    check_config,
    explain_scheduler_keys,
)
from experiments.run.progress import ProgressRecorder, progress_enabled
from experiments.run.provenance import (
    checkpoint_config,
    git_state,
    real_model_summary,
    sim_model_summary,
    step_clock,
    workload_label,
    workload_summary,
)
from experiments.run.ranges import check_ranges
from experiments.user_error import JobConfigError, UserError, debug_enabled, one_line
from schedulers import registry
from schedulers.contract import Request, Scheduler, SelfCheckingScheduler

log = logging.getLogger(__name__)
register_configs()


def _slo(cfg: DictConfig) -> dict[str, float] | None:
    targets = {k: float(v) for k, v in as_dict(cfg.get("slo")).items() if v is not None}
    return targets or None


def _enum_value(v: Any) -> str:
    return str(v.value if isinstance(v, enum.Enum) else v)


def _progress_mode(cfg: DictConfig) -> str:
    return _enum_value(cfg.get("progress", "auto"))


# Top-level keys that change neither the outputs nor their meaning: not part of config_hash.
HASH_EXCLUDED = ("resume", "progress", "on_error", "check_invariants")


def config_hash(cfg: DictConfig) -> str:
    """A SHA-256 of the resolved config (sorted JSON, without `HASH_EXCLUDED`) and of the
    content of every input file it names (`input_fingerprints`): a trace edited in place is
    a new config."""
    data = {k: v for k, v in to_container(cfg).items() if k not in HASH_EXCLUDED}
    inputs = input_fingerprints(data)
    if inputs:
        data["_input_files"] = inputs
    text = json.dumps(data, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def complete_result(out_dir: str | Path, digest: str) -> dict[str, Any] | None:
    """The summary in `out_dir` when it is a complete result for the config of hash `digest`:
    its completion marker verifies (every file readable and with the recorded hash; see
    `experiments.results.job_folder.verify_folder`), status ok, same config_hash; else None."""
    state = verify_folder(out_dir)
    if state.state != "ok" or state.summary.get("config_hash") != digest:
        return None
    return state.summary


def invariant_check(scheduler: Scheduler) -> SchedulerCheck:
    """The per-step invariant check of `scheduler` (`check_invariants=true`), as its registry
    entry declares it (`self_check`); a scheduler built from `scheduler.target`, with no
    entry, is checked when it has a `check_invariants()` (`SelfCheckingScheduler`)."""
    entry = registry.find(scheduler.name)
    check = entry.invariant_check(scheduler) if entry is not None else (
        scheduler.check_invariants if isinstance(scheduler, SelfCheckingScheduler) else None)
    if check is None:
        raise ValueError(f"check_invariants=true: scheduler {scheduler.name!r} declares no "
                         "invariant check (its registry entry's self_check)")
    return lambda _s: check()


def validate_run_config(cfg: DictConfig) -> None:
    """Refuse a value out of the range its field declares (`check_ranges`: every numeric key
    of docs/CONFIG.md), and top-level keys that nothing reads, naming the valid ones."""
    check_ranges(cfg)
    parse_kv_capacity(cfg.kv_capacity_tokens)
    from experiments.run.config import RunConfig

    unknown = sorted(set(map(str, cfg.keys())) - {f.name for f in dataclasses.fields(RunConfig)})
    if unknown:
        raise ValueError(f"unknown top-level key(s) {', '.join(map(str, unknown))} (added "
                         "with +KEY=...?): nothing reads them; valid keys: "
                         f"{', '.join(sorted(f.name for f in dataclasses.fields(RunConfig)))}")


def _random_seed_summary(cfg_scheduler: Any, derived: int) -> dict[str, int]:
    """`random_seed`: the seed the scheduler's random choices used (its own, or `derived`
    when null); nothing for a scheduler without the option."""
    fields = as_dict(cfg_scheduler)
    if "random_seed" not in fields:
        return {}
    own = fields["random_seed"]
    return {"random_seed": int(own) if own is not None else derived}


@contextlib.contextmanager
def _as_config_errors() -> Iterator[None]:
    """Errors raised while a job is built from its config are the config's (a value an object
    refuses, an input file that cannot be read): re-raised as `JobConfigError`, a user error
    shown as one line."""
    try:
        yield
    except UserError:
        raise
    except (ValueError, OSError) as e:
        raise JobConfigError(e) from e


def failed_summary(cfg: DictConfig, error: Exception, workload: str | None = None,
                   overrides: Iterable[str] = ()) -> dict[str, Any]:
    """The summary of a job stopped by an error (`on_error=record`)."""
    if isinstance(error, JobConfigError):
        error = error.original  # named as what raised it
    try:
        digest = config_hash(cfg)
    except Exception as e:  # the config or an input file may be what failed
        digest = f"unavailable ({type(e).__name__})"
    return {
        "status": "failed",
        "overrides": list(overrides),
        "config_hash": digest,
        "error": f"{type(error).__name__}: {error}",
        "scheduler": str(cfg.scheduler.name),
        "executor": str(cfg.executor.name),
        "workload": workload_label(cfg, workload),
        "seed": int(cfg.seed),
        "kv_capacity_tokens": cfg.kv_capacity_tokens,
        **git_state(),
    }


def with_output_token_ids(table: pa.Table, requests: list[Request]) -> pa.Table:
    """`table` with an `output_token_ids` column: the tokens each request generated."""
    tokens = {r.request_id: r.output_token_ids for r in requests}
    column = [tokens[rid] for rid in table.column("request_id").to_pylist()]
    return table.append_column("output_token_ids", pa.array(column, pa.list_(pa.int64())))


def with_output_text(table: pa.Table, requests: list[Request], executor: Executor
                     ) -> pa.Table:
    """`table` with an `output_text` column (each request's tokens decoded by the checkpoint's
    tokenizer), when the executor has one; else `table` as it is."""
    if not isinstance(executor, DetokenizingExecutor) or executor.decode([]) is None:
        return table
    decode = executor.decode
    texts = {r.request_id: decode(r.output_token_ids) for r in requests}
    column = [texts[rid] for rid in table.column("request_id").to_pylist()]
    return table.append_column("output_text", pa.array(column, pa.string()))


def run_experiment(cfg: DictConfig, out_dir: str | Path, group: str | None = None,
                   run_name: str | None = None, workload: str | None = None,
                   overrides: Iterable[str] = (),
                   wrap_executor: Callable[[Executor], Executor] | None = None,
                   bar: bool | None = None
                   ) -> dict[str, Any]:
    """Build everything from `cfg`, run the engine, write the outputs (and the W&B run when
    `logger.name` is wandb, in `group` under `run_name`); returns the summary. `workload`
    names the workload in the summary (default: `workload_label`). `overrides` (the job's
    command-line overrides) are stored in the summary: the sweep report labels the job by
    them.

    Requests are built as the clock reaches them and the records are spooled to hidden
    temporary files in `out_dir` as the run goes (moved into place at the end, deleted on an
    error), so memory holds only live requests; requests.parquet lists requests in the order
    they ended (sort by arrival_time for arrival order). `wrap_executor`, when given, wraps
    the built executor (a study that records each step's shape, scripts/real_vs_sim.py).
    `bar` False: no progress bar whatever `progress` says (None: as `progress` says)."""
    with _as_config_errors():  # what fails here is the config's (or its input files')
        validate_run_config(cfg)
        digest = config_hash(cfg)  # the inputs as they are read now
        seed = int(cfg.seed)
        # workload.load: the rate parameter set to load x the scheduler's capacity
        workload_cfg, load = resolve_load(cfg)
        realization = check_realization(workload_cfg.get("realization", 0))
        real = str(cfg.executor.name) == "real"
        model = build_model(cfg.model)
        hardware = build_hardware(cfg.hardware)
        checkpoint = checkpoint_config(cfg.executor) if real else None
        ctx = job_context_length(cfg, model.max_position_embeddings, checkpoint)
        model_context = model_context_length(cfg, model.max_position_embeddings, checkpoint)
        # before the workload: a context length past the model's is refused whatever it replays
        check_context_length(ctx, model_context, bool(cfg.get("allow_long_max_model_len", False)))
        stream = stream_workload(workload_cfg, seed)  # validates trace files first
        # The real executor's tokens are read back from the requests: keep them (small runs).
        requests: Iterable[Request] = list(stream) if real else stream
        admission = build_admission(cfg.get("admission"))
        pool = job_kv_capacity(cfg, model, hardware, ctx.value)
        kv_capacity = pool.tokens
        # the random victim policy's seed: scheduler.random_seed, or (null) the run's seed of
        # this realisation, as the workload's
        policy_seed = realization_seed(seed, realization)
        job_scheduler = build_job_scheduler(cfg.scheduler, kv_capacity, ctx.value,
                                            hardware.device, policy_seed)
        scheduler = job_scheduler.scheduler
        # vLLM's pool adds the null block: one page beyond the capacity covers both designs.
        executor = build_executor(cfg.executor, model, hardware,
                                  num_slots=kv_capacity + scheduler.page_size)
        capped = ContextCapCounter(requests, context_limit(scheduler))
        requests = capped if not real else list(capped)
    if wrap_executor is not None:
        executor = wrap_executor(executor)
    show = progress_enabled(_progress_mode(cfg)) if bar is None else bar
    check = invariant_check(scheduler) if cfg.get("check_invariants", False) else None
    spool = (temp_path(Path(out_dir) / REQUESTS_FILE), temp_path(Path(out_dir) / STEPS_FILE))
    recorder = (ProgressRecorder(desc=run_name or scheduler.name, spool=spool) if show
                else Recorder(spool=spool))
    load_start = sample_host_load() if real else None
    if load_start is not None and load_start.overloaded:
        log.warning("%s: %s", run_name or scheduler.name,
                    overload_warning({"start": load_start}))
    try:
        t0 = time.perf_counter()
        try:
            engine = Engine(scheduler, executor, requests, recorder=recorder, check=check,
                            admission=admission)
            if engine.loop.name != job_scheduler.loop.value:
                raise RuntimeError(f"{scheduler.name}: the config resolved the engine loop "
                                   f"{job_scheduler.loop.value!r} ({job_scheduler.loop.source})"
                                   f" but the built scheduler declares {engine.loop.name!r}")
            result = engine.run()
        finally:
            if isinstance(recorder, ProgressRecorder):
                recorder.close()
        wall = time.perf_counter() - t0
        if real:
            assert isinstance(requests, list)
            table = with_output_token_ids(pq.read_table(spool[0]), requests)
            write_table(with_output_text(table, requests, executor), spool[0])
        summary: dict[str, Any] = {
            "status": "ok",
            "config_hash": digest,
            "scheduler": scheduler.name,
            # the loop that drove it (DESIGN.md, "Engine loops"): synchronous or batch_queue
            "engine_loop": engine.loop.name,
            # the config's fields that selected it, or why another one runs
            "engine_loop_source": job_scheduler.loop.source,
            "executor": str(cfg.executor.name),
            "clock": step_clock(cfg.executor, executor),
            **cost_model_summary(cfg.executor),
            **step_time_source(executor),
            **(real_model_summary(executor, str(cfg.executor.model_path), checkpoint) if real
               else sim_model_summary(model, hardware)),
            **workload_summary(cfg, stream, workload),
            "seed": seed,
            "realization": realization,
            **(load.summary() if load is not None else {}),
            "workload_seed": workload_seed(workload_cfg, seed),
            **_random_seed_summary(cfg.scheduler, policy_seed),
            "kv_capacity_tokens": kv_capacity,
            "kv_capacity_source": pool.source,
            "kv_pool_estimate": pool.estimate.as_dict() if pool.estimate else None,
            "max_model_len": effective_context_length(scheduler, ctx),
            "max_model_len_source": ctx.source,
            "model_context_length": model_context,
            "scheduler_limits": {k: v.as_dict() for k, v in job_scheduler.limits.items()},
            **git_state(),
            **core_summary(),
            **compute_metrics_from_files(*spool, slo_ms=_slo(cfg),
                                         kv_capacity_tokens=kv_capacity),
        }
        summary["warnings"] = run_warnings(summary)
        if job_scheduler.loop_warning is not None:
            summary["warnings"].append(job_scheduler.loop_warning)
        if load_start is not None:
            load_end = sample_host_load()
            summary.update(load_fields(load_start, load_end))
            overloaded = overload_warning({"start": load_start, "end": load_end})
            if overloaded is not None:
                summary["warnings"].append(overloaded)
        summary["overrides"] = list(overrides)
        summary["input_changes"] = capped.report()  # counted changes of the input
        cut = capped.warning()
        if cut is not None:
            log.warning("%s: %s", run_name or scheduler.name, cut)
        paths = commit_run(out_dir, spool[0], spool[1], summary)
    except BaseException:
        recorder.discard()
        raise
    log.info("%d requests, %d steps replayed in %.2f s wall; wrote %s", recorder.num_requests,
             result.num_steps, wall, ", ".join(str(p) for p in paths.values()))
    for warning in summary["warnings"]:
        log.warning("%s: %s", run_name or scheduler.name, warning)
    logger = as_dict(cfg.get("logger"))
    if logger.get("name") == "wandb":
        t_wandb = time.perf_counter()
        run_dir = _log_wandb(cfg, logger, summary, pq.read_table(paths["requests"]),
                             pq.read_table(paths["steps"]), Path(out_dir), group,
                             run_name or scheduler.name)
        log.info("W&B %s run in %.2f s: %s", logger.get("mode"),
                 time.perf_counter() - t_wandb, run_dir)
    return summary


def _log_wandb(cfg: DictConfig, logger: dict[str, Any], summary: dict[str, Any],
               requests: Any, steps: Any, out_dir: Path, group: str | None,
               name: str) -> Path | None:
    from experiments.run.wandb_log import WandbOptions, log_run

    opts = WandbOptions.from_mapping(logger)
    if opts.mode == "disabled":
        return None
    figures: dict[str, Path] = {}
    if opts.log_figures:
        figures = _job_figures(summary, requests, steps, out_dir / "figures")
    return log_run(to_container(cfg), summary, requests, out_dir, opts, group, name, figures,
                   steps=steps)


def _job_figures(summary: dict[str, Any], requests: Any, steps: Any, out: Path
                 ) -> dict[str, Path]:
    """This job's latency CDFs and KV pool use over time (for its W&B run)."""
    from experiments.report.figures import JobSeries, job_clock, kv_use_over_time, latency_cdfs

    sched = str(summary["scheduler"])
    series = [JobSeries.from_tables(requests, steps, sched, "",
                                    int(summary["kv_capacity_tokens"]),
                                    clock=job_clock(summary))]
    return {"latency_cdf_ttft_e2el": latency_cdfs(series, out / "latency_cdf_ttft_e2el.png",
                                                  pdf=False),
            "kv_use_vs_time": kv_use_over_time(series, out / "kv_use_vs_time.png", pdf=False)}


def _fmt(v: Any) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "n/a"  # a statistic over no data
    if isinstance(v, float):
        return f"{v:.2f}"
    return str(v)


_TABLE: list[tuple[str, list[tuple[str, str]]]] = [
    ("Serving Benchmark Result", [
        ("Scheduler", "scheduler"), ("Model / hardware", "_model_hw"),
        ("Workload", "workload"), ("Context length", "_ctx"),
        ("Requests offered", "offered"), ("Successful requests", "completed"),
        ("Rejected: too long / KV pool / other", "_rej_kinds"), ("Aborted", "aborted"),
        ("Rejected with 503 (share)", "_rej_503"),
        ("Benchmark duration (s)", "duration"), ("Total input tokens", "total_input_tokens"),
        ("Total generated tokens", "total_output_tokens"),
        ("Request throughput (req/s)", "request_throughput"),
        ("Output token throughput (tok/s)", "output_throughput"),
        ("Total Token throughput (tok/s)", "total_token_throughput"),
    ]),
    ("Goodput", [("Request goodput (req/s)", "request_goodput"),
                 ("SLO attainment (of arrivals)", "slo_attainment")]),
    ("Time to First Token", [("Mean TTFT (ms)", "mean_ttft_ms"),
                             ("Median TTFT (ms)", "median_ttft_ms"),
                             ("P99 TTFT (ms)", "p99_ttft_ms")]),
    ("Time per Output Token (excl. 1st token)", [("Mean TPOT (ms)", "mean_tpot_ms"),
                                                 ("Median TPOT (ms)", "median_tpot_ms"),
                                                 ("P99 TPOT (ms)", "p99_tpot_ms")]),
    ("Inter-token Latency", [("Mean ITL (ms)", "mean_itl_ms"), ("Median ITL (ms)", "median_itl_ms"),
                             ("P99 ITL (ms)", "p99_itl_ms")]),
    ("End-to-end Latency", [("Mean E2EL (ms)", "mean_e2el_ms"),
                            ("Median E2EL (ms)", "median_e2el_ms"),
                            ("P99 E2EL (ms)", "p99_e2el_ms")]),
    ("Evictions (preempted / retracted) and recompute", [
        ("Evictions", "num_preemptions"), ("Evictions per 1k requests",
                                           "preemptions_per_1k_requests"),
        ("Share of requests evicted", "preempted_request_share"),
        ("Median E2EL victims/others (ms)", "_victim_e2el"),
        ("Recomputed tokens", "recomputed_tokens"),
        ("Recomputed share of prefill", "recomputed_token_share"),
        ("Prefix-cache hit tokens", "prefix_cache_hit_tokens"),
        ("Prefix recovery on resume", "prefix_recovery_on_resume"),
        ("Restarts per request (max)", "max_restarts_per_request"),
        ("Steps", "num_steps"), ("Peak KV slots used", "_kv_peak"),
        ("Mean KV utilisation", "mean_kv_utilization"), ("Mean batch size", "mean_batch_size"),
    ]),
]


def format_summary(s: Mapping[str, Any]) -> str:
    """The summary as a `vllm bench serve`-style text table."""
    derived = {
        "_model_hw": f"{s.get('model')} / {s.get('hardware')} ({s.get('executor')})",
        "_ctx": f"{s.get('max_model_len')} ({s.get('max_model_len_source')})",
        "_rej_kinds": f"{s.get('rejected_too_long')} / {s.get('rejected_kv_pool')} / "
                      f"{s.get('rejected_other')}",
        "_rej_503": f"{s.get('rejected_503')} ({_fmt(s.get('rejection_rate_503'))})",
        "_victim_e2el": f"{_fmt(s.get('median_e2el_victim_ms'))} / "
                        f"{_fmt(s.get('median_e2el_nonvictim_ms'))}",
        "_kv_peak": f"{s.get('max_kv_used_tokens')} / {s.get('kv_capacity_tokens')}",
    }
    lines: list[str] = []
    for i, (title, rows) in enumerate(_TABLE):
        fill = "=" if i == 0 else "-"
        lines.append(f" {title} ".center(50, fill))
        for label, key in rows:
            v = derived[key] if key in derived else _fmt(s.get(key))
            lines.append(f"{label}:" + v.rjust(max(50 - len(label) - 1, len(v) + 1)))
    lines.append("=" * 50)
    lines.extend(f"WARNING: {w}" for w in s.get("warnings") or ())
    lines.append("Evicted: preempted (vLLM) or retracted (SGLang); victims: evicted at least once.")
    return "\n".join(lines)


def format_line(s: Mapping[str, Any]) -> str:
    """A one-line summary of a job (multirun output)."""
    if s.get("status") == "failed":
        return f"{s.get('scheduler')}: FAILED ({str(s.get('error'))[:200]})"
    refused = sum(int(s.get(k) or 0) for k in ("rejected", "rejected_503", "aborted"))
    notes = f" ({refused} rejected or aborted)" if refused else ""
    warnings = f", {len(s['warnings'])} warning(s)" if s.get("warnings") else ""
    return (f"{s.get('scheduler')}: {s.get('completed')} of {s.get('offered')} done{notes}, "
            f"{_fmt(s.get('request_throughput'))} req/s, median E2EL "
            f"{_fmt(s.get('median_e2el_ms'))} ms, p99 {_fmt(s.get('p99_e2el_ms'))} ms, "
            f"{s.get('num_preemptions')} evictions{warnings}")


def _sweep_identity(hc: Any, scheduler: str) -> tuple[str, str]:
    """A multirun job's W&B group (the invocation's, from sweep.json) and its name (its
    swept values only)."""
    from experiments.run.sweep_info import read_sweep_info, swept_keys
    from experiments.run.wandb_log import run_name

    overrides = list(hc.overrides.task)
    info = read_sweep_info(str(hc.sweep.dir))
    if info is not None:
        return info.group, run_name(overrides, info.swept, scheduler)
    params = hc.sweeper.get("params") or {}
    return str(hc.sweep.dir), run_name(overrides, swept_keys([], dict(params)), scheduler)


# An absolute path: Hydra resolves a relative one against the calling module, which differs
# between `python -m experiments.run` and the installed `schedbench-run`.
@hydra.main(config_path=CONF_DIR, config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    """Run one job; print its summary (a single run) or one line (a job of a multirun)."""
    hc = HydraConfig.get()
    out_dir = hc.runtime.output_dir
    multirun = hc.mode == RunMode.MULTIRUN
    bar: bool | None = None
    tag = ""  # a multirun job's label: its swept values
    if multirun:
        exit_with_parent()  # a joblib worker must not outlive a killed sweep
        group, name = _sweep_identity(hc, str(cfg.scheduler.name))
        tag = f"[job {hc.job.num} | {name}]"
        if _progress_mode(cfg) == "auto":
            bar = False  # parallel jobs' bars would write over each other and the log
            if progress_enabled("auto", sys.stdout):
                print(f"{tag} started", flush=True)
    else:
        group, name = None, f"{cfg.scheduler.name}:{cfg.workload.name}"
    try:
        check_config(cfg)
    except ConfigError as e:
        if _enum_value(cfg.get("on_error", "fail")) != "record":
            _exit_user_error(e)  # one message, no traceback: the config is wrong
    overrides = [str(o) for o in hc.overrides.task]
    # One run per job folder at a time, never through a planted link, never over results
    # that are not ours: refused here, naming the folder. The callback refused these before
    # Hydra wrote .hydra/; a run that slipped in between has rewritten it, and the holder
    # puts its own back when it ends.
    with _job_folder(out_dir):
        hydra_dir = snapshot_files(Path(out_dir) / str(hc.output_subdir)) \
            if hc.output_subdir is not None else {}
        try:
            remove_stale_spools(out_dir)
            summary = _run_job(cfg, out_dir, tag, group, name, overrides, bar)
        except UserError as e:
            _exit_user_error(e)
        finally:
            restore_files(hydra_dir)
    if multirun:
        print(f"{tag} {format_line(summary)}", flush=True)
    else:
        print(format_summary(summary))
        print(f"outputs: {out_dir}")


def _exit_user_error(error: UserError) -> typing.NoReturn:
    """Exit with `error` as one line (its traceback only with SCHEDBENCH_DEBUG=1)."""
    if debug_enabled():
        raise error
    sys.exit(one_line(error))


@contextlib.contextmanager
def _job_folder(out_dir: str) -> Iterator[None]:
    """Hold the job folder's lock, or exit with one line saying why a run may not write
    there (`refuse_unsafe_folder`, the lock)."""
    try:
        refuse_unsafe_folder(out_dir)
        lock = JobLock(out_dir)
        lock.acquire()
    except (UnsafeFolderError, FolderBusyError) as e:
        sys.exit(f"error: {e}")
    try:
        yield
    finally:
        lock.release()


def _run_job(cfg: DictConfig, out_dir: str, tag: str, group: str | None,
             name: str, overrides: list[str], bar: bool | None = None) -> dict[str, Any]:
    """Skip (resume), run, or record the failure of one job; returns its summary. `tag`
    labels a multirun job's lines ("" for a single run)."""
    done = complete_result(out_dir, config_hash(cfg)) if cfg.get("resume", False) else None
    if done is not None:
        where = f"{tag} " if tag else ""
        print(f"{where}skipped (resume=true): {out_dir} already holds a complete result for "
              "this config")
        return done
    try:
        return run_experiment(cfg, out_dir, group=group, run_name=name, overrides=overrides,
                              bar=bar)
    except Exception as e:
        if _enum_value(cfg.get("on_error", "fail")) != "record":
            raise
        summary = failed_summary(cfg, e, overrides=overrides)
        commit_failure(out_dir, summary)
        log.error("job failed (on_error=record): %s", summary["error"])
        return summary


def require_conf_dir(conf_dir: str | Path) -> None:
    """Refuse to start, in one sentence, when the Hydra configs are not beside the package
    (a non-editable `pip install .` copies the code but not conf/)."""
    if not (Path(conf_dir) / "config.yaml").is_file():
        raise SystemExit(f"schedbench: the Hydra configs are not installed with the package "
                         f"(no {Path(conf_dir) / 'config.yaml'}); run it from a clone of the "
                         "repository, installed with `pip install -e .` (what `make demo` "
                         "does).")


def cli() -> None:
    """`main` after the command-line checks that Hydra cannot make (a scheduler key that a
    scheduler of the sweep lacks), with a hint after a failed override: the valid keys where
    a key was unknown. `--help` adds the config reference (docs/CONFIG.md) after Hydra's
    help. The console command `schedbench-run` (pyproject.toml) runs this."""
    require_conf_dir(CONF_DIR)
    defer_pandas_import()
    if {"--help", "-h"} & set(sys.argv[1:]):
        try:
            main()  # Hydra's help: its flags, the config groups, the composed config
        except SystemExit as e:
            if e.code not in (0, None):
                raise
        from experiments.run.config_docs import generate

        print("\n" + generate())
        return
    problem = explain_scheduler_keys(sys.argv[1:], CONF_DIR)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)
    if debug_enabled():
        os.environ.setdefault("HYDRA_FULL_ERROR", "1")  # Hydra's own errors in full too
    else:
        # Every config the command line makes, composed and checked before Hydra runs
        # anything: a user error is one line (Hydra's own report of it is several).
        problem = check_command_line(sys.argv[1:], CONF_DIR)
        if problem:
            sys.exit(one_line(problem))  # exit status 1, as Hydra's own errors
    try:
        main()
    except SystemExit as e:
        if e.code not in (0, None) and not isinstance(e.code, str):
            hint = explain_override_error(sys.argv[1:], CONF_DIR)
            if hint:
                print(hint, file=sys.stderr)
        raise


if __name__ == "__main__":
    cli()
