"""`check_invariants`: the engine calls the scheduler's invariant check after every step; a run
with it on passes, and a corrupted scheduler state stops the run with a clear message."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from omegaconf import DictConfig

from engines.engine import Engine, InvariantViolation
from engines.records import Recorder
from experiments.inputs.workloads import build_workload
from experiments.run.build import build_executor, build_hardware, build_model, build_scheduler
from experiments.run.config import compose_run_config
from experiments.run.main import invariant_check, run_experiment
from schedulers import registry
from schedulers.contract import Scheduler

ROOT = Path(__file__).resolve().parents[1]
TINY = ["workload.num_requests=30", "workload.request_rate=200", "kv_capacity_tokens=2048",
        "workload.prompt_len.mean=200", "workload.output_len.mean=40", "progress=off"]


def job_config(*overrides: str) -> DictConfig:
    return compose_run_config([*TINY, *overrides], str(ROOT / "conf"))


def engine(cfg: DictConfig, check: Callable[[Scheduler], None] | None) -> Engine:
    sched = build_scheduler(cfg.scheduler, int(cfg.kv_capacity_tokens))
    model, hw = build_model(cfg.model), build_hardware(cfg.hardware)
    ex = build_executor(cfg.executor, model, hw,
                        num_slots=int(cfg.kv_capacity_tokens) + sched.page_size)
    reqs = build_workload(dict(cfg.workload), int(cfg.seed))
    return Engine(sched, ex, reqs, recorder=Recorder(), check=check)


@pytest.mark.parametrize("scheduler", [n for n in registry.all_names()
                                       if registry.get(n).self_check
                                       and not registry.get(n).test_only])
def test_the_check_runs_after_every_step_and_passes(tmp_path: Path, scheduler: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = job_config(f"scheduler={scheduler}", "check_invariants=true")
    calls: list[int] = []
    entry = registry.get(scheduler)
    real = entry.check_invariants

    def counting(s: Any) -> None:
        calls.append(1)
        if real is not None:
            real(s)
        else:
            s.check_invariants()  # the scheduler's own (SelfCheckingScheduler)

    monkeypatch.setitem(registry._ENTRIES, scheduler,
                        dataclasses.replace(entry, check_invariants=counting))
    summary = run_experiment(cfg, tmp_path / "on")
    assert summary["status"] == "ok" and summary["completed"] == 30
    # once per step, plus once at the end
    assert len(calls) == summary["num_steps"] + 1
    if scheduler == "vllm":  # a fact of this workload, not a capability
        assert summary["num_preemptions"] > 0  # the check saw preemptions too
    calls.clear()
    off = run_experiment(job_config(f"scheduler={scheduler}"), tmp_path / "off")
    assert calls == [] and off["completed"] == 30
    # the check does not change the results; config_hash ignores check_invariants
    assert ((tmp_path / "on" / "summary.json").read_bytes()
            == (tmp_path / "off" / "summary.json").read_bytes())


def corrupt_after(step: int, corrupt: Callable[[Any], None],
                  check: Callable[[Any], None]) -> Callable[[Scheduler], None]:
    seen = [0]

    def wrapped(s: Any) -> None:
        seen[0] += 1
        if seen[0] == step:
            corrupt(s)
        check(s)

    return wrapped


def test_a_page_held_twice_in_sglang_is_caught() -> None:
    cfg = job_config("scheduler=sglang")
    e = engine(cfg, None)

    def dup_free_page(s: Any) -> None:
        s.allocator.free_pages.append(s.allocator.free_pages[0])

    e.check = corrupt_after(5, dup_free_page, invariant_check(e.scheduler))
    with pytest.raises(InvariantViolation,
                       match=r"engine: sglang broke an invariant after step 5 at t=[0-9.]+s: "
                             r"InvariantError: \d+ pages accounted for .* pool has \d+"):
        e.run()


def test_a_negative_lock_ref_in_sglang_is_caught() -> None:
    cfg = job_config("scheduler=sglang")
    e = engine(cfg, None)

    def unlock(s: Any) -> None:
        s.tree_cache.root_node.lock_ref = -1

    e.check = corrupt_after(3, unlock, invariant_check(e.scheduler))
    with pytest.raises(InvariantViolation, match=r"after step 3 .*negative lock_ref -1"):
        e.run()


def test_a_wrong_ref_count_in_vllm_is_caught() -> None:
    cfg = job_config("scheduler=vllm")
    e = engine(cfg, None)

    def bump(s: Any) -> None:
        s.kv_cache_manager.block_pool.blocks[1].ref_cnt += 1

    e.check = corrupt_after(4, bump, invariant_check(e.scheduler))
    with pytest.raises(InvariantViolation,
                       match=r"engine: vllm broke an invariant after step 4 .*block 1: ref_cnt"):
        e.run()


def test_an_external_scheduler_without_a_check_is_refused() -> None:
    class Bare:
        name = "bare"

    with pytest.raises(ValueError, match=r"scheduler 'bare' declares no invariant check"):
        invariant_check(Bare())  # type: ignore[arg-type]
