"""The real executor's step timers (`executor.timer`, DESIGN.md "The real executor's step
clock"): `min_of_k` repeats a step's forward pass k times and keeps the fastest, which is
harmless because recomputing the same positions writes the same KV values: the cache and the
sampled tokens after k passes equal those after one, over a whole engine run with prefill
chunks, decode and preemption; `auto` resolves to reference on a CPU; a bad choice fails
naming the field. No test asserts a time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from engines.engine import Engine
from engines.executors.real import RealExecutor, RealExecutorConfig, resolve_timer
from engines.model import PagedDecoder
from engines.model.tiny import save_tiny_checkpoint
from schedulers.contract import Request, ScheduledChunk, StepPlan
from schedulers.vllm import VllmScheduler, VllmSchedulerConfig
from tests.test_metrics_doc import documented

ROOT = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> PagedDecoder:
    ckpt = save_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "llama", "llama", seed=0)
    return PagedDecoder.from_pretrained(ckpt, dtype="float32", device="cpu")


def test_cpu_timer_measures_the_step(tmp_path: Path) -> None:
    ckpt = save_tiny_checkpoint(tmp_path / "tiny")
    ex = RealExecutor.from_config(RealExecutorConfig(model_path=str(ckpt), kernel="torch",
                                                     device="cpu", timer="cpu"))
    assert (ex.timer.name, ex.timer.repeats, ex.timer.clock) == ("cpu", 1, "process_time")
    plan = StepPlan(step=0, page_size=16, chunks=[
        ScheduledChunk("a", list(range(3, 40)), 0, [0, 1, 2], sample=True)])
    result = ex.execute(plan)
    assert result.duration_s > 0 and set(result.sampled_token_ids) == {"a"}


def test_bad_timer_choices_name_the_field(model: PagedDecoder) -> None:
    with pytest.raises(ValueError, match=r"executor.timer='gpu': valid: auto, wall, cpu, "
                                         r"min_of_k"):
        RealExecutor(model, kernel="torch", timer="gpu")
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match=rf"executor.timer_repeats={bad!r}: must be"):
            RealExecutor(model, kernel="torch", timer="min_of_k", timer_repeats=bad)  # type: ignore[arg-type]


def test_auto_is_reference_on_a_cpu_and_one_pass_on_a_gpu() -> None:
    cpu1 = resolve_timer("auto", 5, CPU, num_threads=1)
    assert (cpu1.name, cpu1.repeats, cpu1.clock) == ("reference", 5, "process_time")
    # process_time sums every thread's CPU seconds: with more threads, the wall clock.
    assert resolve_timer("min_of_k", 3, CPU, num_threads=4).clock == "perf_counter"
    gpu = resolve_timer("auto", 5, torch.device("cuda"))
    assert (gpu.name, gpu.repeats, gpu.clock) == ("wall", 1, "cuda_events")
    assert resolve_timer("min_of_k", 2, torch.device("cuda")).repeats == 2
    assert resolve_timer("wall", 7, CPU).repeats == 1  # k only counts for min_of_k


class CountingModel:
    """The decoder, counting its forward passes."""

    def __init__(self, model: PagedDecoder) -> None:
        self._model = model
        self.passes = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self._model, name)

    def forward(self, *args: object, **kwargs: object) -> torch.Tensor:
        self.passes += 1
        return self._model.forward(*args, **kwargs)  # type: ignore[arg-type]


def test_min_of_k_runs_k_passes_and_keeps_the_fastest(model: PagedDecoder,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    counting = CountingModel(model)
    ex = RealExecutor(counting, kernel="torch", timer="min_of_k",  # type: ignore[arg-type]
                      timer_repeats=4)
    ticks = iter([0.0, 5.0, 10.0, 12.0, 20.0, 27.0, 30.0, 39.0])  # passes of 5, 2, 7, 9 s
    monkeypatch.setattr(ex, "_clock", lambda: next(ticks))
    plan = StepPlan(0, 16, [ScheduledChunk("a", list(range(3, 20)), 0, [0, 1], sample=True)])
    result = ex.execute(plan)
    assert counting.passes == 4 and result.duration_s == 2.0


def test_a_prefill_step_takes_its_own_passes(model: PagedDecoder) -> None:
    counting = CountingModel(model)
    ex = RealExecutor(counting, kernel="torch", timer="min_of_k",  # type: ignore[arg-type]
                      timer_repeats=2, timer_prefill_repeats=5)
    assert (ex.timer.repeats, ex.timer.prefill_repeats) == (2, 5)
    prefill = StepPlan(0, 16, [ScheduledChunk("a", list(range(3, 20)), 0, [0, 1], sample=True)])
    ex.execute(prefill)
    assert counting.passes == 5
    # a decode step (one token per chunk) takes timer_repeats, a mixed step the prefill's
    decode = StepPlan(1, 16, [ScheduledChunk("a", [9], 17, [0, 1], sample=True)])
    ex.execute(decode)
    assert counting.passes == 5 + 2
    mixed = StepPlan(2, 16, [ScheduledChunk("a", [9], 18, [0, 1], sample=True),
                             ScheduledChunk("b", [4, 5, 6], 0, [2], sample=True)])
    ex.execute(mixed)
    assert counting.passes == 5 + 2 + 5
    # null: timer_repeats for every step; one pass for the one-pass timers
    assert resolve_timer("reference", 3, CPU).prefill_repeats == 3
    assert resolve_timer("wall", 3, CPU, prefill_repeats=6).prefill_repeats == 1
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match=rf"executor.timer_prefill_repeats={bad!r}: must"):
            RealExecutor(model, kernel="torch", timer="min_of_k",
                         timer_prefill_repeats=bad)  # type: ignore[arg-type]


def run_engine(model: PagedDecoder, timer: str, repeats: int
               ) -> tuple[RealExecutor, dict[str, list[int]], int]:
    """A vLLM run on a pool small enough to preempt, with chunked prefill and prefix hits:
    (the executor, each request's output tokens, preemptions)."""
    ex = RealExecutor(model, kernel="torch", num_slots=128, timer=timer, timer_repeats=repeats)
    sched = VllmScheduler(VllmSchedulerConfig.from_capacity(
        96, block_size=16, max_num_seqs=6, max_num_batched_tokens=16))
    prefix = list(range(40, 58))
    reqs = [Request(f"r{i}", prefix + [3 + 7 * i + j for j in range(2 + i)], max_tokens=20 + i,
                    eos_token_id=None, arrival_time=0.0) for i in range(6)]
    result = Engine(sched, ex, reqs).run()
    outputs = {r.request_id: list(r.output_token_ids) for r in reqs}
    return ex, outputs, sum(result.requests.column("num_preemptions").to_pylist())


@pytest.mark.parametrize("timer", ["min_of_k", "reference"])
def test_k_passes_leave_the_same_kv_and_tokens_as_one(model: PagedDecoder, timer: str) -> None:
    one, tokens_one, preempted = run_engine(model, "wall", 1)
    three, tokens_three, _ = run_engine(model, timer, 3)
    assert preempted > 0  # recomputed prefixes are part of what repeats
    assert tokens_three == tokens_one
    for a, b in zip(one.kv_cache.kv, three.kv_cache.kv, strict=True):
        assert torch.equal(a, b)  # the reference step ran on a cache of its own


def test_reference_scales_the_fastest_pass_by_the_reference_unit(
        model: PagedDecoder, monkeypatch: pytest.MonkeyPatch) -> None:
    ex = RealExecutor(model, kernel="torch", timer="reference", timer_repeats=3,
                      timer_reference_s=0.5)
    assert (ex.timer.reference_s, ex.timer.reference_source) == (0.5, "config")
    # interleaved: reference, step, reference, step, reference, step
    reference_passes = iter([2.0, 1.0, 4.0])
    step_passes = iter([3.0, 6.0, 4.5])

    def timed_pass(plan: StepPlan, cache: object = None) -> tuple[list[str], list[int], float]:
        if cache is not None:
            return [], [], next(reference_passes)
        return ["a"], [7], next(step_passes)

    monkeypatch.setattr(ex, "_timed_pass", timed_pass)
    plan = StepPlan(0, 16, [ScheduledChunk("a", list(range(3, 20)), 0, [0, 1], sample=True)])
    result = ex.execute(plan)
    # the machine ran the reference at half its unit's speed: the step's 3 s count as 1.5 s
    assert result.duration_s == 3.0 * 0.5 / 1.0 and result.sampled_token_ids == {"a": 7}


def test_reference_measures_its_unit_when_none_is_given(model: PagedDecoder) -> None:
    ex = RealExecutor(model, kernel="torch", timer="reference", timer_repeats=2)
    assert ex.timer.reference_s is not None and ex.timer.reference_s > 0
    assert ex.timer.reference_source == "measured at start: the fastest of 10 passes"
    plan = StepPlan(0, 16, [ScheduledChunk("a", list(range(3, 20)), 0, [0, 1], sample=True)])
    assert ex.execute(plan).duration_s > 0


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), True, "1"])
def test_a_bad_reference_unit_names_the_field(model: PagedDecoder, bad: object) -> None:
    with pytest.raises(ValueError, match=r"executor.timer_reference_s=.*: must be a number of "
                                         r"seconds > 0"):
        RealExecutor(model, kernel="torch", timer="reference",
                     timer_reference_s=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"executor.timer_reference_s=0.1 is for "
                                         r"executor.timer=reference, not 'min_of_k'"):
        RealExecutor(model, kernel="torch", timer="min_of_k", timer_reference_s=0.1)


