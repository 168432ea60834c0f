"""Q1 (scripts/reproduce_preemption.sh) and Q2's Azure conv setting
(scripts/reproduce_prefix_recovery.sh) compare the two schedulers on the same requests: the
prompt filter drops every prompt that either would refuse (SGLang refuses one of
max_req_input_len = context - 1 - 5 tokens or more; vLLM one of the context or more), so
neither side's columns describe requests the other never saw."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from experiments.capacity.main import compose
from schedulers.sglang.config import SglangSchedulerConfig

ROOT = Path(__file__).resolve().parents[1]


def study_settings(script: str) -> list[tuple[str, str, list[str]]]:
    """(study, setting, Hydra overrides) of every `scripts/_study.sh` call in a reproduce
    script (the overrides that name a workload key or group, not the quoted title)."""
    text = (ROOT / "scripts" / script).read_text().replace("\\\n", " ")
    found = []
    for line in text.splitlines():
        if line.lstrip().startswith("#") or "scripts/_study.sh" not in line:
            continue
        words = shlex.split(line.split("scripts/_study.sh", 1)[1].replace('"$@"', ""))
        study, setting, *rest = words
        found.append((study, setting, [w for w in rest if w.startswith("workload")]))
    return found


SETTINGS = study_settings("reproduce_preemption.sh") + study_settings(
    "reproduce_prefix_recovery.sh")


def test_the_scripts_are_parsed() -> None:
    names = [(study, setting) for study, setting, _ in SETTINGS]
    assert names == [("preemption", "conv"), ("preemption", "conv_sync"),
                     ("preemption", "code"), ("prefix_recovery", "mooncake"),
                     ("prefix_recovery", "mooncake_noshare"),
                     ("prefix_recovery", "azure_conv")]


@pytest.mark.parametrize(("study", "setting", "overrides"), SETTINGS)
def test_both_schedulers_admit_every_prompt_the_filter_keeps(
        study: str, setting: str, overrides: list[str]) -> None:
    cfg = compose([f"experiment={study}", *overrides])
    limit = int(cfg.workload.max_input_len)
    context = int(cfg.model.max_position_embeddings)
    sglang = SglangSchedulerConfig(max_total_tokens=10**6, context_length=context)
    assert limit < sglang.max_req_input_len, (setting, limit, sglang.max_req_input_len)
    assert limit < context  # vLLM admits a prompt shorter than max_model_len
    if cfg.workload.long_inputs == "drop":  # not a looser filter than needed either
        assert limit == sglang.max_req_input_len - 1, (setting, limit)


def test_the_held_out_check_filters_as_its_study() -> None:
    """holdout_check.sh gives Q2 azure_conv's workload overrides exactly as the study."""
    text = (ROOT / "scripts" / "holdout_check.sh").read_text().replace("\\\n", " ")
    line = next(x for x in text.splitlines() if "check prefix_recovery azure_conv" in x)
    _, _, study_overrides = next(s for s in SETTINGS if s[1] == "azure_conv")
    assert all(o in line for o in study_overrides if not o.startswith("workload=")), line
    assert re.search(r"max_input_len=(\d+)", line).group(1) == "4089"  # type: ignore[union-attr]
