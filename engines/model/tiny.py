"""Tiny random checkpoints made with `transformers`, for tests and CPU benchmarks.

Nothing is downloaded: a config is built in memory, the model is initialised at random with a
fixed seed, and `save_pretrained` writes `config.json` and safetensors to a folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

TINY_SHAPE: dict[str, Any] = {
    "vocab_size": 256,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-6,
}

_CLASSES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "mistral": ("MistralConfig", "MistralForCausalLM"),
}


def tiny_hf_model(arch: str = "llama", seed: int = 0, spread: float = 0.2,
                  **overrides: Any) -> Any:
    """A random `transformers` causal LM of `arch` (llama, qwen2, mistral) in float32.

    Every parameter is drawn from a seeded normal: matrices with std `spread` (large enough
    that attention is far from uniform and logits far from tied), biases with std 0.1, norm
    weights around 1, so that a wrong bias, norm or mask changes the output. `overrides`
    replace fields of `TINY_SHAPE` or add config fields (e.g. `rope_parameters`,
    `tie_word_embeddings`).
    """
    import transformers

    if arch not in _CLASSES:
        raise ValueError(f"arch={arch!r}: valid: {', '.join(_CLASSES)}")
    cfg_name, model_name = _CLASSES[arch]
    fields = {**TINY_SHAPE, **overrides}
    cfg = getattr(transformers, cfg_name)(**fields)
    cfg.architectures = [model_name]
    torch.manual_seed(seed)
    model = getattr(transformers, model_name)(cfg)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=gen)
            if name.endswith("norm.weight"):
                param.copy_(1.0 + 0.1 * noise)
            elif name.endswith(".bias"):
                param.copy_(0.1 * noise)
            else:
                param.copy_(spread * noise)
    return model.eval()


def save_tiny_checkpoint(path: str | Path, arch: str = "llama", seed: int = 0,
                         max_shard_size: str | None = None, spread: float = 0.2,
                         **overrides: Any) -> Path:
    """Write `tiny_hf_model(arch, seed, spread, **overrides)` to `path` (config.json and
    safetensors); `max_shard_size` (e.g. "40KB") shards it."""
    model = tiny_hf_model(arch, seed, spread, **overrides)
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    kwargs: dict[str, Any] = {}
    if max_shard_size is not None:
        kwargs["max_shard_size"] = max_shard_size
    model.save_pretrained(str(out), **kwargs)
    return out


def load_or_tiny(path: str | Path | None) -> Any:
    """The paged decoder of the checkpoint folder `path` in float32 on the CPU; None: of a tiny
    random Llama, written to a temporary folder and loaded from it (the measurement scripts'
    default when no trained model is at hand)."""
    import tempfile

    from engines.model import PagedDecoder

    if path is not None:
        return PagedDecoder.from_pretrained(Path(path), dtype="float32", device="cpu")
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = save_tiny_checkpoint(Path(tmp) / "tiny")
        return PagedDecoder.from_pretrained(ckpt, dtype="float32", device="cpu")
