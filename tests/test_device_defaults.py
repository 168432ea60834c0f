"""Upstream's defaults for the configured hardware (issue 26 item 4): vLLM's
`max_num_batched_tokens` / `max_num_seqs` and SGLang's `chunked_prefill_size` resolved from
the device's memory and name when a config leaves them null, each rule at its thresholds, and
summary.json recording every value with its source."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import compose_config

from experiments.run.build import build_job_scheduler
from experiments.run.main import run_experiment
from schedulers import registry
from schedulers.device_defaults import GIB, MIB, DeviceSpec
from schedulers.registry import SchedulerEntry
from schedulers.sglang.memory_defaults import chunked_prefill_size_for
from schedulers.sglang.memory_defaults import device_defaults as sglang_defaults
from schedulers.vllm.batch_defaults import resolve_batch_limits, server_batch_defaults

ROOT = Path(__file__).resolve().parents[1]
H100 = DeviceSpec("NVIDIA H100 80GB HBM3", 81559 * MIB)
A100 = DeviceSpec("NVIDIA A100-SXM4-80GB", 81920 * MIB)


def gpu(gib: float, name: str = "NVIDIA H100") -> DeviceSpec:
    return DeviceSpec(name, gib * GIB)


# --- vLLM: EngineArgs.get_batch_defaults, OPENAI_API_SERVER -----------------------------------

@pytest.mark.parametrize(("device", "tokens", "seqs"), [
    (gpu(160), 16384, 1024),                      # B200 class: >= 160 GiB
    (DeviceSpec("NVIDIA B200", 160 * GIB - 1), 8192, 1024),  # just under: the H100/H200 band
    (gpu(160, "NVIDIA A100"), 16384, 1024),       # the A100 exception is only below 160 GiB
    (gpu(70), 8192, 1024),                        # >= 70 GiB, not an A100
    (DeviceSpec("NVIDIA H100", 70 * GIB - 1), 2048, 256),
    (A100, 2048, 256),                            # >= 70 GiB but an A100 (vLLM PR #17885)
    (H100, 8192, 1024),
    (DeviceSpec("NVIDIA H200", 143771 * MIB), 8192, 1024),
    (gpu(24, "NVIDIA L4"), 2048, 256),
    (DeviceSpec("", 0.0), 2048, 256),             # memory unknown: upstream's fallback
])
def test_vllm_server_batch_defaults_at_the_thresholds(device: DeviceSpec, tokens: int,
                                                      seqs: int) -> None:
    got = server_batch_defaults(device)
    assert (got.max_num_batched_tokens, got.max_num_seqs) == (tokens, seqs)


def test_vllm_caps_apply_to_defaulted_values_only() -> None:
    # unset budget, tiny context: capped at max_num_seqs x max_model_len
    out = resolve_batch_limits(None, None, 4, H100)
    assert (out["max_num_batched_tokens"].value, out["max_num_seqs"].value) == (4096, 1024)
    assert out["max_num_batched_tokens"].source.endswith("capped at max_num_seqs x max_model_len")
    # an explicit budget below the default running cap: the unset cap follows it
    out = resolve_batch_limits(512, None, 8192, H100)
    assert out["max_num_batched_tokens"].source == "config"
    assert out["max_num_seqs"].value == 512
    assert out["max_num_seqs"].source.endswith("capped at max_num_batched_tokens")
    # an explicit cap: the defaulted budget is capped by it x max_model_len
    out = resolve_batch_limits(None, 4, 100, H100)
    assert (out["max_num_batched_tokens"].value, out["max_num_seqs"].value) == (400, 4)
    # both explicit: as given, even where the defaults' caps would have changed them
    out = resolve_batch_limits(64, 2048, 4, H100)
    assert (out["max_num_batched_tokens"].value, out["max_num_seqs"].value) == (64, 2048)
    assert {s.source for s in out.values()} == {"config"}
    # chunked prefill off: an unset budget is raised to the context length first
    out = resolve_batch_limits(None, None, 32768, A100, enable_chunked_prefill=False)
    assert out["max_num_batched_tokens"].value == 32768
    source = resolve_batch_limits(None, None, 8192, H100)["max_num_seqs"].source
    assert source == ("vllm 0.32.0 get_batch_defaults: NVIDIA H100 80GB HBM3 79.6 GiB "
                      "(>= 70 GiB, not an A100)")


# --- SGLang: handle_gpu_memory_settings ----------------------------------------------------

@pytest.mark.parametrize(("mib", "size"), [
    (20 * 1024 - 1, 2048), (20 * 1024, 4096), (35 * 1024 - 1, 4096), (35 * 1024, 4096),
    (60 * 1024 - 1, 4096), (60 * 1024, 8192), (90 * 1024 - 1, 8192), (90 * 1024, 8192),
    (160 * 1024 - 1, 8192), (160 * 1024, 16384), (0, 4096),
])
def test_sglang_chunked_prefill_size_at_the_thresholds(mib: int, size: int) -> None:
    assert chunked_prefill_size_for(DeviceSpec("gpu", mib * MIB))[0] == size


def test_sglang_explicit_chunked_prefill_size_wins() -> None:
    for given in (-1, 256):
        got = sglang_defaults({"chunked_prefill_size": given}, H100)["chunked_prefill_size"]
        assert (got.value, got.source) == (given, "config")
    got = sglang_defaults({"chunked_prefill_size": None}, H100)["chunked_prefill_size"]
    assert got.value == 8192 and got.source.startswith("sglang 0.5.22 handle_gpu_memory_settings")


# --- applied where the scheduler is built --------------------------------------------------

def test_build_resolves_null_fields_from_the_device_and_keeps_explicit_ones() -> None:
    job = build_job_scheduler(
        {"name": "vllm", "max_num_seqs": None, "max_num_batched_tokens": None}, 4096, 8192, H100)
    sched, limits = job.scheduler, job.limits
    config: Any = sched.config  # type: ignore[attr-defined]
    assert (config.max_num_batched_tokens, config.max_num_seqs) == (8192, 1024)
    assert limits["max_num_seqs"].value == 1024
    job = build_job_scheduler(
        {"name": "vllm", "max_num_seqs": 32, "max_num_batched_tokens": None}, 4096, 8192, A100)
    sched, limits = job.scheduler, job.limits
    config = sched.config  # type: ignore[attr-defined]
    assert (config.max_num_batched_tokens, config.max_num_seqs) == (2048, 32)
    assert limits["max_num_seqs"].source == "config"
    job = build_job_scheduler(
        {"name": "sglang", "chunked_prefill_size": None}, 4096, 8192, gpu(180))
    sched, limits = job.scheduler, job.limits
    assert sched.config.chunked_prefill_size == 16384  # type: ignore[attr-defined]


def test_registry_refuses_device_fields_without_a_resolver() -> None:
    vllm = registry.get("vllm")
    with pytest.raises(ValueError, match="device_fields and device_defaults go together"):
        registry.check_entry(SchedulerEntry(
            name="half", config_cls=vllm.config_cls, build=vllm.build,
            capacity_field="num_blocks", evicts=True, device_fields=("max_num_seqs",)))
    with pytest.raises(ValueError, match="device field 'nope'"):
        registry.check_entry(SchedulerEntry(
            name="half", config_cls=vllm.config_cls, build=vllm.build,
            capacity_field="num_blocks", evicts=True, device_fields=("nope",),
            device_defaults=vllm.device_defaults))


# --- summary.json ----------------------------------------------------------------------------

def run_job(tmp_path: Path, *overrides: str) -> dict[str, Any]:
    cfg = compose_config([
        "workload.num_requests=12", "workload.request_rate=100", "progress=off",
        *overrides])
    return run_experiment(cfg, tmp_path / "job")


def test_summary_records_each_limit_with_its_source(tmp_path: Path) -> None:
    # the default config leaves both null; on an H200 (stated: the default is an A100)
    unset = run_job(tmp_path / "unset", "hardware=h200", "executor.cost_model=roofline")
    assert unset["scheduler_limits"] == {
        key: {"value": value, "source": "vllm 0.32.0 get_batch_defaults: NVIDIA H200 140.4 GiB "
                                         "(>= 70 GiB, not an A100)"}
        for key, value in (("max_num_batched_tokens", 8192), ("max_num_seqs", 1024))}
    given = run_job(tmp_path / "given", "hardware=a100_80g", "scheduler.max_num_seqs=64")
    assert given["scheduler_limits"] == {
        "max_num_batched_tokens": {"value": 2048, "source": "vllm 0.32.0 get_batch_defaults: "
                                   "NVIDIA A100-SXM4-80GB 80.0 GiB (>= 70 GiB but an A100)"},
        "max_num_seqs": {"value": 64, "source": "config"}}
    sglang = run_job(tmp_path / "sglang", "scheduler=sglang", "scheduler.chunked_prefill_size=-1",
                     "scheduler.max_running_requests=32")
    assert sglang["scheduler_limits"] == {
        "chunked_prefill_size": {"value": -1, "source": "config"},
        "max_running_requests": {"value": 32, "source": "config"}}


def test_the_a10_gets_upstreams_24_gb_defaults_and_the_a40_fit(tmp_path: Path) -> None:
    # conf/hardware/a10.yaml: NVML's total (23,028 MiB) and the name torch reports
    a10 = ("hardware=a10", "executor.cost_model=fitted_roofline")
    vllm = run_job(tmp_path / "vllm", *a10)
    source = "vllm 0.32.0 get_batch_defaults: NVIDIA A10 22.5 GiB (< 70 GiB)"
    assert vllm["scheduler_limits"] == {
        "max_num_batched_tokens": {"value": 2048, "source": source},
        "max_num_seqs": {"value": 256, "source": source}}
    assert vllm["step_time_source"] == ("roofline fitted to vidur a40 llama-2-7b "
                                        "(extrapolated from a40 to a10)")
    sglang = run_job(tmp_path / "sglang", "scheduler=sglang", *a10)
    limits = sglang["scheduler_limits"]
    assert limits["chunked_prefill_size"] == {
        "value": 4096, "source": "sglang 0.5.22 handle_gpu_memory_settings: NVIDIA A10 22.5 GiB "
                                 "(< 35 GiB)"}
    # resolve_max_num_reqs from the A10's pool and the context: 16,320 / 4,096 x 512 -> 2,040,
    # then the floor of 2,048 rows
    assert sglang["kv_capacity_tokens"] == vllm["kv_capacity_tokens"] == 16320
    assert limits["max_running_requests"]["value"] == 2048
