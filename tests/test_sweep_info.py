"""Run names from swept values only, a W&B group per sweep invocation, grouped summary keys."""

from __future__ import annotations

from pathlib import Path

from experiments.run.sweep_info import SweepInfo, read_sweep_info, swept_keys, write_sweep_info
from experiments.run.wandb_log import grouped_summary, run_name, summary_key


def test_swept_keys_come_from_the_sweeper_and_multi_value_overrides() -> None:
    params = {"scheduler": "vllm,sglang", "workload.rate_scale": "1,2"}
    task = ["workload.num_requests=24", "kv_capacity_tokens=4096,8192", "seed=range(3)"]
    assert swept_keys(task, params) == ["scheduler", "workload.rate_scale",
                                        "kv_capacity_tokens", "seed"]
    # a single value on the command line fixes a key the sweeper would sweep
    assert swept_keys(["scheduler=vllm", "kv_capacity_tokens=1,2"], params) == [
        "workload.rate_scale", "kv_capacity_tokens"]


def test_run_names_hold_only_the_swept_values() -> None:
    overrides = ["workload.num_requests=24", "scheduler=sglang", "workload=azure_code",
                 "workload.rate_scale=2", "kv_capacity_tokens=4096"]
    swept = ["scheduler", "workload", "workload.rate_scale"]
    assert run_name(overrides, swept, "x") == "sglang azure_code rate_scale=2"
    assert run_name(overrides, ["kv_capacity_tokens"], "x") == "kv_capacity_tokens=4096"
    assert run_name(overrides, [], "vllm") == "vllm"


def test_each_invocation_gets_its_own_group(tmp_path: Path) -> None:
    a, b = SweepInfo.new("preemption", ["scheduler"]), SweepInfo.new("preemption", [])
    assert a.group != b.group and a.group.startswith("preemption-")
    write_sweep_info(tmp_path, a)
    assert read_sweep_info(tmp_path) == a
    assert read_sweep_info(tmp_path / "none") is None


def test_summary_keys_are_grouped_by_prefix() -> None:
    assert summary_key("median_ttft_ms") == "latency/median_ttft_ms"
    assert summary_key("median_e2el_victim_ms") == "eviction/median_e2el_victim_ms"
    assert summary_key("num_preemptions") == "eviction/num_preemptions"
    assert summary_key("prefix_cache_hit_rate") == "prefix_cache/prefix_cache_hit_rate"
    assert summary_key("swap_time_share") == "swap/swap_time_share"
    assert summary_key("output_throughput") == "throughput/output_throughput"
    assert summary_key("completed") == "requests/completed"
    assert summary_key("scheduler") == "run/scheduler"
    assert len(grouped_summary({"a": 1, "median_itl_ms": 2})) == 2
