"""A real run records the host's load and warns when it is above the cores (issue 25: on a
loaded machine the real executor's timings are noise), and names its clock; a simulated run
does neither (its times are predicted)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from conftest import compose_config

import experiments.run.main as run_main
from engines.model.tiny import save_tiny_checkpoint
from experiments.run.host_load import HostLoad, overload_warning, sample_host_load

ROOT = Path(__file__).resolve().parents[1]
LOAD_KEYS = ("host_load_1m_start", "host_load_1m_end", "host_cpu_cores")


def test_a_load_above_the_cores_is_overloaded_and_said_once_per_sample() -> None:
    assert sample_host_load(lambda: (3.5, 1.0, 0.5), cores=2) == HostLoad(3.5, 2)
    assert HostLoad(3.5, 2).overloaded and not HostLoad(2.0, 2).overloaded
    assert not HostLoad(None, 2).overloaded  # no load average on this platform

    def unavailable() -> tuple[float, float, float]:
        raise OSError("no load average")

    assert sample_host_load(unavailable, cores=4) == HostLoad(None, 4)
    assert overload_warning({"start": HostLoad(1.0, 2), "end": HostLoad(1.9, 2)}) is None
    line = overload_warning({"start": HostLoad(6.73, 2), "end": HostLoad(1.0, 2)})
    assert line is not None and line.startswith(
        "host load average 6.7 at the start, above its 2 CPU cores")
    assert "at the end" not in line and "noise" in line


def job(tmp_path: Path, overrides: list[str]) -> dict[str, object]:
    cfg = compose_config([
        "workload.num_requests=4", "workload.vocab_size=256", "kv_capacity_tokens=256",
        "workload.prompt_len={dist:uniform,low:8,high:16}",
        "workload.output_len={dist:uniform,low:2,high:6}", "progress=off",
        *overrides])
    return run_main.run_experiment(cfg, tmp_path / "job")


@pytest.mark.parametrize("load", [9.5, 0.5])
def test_a_real_run_records_the_load_and_warns_at_start_and_end_when_above_the_cores(
        load: float, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    ckpt = tmp_path / "ckpt"
    save_tiny_checkpoint(ckpt)
    samples = iter([HostLoad(load, 2), HostLoad(load + 1, 2)])  # start, end
    monkeypatch.setattr(run_main, "sample_host_load", lambda: next(samples))
    with caplog.at_level(logging.WARNING, logger=run_main.__name__):
        summary = job(tmp_path, ["executor=real", f"executor.model_path={ckpt}",
                                 "executor.kernel=torch", "executor.timer=cpu"])
    written = json.loads((tmp_path / "job" / "summary.json").read_text())
    assert {k: written[k] for k in LOAD_KEYS} == {
        "host_load_1m_start": load, "host_load_1m_end": load + 1, "host_cpu_cores": 2}
    assert written["clock"] == summary["clock"] == "cpu"
    said = [r.getMessage() for r in caplog.records if "host load average" in r.getMessage()]
    noted = [w for w in written["warnings"] if "host load average" in w]
    if load < 2:
        assert not said and not noted
        return
    assert said[0].endswith(overload_warning({"start": HostLoad(load, 2)}) or "")  # at start
    assert noted == [overload_warning({"start": HostLoad(load, 2),
                                       "end": HostLoad(load + 1, 2)})]
    assert any("at the end" in m for m in said[1:])  # and again when the run ends


def test_a_simulated_run_is_on_simulated_time_and_records_no_load(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch
                                                                  ) -> None:
    def never() -> HostLoad:
        raise AssertionError("a simulated run sampled the host's load")

    monkeypatch.setattr(run_main, "sample_host_load", never)
    summary = job(tmp_path, [])
    assert summary["clock"] == "simulated"
    assert not set(LOAD_KEYS) & set(summary)
