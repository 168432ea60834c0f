"""The real executor's CPU timer (`executor.timer=cpu`): step time as the process's CPU seconds,
steady on a machine shared with other work; a bad choice fails naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from engines.executors.real import RealExecutor, RealExecutorConfig
from engines.model.tiny import save_tiny_checkpoint
from schedulers.contract import ScheduledChunk, StepPlan


def test_cpu_timer_measures_the_step(tmp_path: Path) -> None:
    ckpt = save_tiny_checkpoint(tmp_path / "tiny")
    ex = RealExecutor.from_config(RealExecutorConfig(model_path=str(ckpt), kernel="torch",
                                                     device="cpu", timer="cpu"))
    plan = StepPlan(step=0, page_size=16, chunks=[
        ScheduledChunk("a", list(range(3, 40)), 0, [0, 1, 2], sample=True)])
    result = ex.execute(plan)
    assert result.duration_s > 0 and set(result.sampled_token_ids) == {"a"}
    with pytest.raises(ValueError, match=r"timer='gpu': valid: wall, cpu"):
        RealExecutor(ex.model, kernel="torch", timer="gpu")
