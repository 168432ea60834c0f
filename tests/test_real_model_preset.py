"""`experiment=real_model_pressure`: the real model under memory pressure out of the box
(issue 25: `workload=smollm2_prompts` alone fills 2-3 % of the default pool and evicts
nothing, so it answers none of the questions).

The preset's composition is checked always; with the checkpoint (`make model`), its workload
on the simulator with the output lengths of the preset's real run (conf/lengths/) must
evict in both schedulers, and the preset itself, on the real executor (slow: about two
minutes of CPU), must too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import DictConfig, open_dict

from experiments.run.config import compose_run_config
from experiments.run.main import run_experiment
from tests.real_model import real_model_test

ROOT = Path(__file__).resolve().parents[1]
PRESET = "experiment=real_model_pressure"
LENGTHS = "conf/lengths/real_model_pressure.json"


def job_config(*overrides: str, hydra: bool = False) -> DictConfig:
    """conf/config.yaml with `overrides` (and Hydra's own node with `hydra`)."""
    return compose_run_config(list(overrides), str(ROOT / "conf"), return_hydra_config=hydra)


def preset(*overrides: str, hydra: bool = False) -> DictConfig:
    """The preset's config with `overrides`."""
    return job_config(PRESET, *overrides, hydra=hydra)


def test_the_preset_runs_the_real_model_on_a_tight_pool_with_one_torch_thread() -> None:
    cfg = preset(hydra=True)
    assert cfg.executor.name == "real" and cfg.executor.timer == "cpu"
    assert cfg.model.name == "smollm2_135m" and cfg.executor.model_path == cfg.model.checkpoint
    assert cfg.workload.name == "prompts"
    demand = cfg.workload.num_requests * cfg.workload.max_tokens  # outputs alone, at most
    assert cfg.kv_capacity_tokens * 4 <= demand  # not 2-3 % used: a pool a few requests fill
    assert cfg.hydra.job.env_set.OMP_NUM_THREADS == "1"
    assert cfg.hydra.sweeper.params.scheduler == "vllm,sglang_optimistic"
    sglang = preset("scheduler=sglang_optimistic").scheduler
    assert sglang.name == "sglang" and sglang.schedule_conservativeness == 0.1
    assert sglang.new_token_ratio_decay_steps == 50


def summaries(folder: Path) -> dict[str, dict[str, object]]:
    out = {}
    for path in sorted(folder.glob("*/summary.json")):
        summary = json.loads(path.read_text())
        out[str(summary["scheduler"])] = summary
    return out


@real_model_test
@pytest.mark.parametrize("scheduler", ["vllm", "sglang_optimistic"])
def test_on_the_simulator_with_the_real_lengths_both_schedulers_evict(scheduler: str,
                                                                      tmp_path: Path) -> None:
    cfg = preset(f"scheduler={scheduler}", f"workload.output_lengths={LENGTHS}")
    sim = job_config("executor=sim", "executor.cost_model=profile_batch",
                     "executor.profile=conf/profiles/smollm2_135m_cpu_padded.json")
    with open_dict(cfg):  # the preset's pool, workload and scheduler on the simulator
        cfg.executor = sim.executor
    summary = run_experiment(cfg, tmp_path / "job")
    assert summary["completed"] == cfg.workload.num_requests
    assert int(summary["num_preemptions"]) > 0 and int(summary["num_victims"]) > 0
    assert float(summary["max_kv_utilization"]) > 0.9


@real_model_test
@pytest.mark.slow
def test_the_preset_on_the_real_model_evicts_in_both_schedulers(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "experiments.run", "-m", PRESET,
                    f"hydra.sweep.dir={tmp_path}", "hydra.callbacks.comparison.figures=false"],
                   cwd=ROOT, check=True, capture_output=True, timeout=1200,
                   env={**os.environ, "CI": "true"})
    found = summaries(tmp_path)
    assert set(found) == {"vllm", "sglang"}
    for summary in found.values():
        assert summary["status"] == "ok" and summary["clock"] == "cpu"
        assert int(summary["num_preemptions"]) > 0, summary["scheduler"]  # type: ignore[call-overload]
        assert {"host_load_1m_start", "host_load_1m_end", "host_cpu_cores"} <= set(summary)
