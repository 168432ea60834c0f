"""The run config's defaults are upstream's (issue 26's default switch, issue 27 item 6): the
deployment loops (vLLM's AsyncScheduler, SGLang's overlap loop), the pair with every operator
measured (Llama-2-7B on an A100-80GB) timed by its measured profile, the KV pool vLLM would
leave on that GPU, the batch limits its launchers resolve; and where each came from is in
summary.json. The loop a job runs is resolved with its source, and a combination the selected
loop cannot run falls back to the synchronous one with a warning, never silently."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import compose_config

from experiments.run.build import build_job_scheduler
from experiments.run.main import run_experiment
from schedulers import registry

# a few requests of the default workload, arriving together (fast; still the default config)
FEW = ["workload.num_requests=24", "workload.request_rate=100", "progress=off"]


def test_the_default_config_is_upstreams_defaults_on_the_measured_pair() -> None:
    cfg = compose_config()
    assert (cfg.model.name, cfg.hardware.name) == ("llama2_7b", "a100_80g")
    assert (cfg.executor.name, cfg.executor.cost_model) == ("sim", "measured")
    assert cfg.kv_capacity_tokens == "auto"
    assert cfg.scheduler.name == "vllm" and cfg.scheduler.async_scheduling is True
    assert compose_config(["scheduler=sglang"]).scheduler.disable_overlap_schedule is False
    # sglang_optimistic inherits sglang's loop
    opt = compose_config(["scheduler=sglang_optimistic"]).scheduler
    assert opt.disable_overlap_schedule is False


def test_the_default_workload_fits_the_default_models_context() -> None:
    cfg = compose_config()
    longest = int(cfg.workload.prompt_len.max) + max(int(cfg.workload.output_len.max),
                                                     int(cfg.workload.max_tokens))
    assert longest <= int(cfg.model.max_position_embeddings), longest


@pytest.mark.parametrize(("scheduler", "loop", "source", "limits"), [
    ("vllm", "batch_queue", "config (async_scheduling=true)",
     {"max_num_batched_tokens": 2048, "max_num_seqs": 256}),
    ("sglang", "overlap", "config (disable_overlap_schedule=false)",
     {"chunked_prefill_size": 8192, "max_running_requests": 4096}),
])
def test_a_default_run_records_where_each_default_came_from(
        tmp_path: Path, scheduler: str, loop: str, source: str, limits: dict[str, int]) -> None:
    summary = run_experiment(compose_config([*FEW, f"scheduler={scheduler}"]), tmp_path / "job")
    assert (summary["engine_loop"], summary["engine_loop_source"]) == (loop, source)
    assert summary["step_time_source"] == "measured profile: vidur a100 llama-2-7b"
    assert summary["kv_capacity_tokens"] == 124_688
    assert summary["kv_capacity_source"].startswith("vllm 0.32.0 determine_available_memory")
    assert (summary["max_model_len"], summary["max_model_len_source"]) == (
        4096, "model.max_position_embeddings")
    got = {k: v["value"] for k, v in summary["scheduler_limits"].items()}
    assert got == limits
    # the A100 rules of both launchers (vLLM PR #17885's exception; SGLang's < 90 GiB band)
    device_sized = ("max_num_batched_tokens", "max_num_seqs", "chunked_prefill_size")
    assert all("A100-SXM4-80GB" in v["source"] for k, v in summary["scheduler_limits"].items()
               if k in device_sized)
    if scheduler == "sglang":  # derived from the pool and the context, not the device
        assert summary["scheduler_limits"]["max_running_requests"]["source"] == (
            "sglang 0.5.22 resolve_max_num_reqs: 124688 token slots, context 4096; "
            "max(min(slots / context x 512, 4096), 2048), at most slots / 2")
    assert summary["completed"] == 24 and summary["warnings"] == []


@pytest.mark.parametrize(("override", "loop", "source"), [
    ("scheduler.async_scheduling=false", "synchronous", "config (async_scheduling=false)"),
])
def test_the_synchronous_loop_is_one_override_away(override: str, loop: str,
                                                    source: str) -> None:
    cfg = compose_config([override])
    job = build_job_scheduler(cfg.scheduler, 4096, 4096)
    assert (job.scheduler.engine_loop.name, job.loop.value, job.loop.source) == (
        loop, loop, source)
    cfg = compose_config(["scheduler=sglang", "scheduler.disable_overlap_schedule=true"])
    job = build_job_scheduler(cfg.scheduler, 4096, 4096)
    assert (job.loop.value, job.loop.source) == (
        "synchronous", "config (disable_overlap_schedule=true)")


def test_sglang_swap_falls_back_to_event_loop_normal_and_says_so(tmp_path: Path) -> None:
    overrides = [*FEW, "scheduler=sglang", "scheduler.preemption_mode=swap",
                 "kv_capacity_tokens=4096", "scheduler.host_kv_capacity_tokens=4096"]
    summary = run_experiment(compose_config(overrides), tmp_path / "job")
    assert summary["engine_loop"] == "synchronous"
    assert summary["engine_loop_source"].startswith("overlap ruled out: preemption_mode=swap")
    assert any(w.startswith("engine loop: sglang runs synchronous") for w in summary["warnings"])
    # vLLM's batch queue runs swap itself: no fallback
    job = build_job_scheduler(compose_config(["scheduler.preemption_mode=swap"]).scheduler, 4096,
                              4096)
    assert (job.loop.value, job.loop_warning) == ("batch_queue", None)


def test_loop_for_reads_the_selecting_fields_and_the_fallback() -> None:
    sglang = registry.get("sglang")
    fields: dict[str, Any] = {"disable_overlap_schedule": False, "preemption_mode": "swap"}
    out, loop, fell_back = sglang.loop_for(fields)
    assert (out["disable_overlap_schedule"], loop.value, fell_back) == (True, "synchronous", True)
    out, loop, fell_back = sglang.loop_for({"disable_overlap_schedule": False})
    assert (loop.value, loop.source, fell_back) == (
        "overlap", "config (disable_overlap_schedule=false)", False)
    # a field the config leaves out: the config class's default (synchronous)
    assert registry.get("vllm").loop_for({})[1].value == "synchronous"
    only = registry.get("fcfs_reserve").loop_for({})[1]
    assert (only.value, only.source) == ("synchronous", "the scheduler's only loop")


def test_the_auto_pool_of_the_real_executor_is_its_stated_number() -> None:
    from experiments.run.build import build_hardware, build_model, job_kv_capacity

    def pool(*overrides: str) -> Any:
        cfg = compose_config(list(overrides))
        return job_kv_capacity(cfg, build_model(cfg.model), build_hardware(cfg.hardware), 4096)

    real = pool("executor=real")
    assert real.tokens == 16384 and real.estimate is None
    assert real.source.startswith("executor.auto_kv_capacity_tokens")
    assert pool("executor=real", "executor.auto_kv_capacity_tokens=512").tokens == 512
    given = pool("executor=real", "kv_capacity_tokens=4096")
    assert (given.tokens, given.source) == (4096, "config")
    sim = pool()  # the simulator's auto: the GPU's memory
    assert sim.estimate is not None and sim.tokens == sim.estimate.kv_capacity_tokens


def test_an_unmeasured_pair_is_refused_naming_the_cost_models_that_run_it(tmp_path: Path
                                                                          ) -> None:
    with pytest.raises(ValueError, match=r"no measured profile of model='llama3_8b'.*"
                                         r"executor.cost_model=fitted_roofline"):
        run_experiment(compose_config([*FEW, "model=llama3_8b"]), tmp_path / "job")
    summary = run_experiment(compose_config([*FEW, "model=llama3_8b", "hardware=h200",
                                             "executor.cost_model=roofline"]),
                             tmp_path / "roofline")
    assert summary["step_time_source"] == "ideal roofline"
