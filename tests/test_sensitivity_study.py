"""The sensitivity study (scripts/reproduce_sensitivity.sh): its preset keeps the same requests
in every setting and both schedulers admit all of them, and its cross-setting summary
(scripts/sensitivity_report.py) gives every statistic with its CI and victims, per setting,
scheduler and load, and the capacities."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.capacity.main import compose
from schedulers.sglang.config import SglangSchedulerConfig

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "sensitivity_report.py"


def settings_of_the_script() -> list[tuple[str, list[str]]]:
    """(setting, its Hydra overrides) of every `study` call in reproduce_sensitivity.sh."""
    text = (ROOT / "scripts" / "reproduce_sensitivity.sh").read_text().replace("\\\n", " ")
    found = re.findall(r'^study (\w+) "[^"]*" "\$columns"(.*)$', text, re.M)
    return [(name, rest.split()) for name, rest in found]


def test_the_script_runs_every_setting_the_summary_knows() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    from sensitivity_report import SETTINGS

    assert [name for name, _ in settings_of_the_script()] == [s.folder for s in SETTINGS]


@pytest.mark.parametrize(("setting", "overrides"), settings_of_the_script())
def test_every_setting_admits_the_same_prompts_under_both_schedulers(
        setting: str, overrides: list[str]) -> None:
    cfg = compose(["experiment=sensitivity", *overrides])
    limit = int(cfg.workload.max_input_len)
    context = int(cfg.model.max_position_embeddings)
    # the same filter everywhere: Llama-2's context bounds it, Llama-3's would not
    assert limit == 4089, setting
    assert limit < context  # vLLM admits a prompt shorter than max_model_len
    # SGLang refuses a prompt of max_req_input_len (context - 1 - 5) tokens or more
    sglang = SglangSchedulerConfig(max_total_tokens=10**6, context_length=context)
    assert limit < sglang.max_req_input_len, (setting, limit, sglang.max_req_input_len)


def write_setting(study: Path, folder: str, schedulers: dict[str, list[list[float]]],
                  capacity: dict[str, float]) -> None:
    """A setting's comparison.csv (per scheduler: per load, each realisation's
    (evictions per 1k, victims, victim ratio)) and its capacity.json."""
    out = study / folder
    out.mkdir(parents=True)
    fields = ["job", "scheduler", "workload.realization", "workload.load", "status",
              "preemptions_per_1k_requests", "preempted_request_share",
              "recomputed_token_share", "num_victims", "victim_e2el_median_ratio",
              "matched_victim_ratio", "matched_victims", "slo_attainment", "offered"]
    job = 0
    with open(out / "comparison.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for sched, loads in schedulers.items():
            for load, values in zip((1.0, 1.5), loads, strict=True):
                for k in range(2):
                    per_1k, victims, ratio = values[3 * k:3 * k + 3]
                    w.writerow({"job": job, "scheduler": sched, "workload.realization": k,
                                "workload.load": load, "status": "ok",
                                "preemptions_per_1k_requests": per_1k,
                                "preempted_request_share": victims / 100,
                                "recomputed_token_share": 0.0, "num_victims": int(victims),
                                "victim_e2el_median_ratio": ratio if victims else "",
                                "matched_victim_ratio": "", "matched_victims": 0,
                                "slo_attainment": 0.9, "offered": 298 - k})
                    job += 1
    cap = study / "runs" / folder / "capacity"
    cap.mkdir(parents=True)
    cap.joinpath("capacity.json").write_text(json.dumps({
        "config": {"workload": {"max_requests": 300}}, "schedulers": {
        s: {"capacity": c, "capacity_request_rate": 5 * c, "bracket": [c, c * 1.02],
            "probes": [{}, {}]} for s, c in capacity.items()}}))


def test_summary_gives_each_statistic_with_ci_and_victims(tmp_path: Path) -> None:
    study = tmp_path / "sensitivity"
    write_setting(study, "a100_llama2_7b",
                  {"vllm": [[10, 20, 1.5, 30, 40, 2.5], [50, 60, 1.2, 70, 80, 1.4]],
                   "sglang": [[0, 0, 0, 0, 0, 0], [0, 0, 0, 2, 1, 3.0]]},
                  {"vllm": 1.0, "sglang": 0.875})
    write_setting(study, "vllm_block1", {"vllm": [[1, 2, 1.1, 3, 4, 1.3],
                                                  [5, 6, 1.0, 7, 8, 1.0]]}, {"vllm": 0.9})
    # the paired ratio comes from the report's aggregated.csv (vLLM at 1.5 only)
    (study / "a100_llama2_7b" / "aggregated.csv").write_text(
        "scheduler,workload.load,n_realizations,paired_victim_e2el_ratio,"
        "paired_victim_e2el_ratio_ci_lo,paired_victim_e2el_ratio_ci_hi,"
        "paired_victim_e2el_ratio_n\nvllm,1.5,2,1.08,1.02,1.17,71\n")
    proc = subprocess.run([sys.executable, str(SCRIPT), str(study)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    md = (study / "summary.md").read_text()
    # main, vLLM at load 1: evictions per 1k 10 and 30 -> 20; victims' ratio 1.5, 2.5 -> 2
    # from 20 + 40 victims; a setting without SGLang shows "-" in its columns
    main_row = next(line for line in md.splitlines()
                    if line.startswith("| Llama-2-7B, A100, measured (main) |")
                    and "[10, 30]" in line)
    assert main_row.split(" | ")[1].startswith("20 [10, 30]")
    ratio_row = next(line for line in md.split("## Victims' / others' median E2E")[1]
                     .splitlines() if line.startswith("| Llama-2-7B"))
    assert "2 [1.5, 2.5] n=60" in ratio_row
    # SGLang at 1.5: one realisation with a victim: no CI, flagged as few
    assert ratio_row.rstrip(" |").endswith("3 n=1*")
    paired = next(line for line in md.split("## Victims' E2E latency / the same")[1]
                  .splitlines() if line.startswith("| Llama-2-7B"))
    assert paired.split(" | ")[2] == "1.08 [1.02, 1.17] n=71"
    block_row = next(line for line in md.splitlines() if line.startswith("| main, vLLM block"))
    assert block_row.rstrip(" |").endswith("| - | -")
    assert "| main, vLLM block_size 1 | vLLM | 0.9 | 4.50 | [0.9, 0.918) | 2 |" in md
    # the trace windows: offered and dropped per realisation
    assert "| 0 | 300 | 298 | 2 |" in md and "| 1 | 300 | 297 | 3 |" in md
    with open(study / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    per_1k = [r for r in rows if r["statistic"] == "preemptions_per_1k_requests"
              and r["setting"] == "vllm_block1" and r["load"] == "1.5"]
    assert len(per_1k) == 1 and float(per_1k[0]["mean"]) == 6.0
    for name in ("sensitivity_vs_load.png", "capacity_by_setting.png"):
        assert (study / name).read_bytes()[:4] == b"\x89PNG"
    first = {p.name: p.read_bytes() for p in study.iterdir() if p.is_file()}
    subprocess.run([sys.executable, str(SCRIPT), str(study)], cwd=tmp_path, check=True,
                   capture_output=True, timeout=300)
    assert {p.name: p.read_bytes() for p in study.iterdir() if p.is_file()} == first
