"""Model and hardware descriptions that cost models and executors read.

Field names follow Hugging Face `config.json` for models, so a checkpoint's config can be
read as is (`ModelSpec.from_hf_config`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from schedulers.config_range import MAX_TOKENS, ranged
from schedulers.device_defaults import DeviceSpec


def _positive(owner: str, name: str, value: float) -> None:
    if not value > 0:
        raise ValueError(f"{owner}: {name}={value!r}: must be positive")


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """The shape of a Llama-family decoder (Llama, Qwen2, Mistral).

    `num_params` overrides the count computed from the shape (`params`) when given.
    `dtype_bytes` is the weight element size; `kv_dtype_bytes` the KV-cache element size
    (defaults to `dtype_bytes`). `max_position_embeddings` is the model's context length (its
    `config.json` field; None: unknown), the default context length of both schedulers.
    `checkpoint`: the Hugging Face checkpoint folder of this
    model, when the project can build one (relative paths from the project root): the real
    executor runs it when `executor.model_path` is unset.
    """

    name: str
    # Upper bounds: well beyond any released checkpoint (the largest have ~126 layers,
    # hidden sizes ~16k and vocabularies ~256k), where the cost model stops meaning anything.
    hidden_size: int = ranged(low=1, high=2**18)
    num_hidden_layers: int = ranged(low=1, high=2**12)
    num_attention_heads: int = ranged(low=1, high=2**12)
    num_key_value_heads: int = ranged(low=1, high=2**12)
    intermediate_size: int = ranged(low=1, high=2**20)
    vocab_size: int = ranged(low=1, high=2**24)
    head_dim: int | None = ranged(None, low=1, high=2**12)
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    dtype_bytes: int = ranged(2, low=1, high=8)
    kv_dtype_bytes: int | None = ranged(None, low=1, high=8)
    num_params: int | None = ranged(None, low=1, high=10**15)
    max_position_embeddings: int | None = ranged(None, low=1, high=MAX_TOKENS)
    checkpoint: str | None = None

    def __post_init__(self) -> None:
        owner = f"model {self.name!r}"
        for name in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                     "num_key_value_heads", "intermediate_size", "vocab_size", "dtype_bytes"):
            _positive(owner, name, getattr(self, name))
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"{owner}: num_key_value_heads={self.num_key_value_heads} does not divide "
                f"num_attention_heads={self.num_attention_heads}"
            )
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"{owner}: head_dim is unset and hidden_size={self.hidden_size} is not a "
                f"multiple of num_attention_heads={self.num_attention_heads}"
            )
        for name in ("head_dim", "kv_dtype_bytes", "num_params", "max_position_embeddings"):
            value = getattr(self, name)
            if value is not None:
                _positive(owner, name, value)

    @property
    def head_size(self) -> int:
        """Per-head dimension: `head_dim`, or hidden_size / num_attention_heads."""
        if self.head_dim is not None:
            return self.head_dim
        return self.hidden_size // self.num_attention_heads

    @property
    def kv_bytes_per_element(self) -> int:
        return self.kv_dtype_bytes if self.kv_dtype_bytes is not None else self.dtype_bytes

    @property
    def params(self) -> int:
        """Parameter count: `num_params` if given, else computed from the shape.

        Per layer: q and o projections (hidden x heads*head_dim each), k and v projections
        (hidden x kv_heads*head_dim each, plus biases when `attention_bias`), the gated MLP
        (3 x hidden x intermediate) and two RMSNorm weights. Plus the embedding, the final
        norm and the LM head (unless tied to the embedding).
        """
        if self.num_params is not None:
            return self.num_params
        h, d = self.hidden_size, self.head_size
        q_dim = self.num_attention_heads * d
        kv_dim = self.num_key_value_heads * d
        attn = 2 * h * q_dim + 2 * h * kv_dim
        if self.attention_bias:
            attn += q_dim + 2 * kv_dim
        mlp = 3 * h * self.intermediate_size
        per_layer = attn + mlp + 2 * h
        embed = self.vocab_size * h
        head = 0 if self.tie_word_embeddings else self.vocab_size * h
        return self.num_hidden_layers * per_layer + embed + head + h

    @property
    def weight_bytes(self) -> int:
        return self.params * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of K and V one token occupies across all layers."""
        return (2 * self.num_hidden_layers * self.num_key_value_heads * self.head_size
                * self.kv_bytes_per_element)

    @classmethod
    def from_hf_config(cls, config: Mapping[str, Any], name: str | None = None,
                       dtype_bytes: int = 2) -> ModelSpec:
        """Read the fields this spec needs from a Hugging Face `config.json` mapping."""
        keys = {f.name for f in fields(cls)} - {"name", "dtype_bytes", "kv_dtype_bytes",
                                                "num_params", "checkpoint"}
        kwargs = {k: config[k] for k in keys if k in config}
        if "num_key_value_heads" not in kwargs and "num_attention_heads" in kwargs:
            kwargs["num_key_value_heads"] = kwargs["num_attention_heads"]
        if config.get("model_type") == "qwen2":
            kwargs.setdefault("attention_bias", True)
        missing = {"hidden_size", "num_hidden_layers", "num_attention_heads",
                   "intermediate_size", "vocab_size"} - kwargs.keys()
        if missing:
            raise ValueError(f"model config lacks field(s): {', '.join(sorted(missing))}")
        return cls(name=name or str(config.get("_name_or_path") or config.get("model_type")),
                   dtype_bytes=dtype_bytes, **kwargs)


@dataclass(frozen=True, slots=True)
class HardwareSpec:
    """One accelerator: dense peak FLOP/s at the model's dtype, HBM bandwidth (bytes/s),
    host link bandwidth (bytes/s, one direction, for swap/offload models), memory (bytes, the
    total the driver reports, as NVML and `nvidia-smi` do; 0: unknown), and `device_name`,
    the name the device reports (`torch.cuda.get_device_name`; empty: `name`).
    `fit_from` names the GPU whose fitted roofline executor.cost_model=fitted_roofline applies
    to this one's peaks when it has no measurements of its own, empty for none
    (engines/measured_cost.py: borrowed_fit).

    Upstream's launchers size scheduler limits from the memory and the name
    (schedulers/device_defaults.py), and `kv_capacity_tokens=auto` the KV pool
    (engines/kv_pool.py)."""

    name: str
    # Upper bounds: a thousand times today's accelerators (H200: 9.9e14 FLOP/s, 4.8e12 B/s).
    peak_flops: float = ranged(low=0.0, low_open=True, high=1e18)
    memory_bandwidth: float = ranged(low=0.0, low_open=True, high=1e16)
    host_link_bandwidth: float = ranged(low=0.0, low_open=True, high=1e16)
    memory_bytes: float = ranged(0.0, low=0.0, high=1e15)
    device_name: str = ""
    fit_from: str = ""

    def __post_init__(self) -> None:
        owner = f"hardware {self.name!r}"
        for name in ("peak_flops", "memory_bandwidth", "host_link_bandwidth"):
            _positive(owner, name, getattr(self, name))
        if self.memory_bytes < 0:
            raise ValueError(f"{owner}: memory_bytes={self.memory_bytes!r}: must be >= 0")

    @property
    def device(self) -> DeviceSpec:
        """What upstream's launchers query of this device: its reported name and memory."""
        return DeviceSpec(self.device_name or self.name, self.memory_bytes)
