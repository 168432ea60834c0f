"""Issue 24, items 5, 7 and 9, and issue 25, item 8: every numeric key has a declared range,
checked before the run in one place (experiments/run/ranges.py), and a user error is one
line naming the key; the fuzz of scripts/fuzz_config.py on a sample."""

from __future__ import annotations

import importlib.util
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import compose_config
from omegaconf import DictConfig

from experiments.run.main import CONF_DIR, run_experiment
from experiments.run.preflight import check_command_line
from experiments.run.ranges import check_ranges, range_problems
from experiments.user_error import ConfigError, JobConfigError, UserError
from schedulers.config_range import Range

ROOT = Path(__file__).resolve().parents[1]


def compose_cfg(*overrides: str) -> DictConfig:
    return compose_config(list(overrides))


# The values the issue found accepted without a word, each with the key and value the
# refusal must name.
ACCEPTED_BEFORE = [
    (["scheduler=sglang", "scheduler.chunked_prefill_size=-5"],
     "scheduler.chunked_prefill_size=-5: out of range; valid: -1 (off) or [1, 2^24]"),
    (["scheduler=sglang", "scheduler.schedule_conservativeness=inf"],
     "scheduler.schedule_conservativeness=inf: must be a finite number"),
    (["scheduler=sglang", "scheduler.priority_scheduling_preemption_threshold=-1"],
     "scheduler.priority_scheduling_preemption_threshold=-1: out of range"),
    (["scheduler=sglang", "scheduler.in_batch_prefix_caching_check_threshold=-1"],
     "scheduler.in_batch_prefix_caching_check_threshold=-1: out of range"),
    (["scheduler=sglang", "scheduler.init_new_token_ratio=5"],
     "scheduler.init_new_token_ratio=5.0: too large; valid: (0, 1]"),
    (["hardware.memory_bandwidth=inf"], "hardware.memory_bandwidth=inf: must be a finite"),
    (["model.num_hidden_layers=1000000000"], "model.num_hidden_layers=1000000000: too large"),
    (["workload.prompt_len.mean=inf"], "workload.prompt_len.mean=inf: must be a finite"),
    (["workload.output_len.dist=fixed", "workload.output_len.value=0"],
     "workload.output_len.value=0: out of range; valid: [1, 2^20]"),
    (["workload.output_len.dist=fixed", "workload.output_len.value=-5"],
     "workload.output_len.value=-5: out of range"),
    (["workload.max_tokens=0"], "workload.max_tokens=0: out of range"),
    (["workload.max_tokens=-1"], "workload.max_tokens=-1: out of range"),
    (["workload.eos_token_id=-1"], "workload.eos_token_id=-1: out of range"),
    (["workload.eos_token_id=32000"],
     "workload.eos_token_id=32000: must be below vocab_size=32000; valid: [0, vocab_size)"),
    (["workload.request_rate=1e-300"], "workload.request_rate=1e-300: out of range; valid: "
                                        "inf (all at t=0) or [0.0001, 1e9]"),
    (["workload.burstiness=1e-300"], "workload.burstiness=1e-300: out of range"),
    (["workload=multi_turn", "workload.turn_gap_s=nan"],
     "workload.turn_gap_s=nan: must be a finite number"),
    (["workload=multi_turn", "workload.num_conversations=0"],
     "workload.num_conversations=0: out of range"),
    # item 7: refused before the run, the bound derived from memory, and time
    (["kv_capacity_tokens=100000000000"],
     "kv_capacity_tokens=100000000000: too large; valid: auto (the pool vLLM leaves on the "
     "hardware) or [1, 2^26] (the bound of host memory"),
    (["executor.step_overhead_s=inf"], "executor.step_overhead_s=inf: must be a finite"),
    (["executor.step_overhead_s=1e308"], "executor.step_overhead_s=1e+308: too large; valid: "
                                          "[0, 60]"),
    (["executor.step_overhead_s=nan"], "executor.step_overhead_s=nan: must be a finite"),
]


@pytest.mark.parametrize(("overrides", "says"), ACCEPTED_BEFORE)
def test_values_once_accepted_are_refused_naming_the_key(overrides: list[str], says: str
                                                         ) -> None:
    with pytest.raises(ConfigError) as e:
        check_ranges(compose_cfg(*overrides))
    assert str(e.value).startswith(says), str(e.value)
    assert "\n" not in str(e.value)


def test_upstream_meanings_are_kept_and_the_defaults_pass() -> None:
    # SGLang's --chunked-prefill-size -1 disables chunked prefill (arg_groups/fields/
    # schedule.py); inf request rates send every request at t=0 (vllm bench serve)
    for overrides in ([], ["scheduler=sglang", "scheduler.chunked_prefill_size=-1"],
                      ["workload.request_rate=inf"], ["scheduler=sglang"],
                      ["workload=multi_turn"], ["workload=shared_prefix"]):
        assert list(range_problems(compose_cfg(*overrides))) == [], overrides


def test_ranges_read_a_sibling_bound_and_int64() -> None:
    eos = Range(low=0, high="vocab_size", high_open=True)
    assert eos.problem(99, True, {"vocab_size": 100}) is None
    assert eos.problem(100, True, {"vocab_size": 100}) == \
        "must be below vocab_size=100; valid: [0, vocab_size)"
    assert Range(low=0).problem(2**70, True) == "beyond a 64-bit integer; valid: ≥ 0"
    assert Range(low=0).problem(True, True) == "must be an integer, not bool"
    assert Range(low=0.0, low_open=True, high=1.0).text() == "(0, 1]"