def test_a_repeat_that_samples_otherwise_is_an_error(model: PagedDecoder,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    ex = RealExecutor(model, kernel="torch", timer="min_of_k", timer_repeats=2)
    passes = iter([(["a"], [5], 1.0), (["a"], [6], 1.0)])
    monkeypatch.setattr(ex, "_timed_pass", lambda plan: next(passes))
    plan = StepPlan(3, 16, [ScheduledChunk("a", [4, 5], 0, [0], sample=True)])
    with pytest.raises(RuntimeError, match=r"step 3: a repeated forward pass sampled \[6\]"):
        ex.execute(plan)


def test_summary_records_the_timer_and_documents_it(tmp_path: Path) -> None:
    ckpt = save_tiny_checkpoint(tmp_path / "ckpt")
    out = tmp_path / "run"
    subprocess.run(
        [sys.executable, "-m", "experiments.run", "executor=real",
         f"executor.model_path={ckpt}", "executor.kernel=torch", "executor.timer_repeats=2",
         "executor.timer_prefill_repeats=3",
         "workload.num_requests=3", "workload.vocab_size=256", "kv_capacity_tokens=256",
         "workload.prompt_len={dist:uniform,low:8,high:12}",
         "workload.output_len={dist:uniform,low:2,high:4}", f"hydra.run.dir={out}"],
        cwd=ROOT, check=True, capture_output=True, text=True,
        env={**os.environ, "CI": "true", "OMP_NUM_THREADS": "1"})
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["timer"], summary["timer_repeats"], summary["timer_prefill_repeats"],
            summary["timer_clock"]) == ("reference", 2, 3, "process_time")
    # the unit measured at start (no timer_reference_s given), recorded with its source
    assert summary["timer_reference_s"] > 0 and summary["timer_reference_source"]
    doc = documented()
    assert not sorted(k for k in summary if k not in doc)


def test_timer_scripts_run_on_a_tiny_model(capsys: pytest.CaptureFixture[str]) -> None:
    from conftest import load_script

    assert load_script("step_timer_tracking").main(
        ["--seconds", "0.3", "--prefill-tokens", "16", "--ks", "1", "2"]) == 0
    out = capsys.readouterr().out
    assert "| over decode reference (D) |" in out and "correlation of the prefill" in out
    assert load_script("step_timer_noise").main(
        ["--steps", "2", "--timers", "wall", "min_of_k:2", "--shapes", "prefill",
         "--prefill-tokens", "16"]) == 0
    assert "| prefill 16 | min_of_k:2 |" in capsys.readouterr().out
