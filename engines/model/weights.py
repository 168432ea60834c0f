"""Decoder weights, and their loading from a Hugging Face checkpoint folder (safetensors).

The q, k, v projections are stored fused (`qkv`, rows q then k then v), as are the gate and up
projections (`gate_up`, rows gate then up): one matrix product each per layer.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from engines.model.config import CheckpointError, DecoderConfig

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# Tensors some checkpoints carry that the decoder recomputes or does not need.
_IGNORED_SUFFIXES = (".rotary_emb.inv_freq",)


@dataclass(slots=True)
class LayerWeights:
    """One decoder layer. Biases are None when the architecture has none."""

    input_norm: torch.Tensor
    qkv: torch.Tensor
    qkv_bias: torch.Tensor | None
    o: torch.Tensor
    o_bias: torch.Tensor | None
    post_norm: torch.Tensor
    gate_up: torch.Tensor
    gate_up_bias: torch.Tensor | None
    down: torch.Tensor
    down_bias: torch.Tensor | None


@dataclass(slots=True)
class DecoderWeights:
    """All weights; `lm_head` is `embed` itself when the embeddings are tied."""

    embed: torch.Tensor
    layers: list[LayerWeights]
    norm: torch.Tensor
    lm_head: torch.Tensor

    def num_bytes(self) -> int:
        """Bytes of distinct weight storage (a tied head counted once)."""
        seen: set[int] = set()
        total = 0
        tensors: list[torch.Tensor | None] = [self.embed, self.norm, self.lm_head]
        for layer in self.layers:
            tensors += [layer.input_norm, layer.qkv, layer.qkv_bias, layer.o, layer.o_bias,
                        layer.post_norm, layer.gate_up, layer.gate_up_bias, layer.down,
                        layer.down_bias]
        for t in tensors:
            if t is not None and t.data_ptr() not in seen:
                seen.add(t.data_ptr())
                total += t.numel() * t.element_size()
        return total


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """The weights' dtype: as asked, else float32 on a CPU and bfloat16 on a GPU."""
    if dtype is None:
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if isinstance(dtype, torch.dtype):
        if dtype not in DTYPES.values():
            raise ValueError(f"dtype={dtype}: supported: {', '.join(DTYPES)}")
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r}: supported: {', '.join(DTYPES)}")
    return DTYPES[dtype]