def test_the_run_itself_checks_the_ranges(tmp_path: Path) -> None:
    """run_experiment (any caller, not only the command line) refuses before building."""
    with pytest.raises(ConfigError, match=r"^workload\.burstiness=0\.0: out of range"):
        run_experiment(compose_cfg("workload.burstiness=0"), tmp_path / "job")
    assert not (tmp_path / "job").exists()


def test_errors_while_building_a_job_are_user_errors_but_keep_their_type(tmp_path: Path
                                                                         ) -> None:
    with pytest.raises(JobConfigError) as e:
        run_experiment(compose_cfg("kv_capacity_tokens=1000"), tmp_path / "job")
    assert isinstance(e.value, UserError) and isinstance(e.value.original, ValueError)
    assert "kv_capacity_tokens=1000 is not a multiple of block_size=16" in str(e.value)


def test_a_command_line_is_composed_and_checked_before_hydra_runs() -> None:
    assert check_command_line(["scheduler=sglang"], CONF_DIR) is None
    assert check_command_line(["-m", "workload.request_rate=4,1e-300"], CONF_DIR) == (
        "workload.request_rate=1e-300: out of range; valid: inf (all at t=0) or "
        "[0.0001, 1e9]")
    assert check_command_line(["kv_capacity_tokens=abc"], CONF_DIR) == (
        "kv_capacity_tokens='abc': must be a number, not str")
    said = check_command_line(["scheduler=sglnag"], CONF_DIR)
    assert said == ("scheduler=sglnag: no such option (did you mean scheduler=sglang?); "
                    f"options: {scheduler_options()}")
    said = check_command_line(["scheduler.max_num_seq=3"], CONF_DIR)
    assert said is not None and said.startswith(
        "override 'scheduler.max_num_seq=3': scheduler has no key 'max_num_seq'; valid keys:")
    # on_error=record: a job's bad value is recorded by the job, the sweep goes on
    assert check_command_line(["workload.max_tokens=0", "on_error=record"], CONF_DIR) is None


def scheduler_options() -> str:
    """The scheduler options a message lists: conf/scheduler/'s files (whatever is added)."""
    return ", ".join(sorted(p.stem for p in (Path(CONF_DIR) / "scheduler").glob("*.yaml")))


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "experiments.run", "progress=off", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "CI": "1", **(env or {})})


def test_user_errors_are_one_line_and_the_traceback_only_when_debugging(tmp_path: Path
                                                                        ) -> None:
    """Item 9 and issue 25, item 8: a misspelt option, a key typo, a bad enum value."""
    csv = tmp_path / "l.csv"
    csv.write_text("input_length,output_length\n10,5\n")
    job = f"hydra.run.dir={tmp_path / 'job'}"
    for args, says in (
        (["scheduler=sglnag"], "error: scheduler=sglnag: no such option (did you mean "
                               f"scheduler=sglang?); options: {scheduler_options()}"),
        (["scheduler.max_num_seq=3"], "error: override 'scheduler.max_num_seq=3': scheduler "
                                      "has no key 'max_num_seq'; valid keys: "),
        (["workload=lengths", f"workload.file={csv}", "workload.max_tokens_policy=cap_oes"],
         "error: workload: max_tokens_policy='cap_oes': valid: trace, trace_eos, fixed, "
         "cap_eos"),
        (["executor.step_overhead_s=nan"], "error: executor.step_overhead_s=nan: must be a "
                                           "finite number; valid: [0, 60]"),
    ):
        proc = run_cli(job, *args)
        assert proc.returncode == 1, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(says), proc.stderr
        assert "base_" not in proc.stderr and "+scheduler" not in proc.stderr
    proc = run_cli(job, "workload=lengths", f"workload.file={csv}",
                   "workload.max_tokens_policy=cap_oes", env={"SCHEDBENCH_DEBUG": "1"})
    assert proc.returncode == 1 and "Traceback (most recent call last)" in proc.stderr
    assert "max_tokens_policy='cap_oes'" in proc.stderr


def _fuzz_module():
    spec = importlib.util.spec_from_file_location("fuzz_config", ROOT / "scripts" /
                                                  "fuzz_config.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fuzz_config"] = module
    spec.loader.exec_module(module)
    return module


def test_a_sample_of_the_fuzz_ends_valid_or_refused_in_one_line(tmp_path: Path) -> None:
    """A seeded sample of scripts/fuzz_config.py's cases, in this process: each ends within
    10 s, valid or refused with one line naming the key (the full fuzz: the script)."""
    fuzz = _fuzz_module()
    keys = [k for k in fuzz.numeric_keys() if not (k.choice or "").startswith(
        ("workload=azure", "workload=mooncake", "workload=smollm2", "workload=lengths"))]
    every = fuzz.cases(keys)
    assert len({k.key for k in keys}) > 60 and len(every) > 900
    sample = random.Random(24).sample(every, 24)
    outcomes = [(case, fuzz.run_in_process(case, {})) for case in sample]
    failures = [(case.overrides({}), o.detail) for case, o in outcomes if o.kind == "failure"]
    assert failures == []
    assert "refused" in {o.kind for _, o in outcomes}
