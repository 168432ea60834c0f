"""The contract every registered scheduler runs through (schedulers/registry.py): vllm,
sglang, and the test-only double of tests/fcfs_double.py, which tests/conftest.py adds
through the registry alone (its package and its entry: no YAML, no code in experiments/)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import build_scheduler_for, invariant_check_for, tiny_sim

from engines.engine import Engine
from experiments.run.build import build_scheduler
from schedulers import registry
from schedulers.contract import CapacityConfig, DecodeRunScheduler, Request, Scheduler

CAPACITY = 512


def requests(n: int = 40) -> list[Request]:
    """A burst that outgrows the pool: every scheduler must evict or queue to serve it."""
    return [Request(f"r{i}", [3 + (i * 31 + k * 7) % 500 for k in range(20 + (i * 37) % 90)],
                    max_tokens=1 + (i * 13) % 60, arrival_time=0.002 * i, ignore_eos=i % 3 == 0)
            for i in range(n)]


def replay(scheduler: Scheduler, decode_runs: bool, check: bool) -> tuple[pa.Table, pa.Table]:
    engine = Engine(scheduler, tiny_sim(), requests(), decode_runs=decode_runs,
                    check=invariant_check_for(scheduler) if check else None)
    result = engine.run()
    return result.requests, result.steps


def ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def test_the_registry_holds_the_project_schedulers_and_the_double() -> None:
    assert registry.names() == ("vllm", "sglang")  # what comparisons, sweeps and benches run
    assert "fcfs_double" in registry.all_names()  # added by tests/conftest.py alone


@pytest.mark.parametrize("name", registry.all_names())
def test_every_registered_scheduler_honours_the_contract(name: str) -> None:
    entry = registry.get(name)
    assert issubclass(entry.config_cls, CapacityConfig)
    # built from a config mapping, as experiments.run builds it
    sched = build_scheduler({"name": name}, CAPACITY)
    assert sched.name == name and sched.page_size >= 1
    reqs, steps = replay(sched, decode_runs=True, check=True)
    rows = reqs.to_pylist()
    assert len(rows) == 40
    for r in rows:
        assert r["finish_reason"] in ("stop", "length"), r
        assert r["output_len"] == len(r["token_times"]) >= 1
        assert r["output_len"] <= r["max_tokens"]
        assert r["first_token_time"] >= r["first_scheduled_time"] >= r["arrival_time"]
    used = steps.column("kv_used_tokens").to_pylist()
    assert max(used) <= CAPACITY + sched.page_size
    assert sched.stats().num_running == 0 and not sched.has_unfinished()
    # same config, same records, to the byte; decode runs change nothing
    again = replay(build_scheduler_for(name, CAPACITY), decode_runs=False, check=False)
    assert ipc(reqs) == ipc(again[0]) and ipc(steps) == ipc(again[1])


@pytest.mark.parametrize("name", registry.all_names())
def test_capabilities_are_what_the_engine_sees(
        name: str, make_scheduler: Callable[..., Scheduler]) -> None:
    sched = make_scheduler(name, CAPACITY)
    engine = Engine(sched, tiny_sim(), [])
    assert engine.decode_runs == isinstance(sched, DecodeRunScheduler)


def test_registration_checks_the_declared_capabilities() -> None:
    entry = registry.get("fcfs_double")

    @dataclasses.dataclass
    class NoCapacity:
        size: int

    with pytest.raises(TypeError, match=r"'bad': config_cls NoCapacity has no from_capacity"):
        registry.register(dataclasses.replace(entry, name="bad", config_cls=NoCapacity))
    with pytest.raises(ValueError, match=r"'bad': context_field='max_model_len' is not a field"):
        registry.register(dataclasses.replace(entry, name="bad", context_field="max_model_len"))
    with pytest.raises(ValueError, match=r"'vllm' is already registered"):
        registry.register(registry.get("vllm"))
    assert "bad" not in registry.all_names()


def test_the_test_only_scheduler_runs_a_whole_job_through_the_registry_alone(
        tmp_path: Path) -> None:
    """experiments.run with `scheduler=base_fcfs_double`: the schema Hydra checks, the build,
    the per-step invariant check and the context limit all come from the registry entry; the
    double has no YAML in conf/scheduler/ and nothing in experiments/ names it."""
    from test_reliability_config import job_config

    from experiments.run.main import run_experiment

    cfg = job_config("scheduler=base_fcfs_double", "scheduler.page_size=16",
                     "check_invariants=true")
    assert cfg.scheduler.name == "fcfs_double"
    summary = run_experiment(cfg, tmp_path / "job")
    assert summary["status"] == "ok" and summary["scheduler"] == "fcfs_double"
    assert summary["completed"] == summary["num_requests"] > 0
    with pytest.raises(Exception, match="page_sise"):
        job_config("scheduler=base_fcfs_double", "scheduler.page_sise=16")


def fcfs_with_context(kv_capacity_tokens: int, max_model_len: int | None = None,
                      **fields: object) -> Scheduler:
    """A `scheduler.target` factory that takes the context length (recorded on the double)."""
    from fcfs_double import make_scheduler

    sched = make_scheduler(kv_capacity_tokens, **fields)
    sched.max_model_len = max_model_len  # type: ignore[attr-defined]
    return sched


def test_a_target_scheduler_gets_the_top_level_max_model_len_or_says_it_cannot() -> None:
    from experiments.run.build import context_length

    target = {"target": f"{__name__}:fcfs_with_context", "page_size": 16}
    sched = build_scheduler(target, 256, max_model_len=96)
    assert sched.max_model_len == 96  # type: ignore[attr-defined]
    assert context_length(96, target, 8192, "model").source == "max_model_len"
    assert context_length(None, target, 8192, "model").source == "scheduler.target"
    with pytest.raises(ValueError, match=r"scheduler.target='fcfs_double:make_scheduler': "
                                         r"cannot be called with max_model_len"):
        build_scheduler({"target": "fcfs_double:make_scheduler"}, 256, max_model_len=96)
