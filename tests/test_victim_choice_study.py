"""The victim-choice study (scripts/reproduce_victim_choice.sh): its settings compose with the
preset, and the tight one (`a10`) differs from the main one in the GPU and its timing only."""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

import pytest

from experiments.capacity.main import compose
from experiments.run.build import build_executor, build_hardware, build_model, step_time_source

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from victim_contrast import write  # noqa: E402


def settings_of_the_script() -> dict[str, list[str]]:
    """setting -> its Hydra overrides, for every `setting` call in reproduce_victim_choice.sh."""
    text = (ROOT / "scripts" / "reproduce_victim_choice.sh").read_text().replace("\\\n", " ")
    found = re.findall(r'^setting (\w+) "[^"]*"(.*)$', text, re.M)
    return {name: rest.split() for name, rest in found}


def test_the_a10_setting_is_the_main_one_on_an_a10_with_the_a40_fit() -> None:
    settings = settings_of_the_script()
    assert list(settings) == ["main", "a10"]
    main = compose(["experiment=victim_choice", *settings["main"]])
    a10 = compose(["experiment=victim_choice", *settings["a10"]])
    assert (main.hardware.name, main.executor.cost_model) == ("a100_80g", "measured")
    assert (a10.hardware.name, a10.hardware.fit_from) == ("a10", "a40")
    assert a10.executor.cost_model == "fitted_roofline"
    for key in ("model", "workload", "scheduler", "kv_capacity_tokens", "slo", "repeats"):
        assert a10[key] == main[key], key
    assert a10.model.max_position_embeddings == 4096
    model, hardware = build_model(a10.model), build_hardware(a10.hardware)
    executor = build_executor(a10.executor, model, hardware)
    assert step_time_source(executor)["step_time_source"] == (
        "roofline fitted to vidur a40 llama-2-7b (extrapolated from a40 to a10)")


def test_the_contrast_pairs_windows_and_flags_few_evictions(tmp_path: Path) -> None:
    fields = ["scheduler", "status", "workload.realization", "workload.load",
              "num_preemptions", "paired_victim_e2el_ratio", "paired_victims"]
    # per window (realisation 0, 1): vLLM 10 and 30 evictions, SGLang 0 and 2 at load 1;
    # none at load 0.5
    rows = [("vllm", k, 1.0, n, r, v) for k, n, r, v in ((0, 10, 1.0, 8), (1, 30, 1.2, 20))]
    rows += [("sglang", k, 1.0, n, r, v) for k, n, r, v in ((0, 0, "", 0), (1, 2, 2.0, 2))]
    rows += [(s, k, 0.5, 0, "", 0) for s in ("vllm", "sglang") for k in (0, 1)]
    with open(tmp_path / "comparison.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(fields)
        w.writerows([(s, "ok", k, load, n, r, v) for s, k, load, n, r, v in rows])
    csv_path, md_path = write(tmp_path, "workload.load")
    with open(csv_path) as f:
        out = {float(r["load"]): r for r in csv.DictReader(f)}
    one = out[1.0]
    assert float(one["ratio"]) == 20.0 and int(one["ratio_n"]) == 2  # mean 20 over mean 1
    assert float(one["difference"]) == 19.0  # (10 + 28) / 2
    assert float(one["paired_vllm"]) == 1.1 and int(one["paired_vllm_n"]) == 28
    assert float(one["gap"]) == pytest.approx(0.8) and int(one["gap_windows"]) == 1
    assert out[0.5]["ratio"] == ""  # no SGLang eviction: no ratio
    text = md_path.read_text()
    assert "| 1 | 2 | 20.0 | 1.0 | 20.0 [" in text and "n=2* |" in text
    assert "| 0.5 | 2 | 0.0 | 0.0 | n/a (n=0) |" in text
    with open(tmp_path / "comparison.csv", "a", newline="") as f:  # a window vLLM lacks
        csv.writer(f).writerow(("sglang", "ok", 2, 1.0, 1, "", 0))
    with pytest.raises(ValueError, match=r"workload.load=1 workload.realization=2 ran under "
                                         r"one scheduler only"):
        write(tmp_path, "workload.load")


def test_the_capacity_config_holds_the_borrowed_fit_but_not_the_trace_folder(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # where this machine keeps the traces is not part of what a capacity means: the digest
    # a study's capacity.md records is the same under any $SCHEDBENCH_TRACE_DIR
    from experiments.run.load import capacity_config, config_digest

    settings = settings_of_the_script()
    monkeypatch.setenv("SCHEDBENCH_TRACE_DIR", "/one/place")
    main = capacity_config(compose(["experiment=victim_choice", *settings["main"]]))
    a10 = capacity_config(compose(["experiment=victim_choice", *settings["a10"]]))
    monkeypatch.setenv("SCHEDBENCH_TRACE_DIR", "/another")
    again = capacity_config(compose(["experiment=victim_choice", *settings["main"]]))
    assert "trace_dir" not in main["workload"] and config_digest(main) == config_digest(again)
    assert main["hardware"]["fit_from"] == "" and a10["hardware"]["fit_from"] == "a40"
