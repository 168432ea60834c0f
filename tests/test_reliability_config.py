"""Bad configurations are refused before anything runs, naming the value and what is valid."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import DictConfig

from experiments.run.config import compose_run_config
from experiments.run.main import run_experiment

ROOT = Path(__file__).resolve().parents[1]
TINY = ["workload.num_requests=5", "progress=off"]


def job_config(*overrides: str) -> DictConfig:
    return compose_run_config([*TINY, *overrides], str(ROOT / "conf"))


@pytest.mark.parametrize(("overrides", "message"), [
    # the declared ranges (experiments/run/ranges.py)
    (["kv_capacity_tokens=0"], r"kv_capacity_tokens=0: out of range; valid: auto \(the pool "
     r"vLLM leaves on the hardware\) or \[1, 2\^26\]"),
    (["kv_capacity_tokens=-64", "scheduler=sglang"], r"kv_capacity_tokens=-64: out of range"),
    (["max_model_len=0"], r"max_model_len=0: out of range; valid: \[1, 2\^24\]"),
    (["kv_capacity_tokens=1000"],
     r"vllm scheduler: kv_capacity_tokens=1000 is not a multiple of block_size=16"),
    (["scheduler=sglang", "scheduler.page_size=16", "kv_capacity_tokens=1000"],
     r"sglang scheduler: kv_capacity_tokens=1000 is not a multiple of page_size=16"),
    (["scheduler=sglang", "scheduler.page_size=16", "scheduler.chunked_prefill_size=8"],
     r"chunked_prefill_size=8: must be at least page_size \(16\)"),
    (["scheduler.max_num_seqs=8", "scheduler.max_num_batched_tokens=4"],
     r"max_num_batched_tokens=4: must be >= max_num_seqs \(8\)"),
    (["scheduler.policy=lifo"], r"policy='lifo': valid: fcfs, priority"),
    (["scheduler=sglang", "scheduler.schedule_policy=sjf"],
     r"schedule_policy='sjf': valid: fcfs, lpm, dfs-weight, lof, random"),
    (["scheduler=sglang", "scheduler.retraction_policy=oldest"],
     r"retraction_policy='oldest': valid: length, priority"),
    (["scheduler.preemption_mode=offload"],
     r"vllm scheduler: preemption_mode='offload': valid: recompute, swap"),
    (["scheduler=sglang", "scheduler.preemption_mode=evict"],
     r"sglang scheduler: preemption_mode='evict': valid: recompute, swap"),
    (["scheduler.preemption_mode=swap", "scheduler.host_kv_capacity_tokens=100"],
     r"host_kv_capacity_tokens=100 is not a multiple of the page size \(16\)"),
    (["scheduler=sglang", "scheduler.host_kv_capacity_tokens=-8"],
     r"scheduler\.host_kv_capacity_tokens=-8: out of range; valid: \[0, 2\^26\]"),
    (["admission.max_num_queued_tokens=0"],
     r"admission\.max_num_queued_tokens=0: out of range; valid: \[1, 2\^63-1\]"),
    (["scheduler.victim_policy=oldest"],
     r"vllm scheduler: victim_policy='oldest': valid: default, latest_arrival, fewest_outputs, "
     r"least_progress, most_kv, shortest_remaining, random"),
    (["scheduler=sglang", "scheduler.victim_policy=oldest"],
     r"sglang scheduler: victim_policy='oldest': valid: default, latest_arrival, "),
    (["scheduler=sglang", "scheduler.victim_policy=most_kv",
      "scheduler.retraction_policy=priority"],
     r"victim_policy='most_kv': replaces retraction_policy='priority'"),
])
def test_bad_values_are_refused_before_the_run(tmp_path: Path, overrides: list[str],
                                               message: str) -> None:
    cfg = job_config(*overrides)
    with pytest.raises(ValueError, match=message):
        run_experiment(cfg, tmp_path / "job")
    assert not (tmp_path / "job").exists()


@pytest.mark.parametrize(("override", "message"), [
    ("check_invariants=maybe", "Value 'maybe' is not a valid bool"),
    ("resume=perhaps", "Value 'perhaps' is not a valid bool"),
    ("on_error=ignore", "expected one of [fail, record]"),
])
def test_new_switches_are_typed_at_composition(override: str, message: str) -> None:
    with pytest.raises(Exception, match=f"Error merging override {override}") as e:
        job_config(override)
    assert message in str(e.value.__cause__)


def test_a_token_budget_below_one_page_still_runs(tmp_path: Path) -> None:
    """Upstream vLLM chunks a prefill over budgets smaller than a block and SGLang admits the
    first request whatever max_prefill_tokens is; both run (not refused)."""
    v = run_experiment(job_config("scheduler.max_num_seqs=1",
                                  "scheduler.max_num_batched_tokens=8"), tmp_path / "v")
    s = run_experiment(job_config("scheduler=sglang", "scheduler.page_size=16",
                                  "scheduler.max_prefill_tokens=8"), tmp_path / "s")
    assert v["completed"] == s["completed"] == 5
