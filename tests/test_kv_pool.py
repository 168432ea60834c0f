"""KV memory as a GPU has it (issue 27 item 5): `kv_capacity_tokens=auto` sizes the pool as
vLLM's GPU worker does, an explicit pool still wins, and a context length above the model's
own runs only when set so on purpose, with a caveat in the summary."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import compose_config

from engines.executors.specs import HardwareSpec, ModelSpec
from engines.kv_pool import activation_peak_bytes, auto_kv_pool
from experiments.run.build import (
    ContextLength,
    build_hardware,
    build_model,
    check_context_length,
    resolve_kv_capacity,
)
from experiments.run.caveats import run_warnings
from experiments.run.main import run_experiment

ROOT = Path(__file__).resolve().parents[1]


def group(name: str) -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "conf" / f"{name}.yaml").read_text())
    data.pop("defaults", None)
    return data


LLAMA3_8B = build_model(group("model/llama3_8b"))
A100 = build_hardware(group("hardware/a100_80g"))
H200 = build_hardware(group("hardware/h200"))


def test_llama3_8b_on_an_a100_80gb_as_vllm_sizes_it() -> None:
    pool = auto_kv_pool(LLAMA3_8B, A100, 0.92, 8192)
    # 81,920 MiB x 0.92, rounded up as vLLM's request_memory does
    assert pool.memory_bytes == 85_899_345_920
    assert pool.requested_bytes == math.ceil(85_899_345_920 * 0.92) == 79_027_398_247
    # 8,030,261,248 parameters (the shape of Meta-Llama-3-8B) in bf16
    assert pool.weight_bytes == 8_030_261_248 * 2
    # vLLM's server on an A100 profiles 2,048 tokens and 256 sampled rows; the sampler's
    # peak (hidden states + 256 x 128,256 logits in bf16 and three float32 copies) is above
    # the MLP's (2,048 x (2 x 4,096 + 3 x 14,336) x 2 bytes)
    assert (pool.profile_tokens, pool.profile_seqs) == (2048, 256)
    assert pool.activation_peak_bytes == 2048 * 4096 * 2 + 256 * 128256 * 14 == 476_446_720
    assert pool.available_kv_bytes == 79_027_398_247 - 16_060_522_496 - 476_446_720
    assert pool.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2 == 131_072
    assert pool.num_blocks == pool.available_kv_bytes // (16 * 131_072) == 29_797
    assert pool.kv_capacity_tokens == (29_797 - 1) * 16 == 476_736


def test_llama3_8b_on_an_h200_holds_about_900k_tokens() -> None:
    pool = auto_kv_pool(LLAMA3_8B, H200, 0.92, 8192)
    assert (pool.profile_tokens, pool.profile_seqs) == (8192, 1024)
    assert pool.activation_peak_bytes == 8192 * 4096 * 2 + 1024 * 128256 * 14
    assert pool.kv_capacity_tokens == 921_056
    # a lower utilization leaves less
    assert auto_kv_pool(LLAMA3_8B, H200, 0.5, 8192).kv_capacity_tokens < 500_000


def test_activation_peak_is_the_mlp_when_the_forward_pass_dominates() -> None:
    small_vocab = ModelSpec(name="m", hidden_size=1024, num_hidden_layers=2,
                            num_attention_heads=8, num_key_value_heads=8,
                            intermediate_size=4096, vocab_size=1000)
    assert activation_peak_bytes(small_vocab, 8192, 1024) == 8192 * (2 * 1024 + 3 * 4096) * 2


def test_the_pool_is_a_multiple_of_the_page_size() -> None:
    pool = auto_kv_pool(LLAMA3_8B, A100, 0.92, 8192, page_size=48)
    assert pool.kv_capacity_tokens % 48 == 0 and pool.kv_capacity_tokens % 16 == 0
    assert 476_736 - 48 < pool.kv_capacity_tokens <= 476_736


def test_a_pool_that_cannot_hold_the_model_or_one_request_is_refused() -> None:
    tiny = HardwareSpec("tiny", 1e12, 1e12, 1e9, memory_bytes=16e9)
    with pytest.raises(ValueError, match="leaves no memory for the KV cache"):
        auto_kv_pool(LLAMA3_8B, tiny, 0.92, 8192)
    snug = HardwareSpec("snug", 1e12, 1e12, 1e9, memory_bytes=18e9)
    with pytest.raises(ValueError, match="fewer than one request of max_model_len=8192"):
        auto_kv_pool(LLAMA3_8B, snug, 0.92, 8192)
    with pytest.raises(ValueError, match="no memory_bytes"):
        auto_kv_pool(LLAMA3_8B, HardwareSpec("unknown", 1e12, 1e12, 1e9), 0.92, 8192)
    with pytest.raises(ValueError, match=r"gpu_memory_utilization=1\.5"):
        auto_kv_pool(LLAMA3_8B, H200, 1.5, 8192)


def test_an_explicit_pool_wins() -> None:
    given = resolve_kv_capacity(32768, LLAMA3_8B, H200, 0.92, 8192)
    assert (given.tokens, given.source, given.estimate) == (32768, "config", None)
    auto = resolve_kv_capacity("auto", LLAMA3_8B, H200, 0.92, 8192, page_size=1)
    assert auto.tokens == 921_056 and auto.estimate is not None
    for bad in ("lots", 0, -5, True):
        with pytest.raises(ValueError, match="kv_capacity_tokens="):
            resolve_kv_capacity(bad, LLAMA3_8B, H200, 0.92, 8192)


def job_config(*overrides: str, small: bool = True) -> Any:
    few = ["workload.num_requests=12", "workload.request_rate=100"] if small else []
    return compose_config([*few, "progress=off", *overrides])


def test_summary_records_the_auto_pool_and_how_it_was_computed(tmp_path: Path) -> None:
    summary = run_experiment(job_config("kv_capacity_tokens=auto", "hardware=a100_80g",
                                        "model=llama3_8b", "executor.cost_model=roofline"),
                             tmp_path / "auto")
    assert summary["kv_capacity_tokens"] == 476_736
    assert summary["kv_capacity_source"].startswith("vllm 0.32.0 determine_available_memory")
    assert summary["kv_pool_estimate"]["weight_bytes"] == 16_060_522_496
    assert summary["kv_pool_estimate"]["kv_capacity_tokens"] == 476_736
    given = run_experiment(job_config("kv_capacity_tokens=4096"), tmp_path / "given")
    assert (given["kv_capacity_tokens"], given["kv_capacity_source"],
            given["kv_pool_estimate"]) == (4096, "config", None)


# --- the model's context length ----------------------------------------------------------

def test_a_context_length_above_the_models_is_refused_unless_on_purpose() -> None:
    check_context_length(ContextLength(8192, "max_model_len"), 8192, False)
    check_context_length(ContextLength(8192, "model.max_position_embeddings"), 8192, False)
    check_context_length(ContextLength(4096, "scheduler.max_model_len"), 8192, False)
    with pytest.raises(ValueError, match=r"max_model_len=32768 is above the model's context "
                                         r"length \(8192"):
        check_context_length(ContextLength(32768, "max_model_len"), 8192, False)
    with pytest.raises(ValueError, match=r"scheduler\.context_length=9000"):
        check_context_length(ContextLength(9000, "scheduler.context_length"), 8192, False)
    check_context_length(ContextLength(32768, "max_model_len"), 8192, True)


def test_mooncake_at_32k_on_llama3_8b_is_refused_before_the_trace_is_read(tmp_path: Path
                                                                          ) -> None:
    cfg = job_config("workload=mooncake", "max_model_len=32768",
                     "workload.trace_dir=/nonexistent", small=False)
    with pytest.raises(ValueError, match="above the model's context length"):
        run_experiment(cfg, tmp_path / "job")


def test_the_prefix_recovery_study_clips_its_prompts_to_the_models_context() -> None:
    cfg = job_config("experiment=prefix_recovery", small=False)
    assert cfg.max_model_len is None and not cfg.allow_long_max_model_len
    assert cfg.workload.long_inputs == "clip"
    assert cfg.workload.max_input_len < cfg.model.max_position_embeddings


def test_a_context_above_the_models_warns_and_the_models_own_does_not() -> None:
    warnings = run_warnings({"max_model_len": 32768, "max_model_len_source": "max_model_len",
                             "model_context_length": 8192, "offered": 0})
    assert any("above the model's context length (8192)" in w for w in warnings)
    assert not any("context length" in w for w in run_warnings(
        {"max_model_len": 8192, "max_model_len_source": "model.max_position_embeddings",
         "model_context_length": 8192, "offered": 0}))


def test_a_run_set_above_the_model_on_purpose_warns_in_its_summary(tmp_path: Path) -> None:
    summary = run_experiment(job_config("max_model_len=16384", "allow_long_max_model_len=true",
                                        "model=llama3_8b", "hardware=h200",
                                        "executor.cost_model=roofline",
                                        "kv_capacity_tokens=16384"),
                             tmp_path / "job")
    assert summary["model_context_length"] == 8192
    assert any("max_model_len=16384" in w and "on purpose" in w for w in summary["warnings"])


def test_a_bad_pool_fails_in_the_preflight() -> None:
    from experiments.run.preflight import ConfigError, check_config

    with pytest.raises(ConfigError, match="kv_capacity_tokens='lots'"):
        check_config(job_config("kv_capacity_tokens=lots"))
    check_config(job_config("kv_capacity_tokens=auto"))
