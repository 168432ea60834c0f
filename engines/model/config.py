"""The decoder's shape, read from a Hugging Face config (`config.json` through `transformers`).

Supported: `LlamaForCausalLM` (Llama 2/3), `Qwen2ForCausalLM` (bias on q/k/v) and
`MistralForCausalLM`. RoPE types: default, linear, llama3, yarn. Anything else fails with an
error naming the field and its value.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM")
ROPE_TYPES = ("default", "linear", "llama3", "yarn")


class CheckpointError(ValueError):
    """A checkpoint does not match what the decoder supports or expects."""


@dataclass(frozen=True, slots=True)
class RopeConfig:
    """Rotary embedding parameters (names as in Hugging Face `rope_parameters`)."""

    rope_type: str = "default"
    theta: float = 10000.0
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int | None = None
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    truncate: bool = True


@dataclass(frozen=True, slots=True)
class DecoderConfig:
    """What the paged decoder needs to know about a Llama-family model."""

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope: RopeConfig
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 4096
    sliding_window: int | None = None

    @property
    def q_size(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_key_value_heads * self.head_dim


def _get(cfg: Any, name: str, default: Any = None) -> Any:
    return getattr(cfg, name, default)


def _require(cfg: Any, name: str) -> Any:
    value = getattr(cfg, name, None)
    if value is None:
        raise CheckpointError(f"config.json: field {name!r} is missing")
    return value


def _rope_from_hf(cfg: Any) -> RopeConfig:
    params = _get(cfg, "rope_parameters")
    if params is None:  # transformers < 5: rope_theta plus an optional rope_scaling
        params = dict(_get(cfg, "rope_scaling") or {})
        params.setdefault("rope_theta", _get(cfg, "rope_theta", 10000.0))
    params = dict(params)
    if "full_attention" in params and isinstance(params["full_attention"], dict):
        params = dict(params["full_attention"])  # per-layer-type form
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type not in ROPE_TYPES:
        raise CheckpointError(f"config.json: rope_parameters.rope_type={rope_type!r} is not "
                              f"supported (supported: {', '.join(ROPE_TYPES)})")
    partial = params.get("partial_rotary_factor", _get(cfg, "partial_rotary_factor", 1.0))
    if partial not in (None, 1, 1.0):
        raise CheckpointError(f"config.json: partial_rotary_factor={partial!r} is not "
                              "supported (only 1.0)")
    factor = params.get("factor")
    orig = params.get("original_max_position_embeddings")
    if rope_type in ("linear", "llama3") and factor is None:
        raise CheckpointError(f"config.json: rope_parameters.factor is missing for "
                              f"rope_type={rope_type!r}")
    if rope_type == "yarn" and factor is None:
        if orig is None:
            raise CheckpointError("config.json: rope_parameters.factor is missing for yarn")
        factor = _require(cfg, "max_position_embeddings") / orig
    if rope_type in ("llama3", "yarn") and orig is None:
        orig = _get(cfg, "max_position_embeddings")
    return RopeConfig(
        rope_type=rope_type,
        theta=float(params.get("rope_theta", _get(cfg, "rope_theta", 10000.0))),
        factor=float(factor if factor is not None else 1.0),
        low_freq_factor=float(params.get("low_freq_factor", 1.0)),
        high_freq_factor=float(params.get("high_freq_factor", 4.0)),
        original_max_position_embeddings=int(orig) if orig is not None else None,
        beta_fast=float(params.get("beta_fast") or 32.0),
        beta_slow=float(params.get("beta_slow") or 1.0),
        attention_factor=params.get("attention_factor"),
        mscale=params.get("mscale"),
        mscale_all_dim=params.get("mscale_all_dim"),
        truncate=bool(params.get("truncate", True)),
    )


def _sliding_window(cfg: Any) -> int | None:
    window = _get(cfg, "sliding_window")
    if window is None:
        return None
    if _get(cfg, "use_sliding_window") is False:
        return None
    layer_types = _get(cfg, "layer_types")
    if layer_types is not None and "sliding_attention" not in layer_types:
        return None
    return int(window)


def config_from_hf(cfg: Any) -> DecoderConfig:
    """Build a `DecoderConfig` from a `transformers` config object.

    Raises CheckpointError naming the field when the architecture, activation, RoPE type or
    head layout is unsupported.
    """
    archs = _get(cfg, "architectures") or []
    arch = next((a for a in archs if a in ARCHITECTURES), None)
    if arch is None:
        model_type = _get(cfg, "model_type")
        by_type = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                   "mistral": "MistralForCausalLM"}
        if archs or model_type not in by_type:
            raise CheckpointError(f"config.json: architectures={archs!r} (model_type="
                                  f"{model_type!r}) is not supported (supported: "
                                  f"{', '.join(ARCHITECTURES)})")
        arch = by_type[model_type]
    act = _get(cfg, "hidden_act", "silu")
    if act not in ("silu", "swish"):
        raise CheckpointError(f"config.json: hidden_act={act!r} is not supported (only silu)")
    hidden = int(_require(cfg, "hidden_size"))
    heads = int(_require(cfg, "num_attention_heads"))
    kv_heads = int(_get(cfg, "num_key_value_heads") or heads)
    if heads % kv_heads:
        raise CheckpointError(f"config.json: num_key_value_heads={kv_heads} does not divide "
                              f"num_attention_heads={heads}")
    head_dim = _get(cfg, "head_dim") or hidden // heads
    attention_bias = bool(_get(cfg, "attention_bias", False))
    qwen2 = arch == "Qwen2ForCausalLM"
    return DecoderConfig(
        architecture=arch,
        vocab_size=int(_require(cfg, "vocab_size")),
        hidden_size=hidden,
        intermediate_size=int(_require(cfg, "intermediate_size")),
        num_hidden_layers=int(_require(cfg, "num_hidden_layers")),
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=int(head_dim),
        rms_norm_eps=float(_get(cfg, "rms_norm_eps", 1e-6)),
        rope=_rope_from_hf(cfg),
        qkv_bias=qwen2 or attention_bias,
        o_bias=attention_bias and not qwen2,
        mlp_bias=bool(_get(cfg, "mlp_bias", False)),
        tie_word_embeddings=bool(_get(cfg, "tie_word_embeddings", False)),
        max_position_embeddings=int(_get(cfg, "max_position_embeddings", 4096)),
        sliding_window=_sliding_window(cfg),
    )


def load_config(path: str | Path) -> DecoderConfig:
    """Read `config.json` of a checkpoint folder through `transformers.AutoConfig`."""
    from transformers import AutoConfig

    folder = Path(path)
    if not (folder / "config.json").is_file():
        raise CheckpointError(f"checkpoint {str(folder)!r}: no config.json")
    try:
        cfg = AutoConfig.from_pretrained(str(folder))
    except (ValueError, KeyError) as e:
        raise CheckpointError(f"checkpoint {str(folder)!r}: config.json: {e}") from e
    return config_from_hf(cfg)