def expected_shapes(cfg: DecoderConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor name a checkpoint must hold for `cfg`, with its shape."""
    h, inter = cfg.hidden_size, cfg.intermediate_size
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (cfg.vocab_size, h),
                                          "model.norm.weight": (h,)}
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (cfg.vocab_size, h)
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = (h,)
        shapes[p + "post_attention_layernorm.weight"] = (h,)
        for name, rows in (("q", cfg.q_size), ("k", cfg.kv_size), ("v", cfg.kv_size)):
            shapes[p + f"self_attn.{name}_proj.weight"] = (rows, h)
            if cfg.qkv_bias:
                shapes[p + f"self_attn.{name}_proj.bias"] = (rows,)
        shapes[p + "self_attn.o_proj.weight"] = (h, cfg.q_size)
        if cfg.o_bias:
            shapes[p + "self_attn.o_proj.bias"] = (h,)
        for name, shape in (("gate", (inter, h)), ("up", (inter, h)), ("down", (h, inter))):
            shapes[p + f"mlp.{name}_proj.weight"] = shape
            if cfg.mlp_bias:
                shapes[p + f"mlp.{name}_proj.bias"] = (shape[0],)
    return shapes


def _index_files(folder: Path) -> dict[str, Path]:
    """Tensor name -> the safetensors file holding it."""
    from safetensors import safe_open

    index = folder / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        missing_files = sorted({f for f in weight_map.values() if not (folder / f).is_file()})
        if missing_files:
            raise CheckpointError(f"checkpoint {str(folder)!r}: model.safetensors.index.json "
                                  f"names missing file(s) {missing_files}")
        return {name: folder / f for name, f in weight_map.items()}
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"checkpoint {str(folder)!r}: no *.safetensors file")
    where: dict[str, Path] = {}
    for f in files:
        with safe_open(str(f), framework="pt") as sf:
            for name in sf.keys():  # noqa: SIM118 (safe_open has keys(), not iteration)
                where[name] = f
    return where


def build_weights(cfg: DecoderConfig, get: Callable[[str], torch.Tensor]) -> DecoderWeights:
    """Assemble (and fuse) the weights from a getter that returns each named tensor."""

    def opt(name: str, present: bool) -> torch.Tensor | None:
        return get(name) if present else None

    def cat(names: list[str], present: bool = True) -> torch.Tensor | None:
        return torch.cat([get(n) for n in names]) if present else None

    layers = []
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        a, m = p + "self_attn.", p + "mlp."
        layers.append(LayerWeights(
            input_norm=get(p + "input_layernorm.weight"),
            qkv=cat([a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"]),  # type: ignore[arg-type]
            qkv_bias=cat([a + "q_proj.bias", a + "k_proj.bias", a + "v_proj.bias"],
                         cfg.qkv_bias),
            o=get(a + "o_proj.weight"),
            o_bias=opt(a + "o_proj.bias", cfg.o_bias),
            post_norm=get(p + "post_attention_layernorm.weight"),
            gate_up=cat([m + "gate_proj.weight", m + "up_proj.weight"]),  # type: ignore[arg-type]
            gate_up_bias=cat([m + "gate_proj.bias", m + "up_proj.bias"], cfg.mlp_bias),
            down=get(m + "down_proj.weight"),
            down_bias=opt(m + "down_proj.bias", cfg.mlp_bias),
        ))
    embed = get("model.embed_tokens.weight")
    lm_head = embed if cfg.tie_word_embeddings else get("lm_head.weight")
    return DecoderWeights(embed=embed, layers=layers, norm=get("model.norm.weight"),
                          lm_head=lm_head)


def load_weights(folder: str | Path, cfg: DecoderConfig, dtype: torch.dtype,
                 device: torch.device) -> DecoderWeights:
    """Load and check every tensor `cfg` needs from the folder's safetensors files.

    Raises CheckpointError naming the tensor when one is missing, has the wrong shape, or
    when the checkpoint holds tensors this architecture does not have.
    """
    from safetensors import safe_open

    root = Path(folder)
    where = _index_files(root)
    shapes = expected_shapes(cfg)
    unexpected = sorted(
        n for n in where
        if n not in shapes and not n.endswith(_IGNORED_SUFFIXES)
        and not (n == "lm_head.weight" and cfg.tie_word_embeddings))
    if unexpected:
        shown = ", ".join(repr(n) for n in unexpected[:5])
        raise CheckpointError(f"checkpoint {str(root)!r}: {len(unexpected)} unexpected "
                              f"tensor(s) for {cfg.architecture}: {shown}")
    handles: dict[Path, object] = {}

    def get(name: str) -> torch.Tensor:
        f = where.get(name)
        if f is None:
            raise CheckpointError(f"checkpoint {str(root)!r}: tensor {name!r} is missing")
        if f not in handles:
            handles[f] = safe_open(str(f), framework="pt")
        t = handles[f].get_tensor(name)  # type: ignore[attr-defined]
        want = shapes[name]
        if tuple(t.shape) != want:
            raise CheckpointError(f"checkpoint {str(root)!r}: tensor {name!r} has shape "
                                  f"{tuple(t.shape)}, expected {want}")
        return t.to(device=device, dtype=dtype)

    return build_weights(cfg, get)


def random_weights(cfg: DecoderConfig, dtype: torch.dtype, device: torch.device,
                   seed: int = 0, std: float = 0.02) -> DecoderWeights:
    """Random weights of the right shapes (normal(0, std); norms 1), made on `device`."""
    gen = torch.Generator(device=device).manual_seed(seed)
    shapes = expected_shapes(cfg)

    def get(name: str) -> torch.Tensor:
        shape = shapes[name]
        if name.endswith("norm.weight"):
            return torch.ones(shape, dtype=dtype, device=device)
        t = torch.empty(shape, dtype=dtype, device=device)
        return t.normal_(0.0, std, generator=gen)

    return build_weights(cfg, get)
