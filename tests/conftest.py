"""Shared test factories: the tiny model and hardware specs, a scheduler by registry name
(`make_scheduler` fixture, `build_scheduler_for`), and the test-only scheduler
(tests/fcfs_double.py), registered here as any scheduler is (schedulers/registry.py).

Hypothesis tests cannot take fixtures per example: they import the plain functions
(`from conftest import TINY_MODEL, TINY_HW, build_scheduler_for`).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from fcfs_double import ENTRY as FCFS_DOUBLE_ENTRY
from hypothesis import settings as hypothesis_settings
from omegaconf import DictConfig

from engines.executors.sim import SimExecutor
from engines.executors.specs import HardwareSpec, ModelSpec
from schedulers import registry
from schedulers.contract import Scheduler

# Property tests draw the same examples on every machine and run (CI and users' machines must
# agree); SCHEDBENCH_HYPOTHESIS_PROFILE=explore draws fresh ones to hunt for new failures.
hypothesis_settings.register_profile("repeatable", derandomize=True)
hypothesis_settings.register_profile("explore", derandomize=False)
hypothesis_settings.load_profile(os.environ.get("SCHEDBENCH_HYPOTHESIS_PROFILE", "repeatable"))

# A model and a machine small enough that a replay of a few hundred requests takes
# milliseconds; the memory bandwidth is low so that decode steps dominate.
ROOT = Path(__file__).resolve().parents[1]

TINY_MODEL = ModelSpec(name="tiny", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, intermediate_size=128, vocab_size=512)
TINY_HW = HardwareSpec(name="hw", peak_flops=1e12, memory_bandwidth=1e9,
                       host_link_bandwidth=1e9)

# The test-only scheduler joins through the registry alone (no YAML, no code in experiments/).
if registry.find(FCFS_DOUBLE_ENTRY.name) is None:
    registry.register(FCFS_DOUBLE_ENTRY)


def compose_config(overrides: Sequence[str] = (), return_hydra_config: bool = False
                   ) -> DictConfig:
    """The run config conf/config.yaml composes with `overrides`, as a job gets it (the
    schemas registered; Hydra's global state cleared before and after); with
    `return_hydra_config`, Hydra's own node too."""
    from experiments.run.config import compose_run_config

    return compose_run_config(overrides, str(ROOT / "conf"),
                              return_hydra_config=return_hydra_config)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `slow` run only with SCHEDBENCH_SLOW=1 (pyproject.toml's marker)."""
    if os.environ.get("SCHEDBENCH_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: set SCHEDBENCH_SLOW=1 to run it")
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(skip)


def tiny_sim(step_overhead_s: float = 0.001) -> SimExecutor:
    """The sim executor on the tiny model and hardware."""
    return SimExecutor(TINY_MODEL, TINY_HW, step_overhead_s=step_overhead_s)


def build_scheduler_for(kind: str, capacity: int, **fields: Any) -> Scheduler:
    """The registered scheduler `kind` holding `capacity` KV slots, with config `fields`
    (the scheduler's own names)."""
    entry = registry.get(kind)
    return entry.build(entry.config(capacity, **fields))


def page_field(kind: str) -> str:
    """The config field that sets scheduler `kind`'s page size (its registry entry's)."""
    field = registry.get(kind).page_field
    assert field is not None, f"{kind} declares no page_field"
    return field


def invariant_check_for(scheduler: Scheduler) -> Callable[[Scheduler], None] | None:
    """The scheduler's invariant check as the engine takes it (None: it declares none)."""
    check = registry.get(scheduler.name).invariant_check(scheduler)
    return None if check is None else (lambda _s: check())


@pytest.fixture
def make_scheduler() -> Callable[..., Scheduler]:
    """`make_scheduler(kind, capacity, **fields)`: a registered scheduler by name."""
    return build_scheduler_for


def run_like_steps(rng: Any) -> list[tuple[list[tuple[int, int]], bool]]:
    """Steps shaped as a real run takes them, as ([(tokens, start position) per chunk],
    prefill): 120 decode batches of 1-12 sequences at contexts 30-400, 15 single prompts,
    15 prompts beside 1-7 decodes (the calibration tests time them by a known truth)."""
    steps: list[tuple[list[tuple[int, int]], bool]] = []
    for _ in range(120):
        b = int(rng.integers(1, 13))
        steps.append(([(1, int(c)) for c in rng.integers(30, 400, size=b)], False))
    for _ in range(15):
        steps.append(([(int(rng.integers(20, 200)), int(rng.integers(0, 40)))], True))
    for _ in range(15):
        b = int(rng.integers(1, 8))
        steps.append(([(int(rng.integers(20, 120)), 0)]
                      + [(1, int(c)) for c in rng.integers(30, 300, size=b)], True))
    return steps


def load_script(name: str) -> ModuleType:
    """scripts/<name>.py as a module (scripts/ is not a package), registered in sys.modules
    under its name while it runs, as an import would (a dataclass defined in it looks its
    module up there)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod
