"""The contract every registered scheduler runs through (schedulers/registry.py): the
built-in ones (vllm, sglang, the example fcfs_reserve) and the test-only double of
tests/fcfs_double.py, which tests/conftest.py adds through the registry alone (its package
and its entry: no YAML, no code in experiments/). Nothing here names a scheduler to decide
what to check: each entry's declared capabilities say it."""

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
from schedulers.contract import (
    ENGINE_LOOPS,
    SYNCHRONOUS,
    CapacityConfig,
    DecodeRunScheduler,
    LoopDeclaringScheduler,
    Request,
    Scheduler,
    SwappingScheduler,
)
from schedulers.eviction import EvictionOptions

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


ROOT = Path(__file__).resolve().parents[1]
SHIPPED = [n for n in registry.all_names() if not registry.get(n).test_only]


def test_the_default_comparison_is_what_the_entries_declare() -> None:
    assert registry.names() == tuple(n for n in SHIPPED
                                     if registry.get(n).in_default_comparison)
    assert registry.names()  # something to compare
    assert "fcfs_double" in registry.all_names()  # added by tests/conftest.py alone
    assert "fcfs_double" not in registry.names()
    for capability in registry.CAPABILITIES:
        assert set(registry.names(capability)) <= set(registry.names())
    with pytest.raises(ValueError, match="capability 'fast'"):
        registry.names("fast")


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_scheduler_has_its_yaml_and_its_upstreams_cases(name: str) -> None:
    entry = registry.get(name)
    yaml = ROOT / "conf" / "scheduler" / f"{name}.yaml"
    assert yaml.is_file() and f"- base_{name}" in yaml.read_text()
    cases = sorted((ROOT / "tests" / "conformance" / name).glob("*.ref.jsonl*"))
    if entry.upstream is not None:
        assert cases, f"{name} mirrors {entry.upstream} but has no conformance case"
    else:
        assert not cases, f"{name} declares no upstream, yet has conformance cases"


@pytest.mark.parametrize("name", registry.all_names())
def test_declared_capabilities_hold(name: str) -> None:
    entry = registry.get(name)
    sched = build_scheduler_for(name, CAPACITY)
    # self_check: the check exists and passes on a fresh scheduler
    check = entry.invariant_check(sched)
    assert (check is not None) == entry.self_check
    if check is not None:
        check()
    # page_field sets the built scheduler's page size
    if entry.page_field is not None:
        assert build_scheduler_for(name, CAPACITY, **{entry.page_field: 8}).page_size == 8
    # evicts: the shared eviction options exist exactly then; one that never evicts does not
    # evict under a burst that outgrows its pool
    assert issubclass(entry.config_cls, EvictionOptions) == entry.evicts
    _, steps = replay(sched, decode_runs=True, check=entry.self_check)
    if not entry.evicts:
        assert sum(steps.column("num_preempted").to_pylist()) == 0
    # swaps: built with swap, it exposes its host pool; without, it refuses swap by name
    if entry.swaps:
        swapper = build_scheduler_for(name, CAPACITY, preemption_mode="swap",
                                      host_kv_capacity_tokens=CAPACITY)
        assert isinstance(swapper, SwappingScheduler) and swapper.host_pool is not None
    elif entry.evicts:
        with pytest.raises(ValueError, match=rf"scheduler \({name}\): preemption_mode='swap': "
                                             "this scheduler does not swap"):
            build_scheduler_for(name, CAPACITY, preemption_mode="swap")


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


def engine_loop(scheduler: Scheduler) -> str:
    return (scheduler.engine_loop if isinstance(scheduler, LoopDeclaringScheduler)
            else SYNCHRONOUS).name


@pytest.mark.parametrize("name", registry.all_names())
def test_every_declared_loop_runs(name: str) -> None:
    """loops: the fields of each choice build a scheduler that declares that loop, and the
    engine runs it to the end; the config's defaults select the first."""
    entry = registry.get(name)
    assert engine_loop(build_scheduler_for(name, CAPACITY)) == entry.loops[0].loop
    assert entry.pipelined == any(ENGINE_LOOPS[c.loop].pipelined for c in entry.loops)
    for choice in entry.loops:
        sched = build_scheduler_for(name, CAPACITY, **choice.config_fields())
        assert engine_loop(sched) == choice.loop
        engine = Engine(sched, tiny_sim(), requests(),
                        check=invariant_check_for(sched) if entry.self_check else None)
        rows = engine.run().requests.to_pylist()
        assert engine.loop.name == choice.loop
        assert all(r["finish_reason"] in ("stop", "length") for r in rows)


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
    with pytest.raises(TypeError, match=r"'bad': evicts=False but config_cls FcfsConfig "
                                        "carries EvictionOptions"):
        registry.register(dataclasses.replace(entry, name="bad", evicts=False))
    example = registry.find("fcfs_reserve")  # the worked example; the suite runs without it
    if example is not None:
        with pytest.raises(TypeError, match=r"'bad': evicts=True but config_cls "
                                            "FcfsReserveConfig does not derive"):
            registry.register(dataclasses.replace(example, name="bad", evicts=True))
        with pytest.raises(ValueError, match=r"'bad': swaps=True needs evicts=True"):
            registry.register(dataclasses.replace(example, name="bad", swaps=True))
    with pytest.raises(ValueError, match=r"'bad': upstream and conformance go together"):
        registry.register(dataclasses.replace(entry, name="bad", upstream="x 1.0"))
    with pytest.raises(ValueError, match=r"'bad': page_field='block' is not a field"):
        registry.register(dataclasses.replace(entry, name="bad", page_field="block"))
    with pytest.raises(ValueError, match=r"'bad': loop 'mixed' is unknown; valid: "
                                         "synchronous, batch_queue, overlap"):
        registry.register(dataclasses.replace(entry, name="bad",
                                              loops=(registry.LoopChoice("mixed"),)))
    with pytest.raises(ValueError, match=r"'bad': loop 'batch_queue' selected by async: not "
                                         "a field of FcfsConfig"):
        registry.register(dataclasses.replace(entry, name="bad", loops=(
            registry.LoopChoice("batch_queue", (("async", True),)),)))
    with pytest.raises(ValueError, match=r"'bad': loops is empty"):
        registry.register(dataclasses.replace(entry, name="bad", loops=()))
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
