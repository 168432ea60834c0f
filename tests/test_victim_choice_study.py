"""The victim-choice study (scripts/reproduce_victim_choice.sh): its settings compose with the
preset, and the tight one (`a10`) differs from the main one in the GPU and its timing only."""

from __future__ import annotations

import re
from pathlib import Path

from experiments.capacity.main import compose
from experiments.run.build import build_executor, build_hardware, build_model, step_time_source

ROOT = Path(__file__).resolve().parents[1]


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
