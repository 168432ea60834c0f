"""The replay's progress bar: on a terminal only, quiet in CI, and it counts requests."""

from __future__ import annotations

import io

import pytest

from engines.engine import Engine
from engines.executors.sim import SimExecutor
from engines.executors.specs import HardwareSpec, ModelSpec
from experiments.inputs.workloads import build_workload
from experiments.run.progress import ProgressRecorder, progress_enabled
from schedulers.vllm import VllmScheduler, VllmSchedulerConfig


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_when_the_bar_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    assert progress_enabled("auto", Tty()) and not progress_enabled("auto", io.StringIO())
    monkeypatch.setenv("CI", "true")
    assert not progress_enabled("auto", Tty())
    assert progress_enabled("on", io.StringIO()) and not progress_enabled("off", Tty())
    with pytest.raises(ValueError, match=r"progress='loud': valid: auto, on, off"):
        progress_enabled("loud")


def test_progress_recorder_counts_requests_and_keeps_the_records(
        capsys: pytest.CaptureFixture[str]) -> None:
    reqs = build_workload({"name": "synthetic", "num_requests": 40, "request_rate": 100.0,
                           "prompt_len": {"dist": "fixed", "value": 64},
                           "output_len": {"dist": "fixed", "value": 8}}, seed=0)
    model = ModelSpec(name="m", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, intermediate_size=128, vocab_size=1000)
    hw = HardwareSpec(name="h", peak_flops=1e12, memory_bandwidth=1e11,
                      host_link_bandwidth=1e9)
    rec = ProgressRecorder(desc="test", every=4)
    sched = VllmScheduler(VllmSchedulerConfig.from_capacity(2048))
    result = Engine(sched, SimExecutor(model, hw), reqs, recorder=rec).run()
    assert rec._done == 40 and result.requests.num_rows == 40
    rec.close()
    assert "test" in capsys.readouterr().err
