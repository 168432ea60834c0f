"""Loading tiny random Hugging Face checkpoints through the real path, and the decoder's logits
against `transformers` on the same weights; mismatched checkpoints fail naming what is wrong.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from engines.model import CheckpointError, PagedDecoder, load_config
from engines.model.tiny import save_tiny_checkpoint, tiny_hf_model
from engines.model.weights import resolve_dtype
from kernels import build_metadata, get_attention_backend

LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
               "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 32}
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "llama": ("llama", {}),
    "qwen2_bias": ("qwen2", {}),
    "mistral": ("mistral", {}),
    "llama_tied": ("llama", {"tie_word_embeddings": True}),
    "llama3_rope": ("llama", {"rope_parameters": LLAMA3_ROPE}),
    "linear_rope": ("llama", {"rope_parameters": {"rope_type": "linear", "rope_theta": 1e4,
                                                  "factor": 2.0}}),
    "yarn_rope": ("qwen2", {"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4,
                                                "factor": 4.0,
                                                "original_max_position_embeddings": 64}}),
    "llama_all_bias": ("llama", {"attention_bias": True, "mlp_bias": True}),
    "wide_heads": ("llama", {"head_dim": 32, "num_attention_heads": 4,
                             "num_key_value_heads": 1}),
}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ckpt")
    out = {name: save_tiny_checkpoint(root / name, arch, seed=3, **ov)
           for name, (arch, ov) in VARIANTS.items()}
    out["sharded"] = save_tiny_checkpoint(root / "sharded", "llama", seed=3,
                                          max_shard_size="40KB")
    assert (out["sharded"] / "model.safetensors.index.json").is_file()
    assert len(list(out["sharded"].glob("*.safetensors"))) > 1
    return out


def paged_logits(model: PagedDecoder, ids: list[int], chunks: list[int], page_size: int,
                 seed: int = 0) -> torch.Tensor:
    """Logits at every position, computing `ids` in chunks through a scattered page table."""
    num_pages = -(-len(ids) // page_size)
    pages = list(range(num_pages + 5))
    random.Random(seed).shuffle(pages)
    pages = pages[:num_pages]
    kv = model.new_kv_cache((num_pages + 5) * page_size)
    attn = get_attention_backend("torch")
    out, start = [], 0
    for n in chunks:
        meta = build_metadata([n], [start + n], [pages], page_size)
        x = torch.tensor(ids[start:start + n])
        out.append(model.forward(x, meta, kv, attn, torch.arange(n)))
        start += n
    return torch.cat(out)


def hf_logits(name: str, ids: list[int]) -> torch.Tensor:
    arch, ov = VARIANTS.get(name, ("llama", {}))
    hf = tiny_hf_model(arch, seed=3, **ov)
    with torch.no_grad():
        return hf(torch.tensor([ids])).logits[0]


@pytest.mark.parametrize("name", [*VARIANTS, "sharded"])
def test_logits_match_transformers(checkpoints: dict[str, Path], name: str) -> None:
    model = PagedDecoder.from_pretrained(checkpoints[name], device="cpu")
    assert model.dtype == torch.float32 and model.device.type == "cpu"
    ids = [random.Random(7).randrange(256) for _ in range(45)]
    ref = hf_logits(name, ids)
    for page_size, chunks in ((16, [45]), (1, [20, 1, 17, 7])):
        out = paged_logits(model, ids, chunks, page_size)
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)


def test_config_fields(checkpoints: dict[str, Path]) -> None:
    qwen = load_config(checkpoints["qwen2_bias"])
    assert qwen.architecture == "Qwen2ForCausalLM" and qwen.qkv_bias and not qwen.o_bias
    llama3 = load_config(checkpoints["llama3_rope"])
    assert llama3.rope.rope_type == "llama3" and llama3.rope.theta == 500000.0
    assert llama3.rope.factor == 8.0 and llama3.rope.original_max_position_embeddings == 32
    tied = PagedDecoder.from_pretrained(checkpoints["llama_tied"], device="cpu")
    assert tied.weights.lm_head is tied.weights.embed
    wide = load_config(checkpoints["wide_heads"])
    assert (wide.head_dim, wide.num_key_value_heads) == (32, 1)


def test_rope_scaling_is_applied(checkpoints: dict[str, Path]) -> None:
    """The llama3 checkpoint's logits differ from the same weights with plain RoPE."""
    model = PagedDecoder.from_pretrained(checkpoints["llama3_rope"], device="cpu")
    ids = list(range(3, 43))
    scaled = paged_logits(model, ids, [40], 16)
    plain = PagedDecoder.from_pretrained(checkpoints["llama"], device="cpu")  # default RoPE
    plain.weights = model.weights
    assert not torch.allclose(scaled, paged_logits(plain, ids, [40], 16), atol=1e-3)


def test_dtype_is_the_one_asked(checkpoints: dict[str, Path]) -> None:
    model = PagedDecoder.from_pretrained(checkpoints["qwen2_bias"], dtype="bfloat16",
                                         device="cpu")
    assert model.weights.embed.dtype == torch.bfloat16
    assert model.weights.layers[0].qkv_bias is not None
    assert model.weights.layers[0].qkv_bias.dtype == torch.bfloat16
    ids = list(range(5, 30))
    out = paged_logits(model, ids, [25], 16)
    assert out.dtype == torch.float32  # logits are returned in float32
    ref = hf_logits("qwen2_bias", ids)
    assert (out.argmax(-1) == ref.argmax(-1)).float().mean() > 0.8
    with pytest.raises(ValueError, match=r"dtype='float8'"):
        PagedDecoder.from_pretrained(checkpoints["llama"], dtype="float8")


def test_default_dtype_follows_the_device() -> None:
    assert resolve_dtype(None, torch.device("cpu")) == torch.float32
    assert resolve_dtype(None, torch.device("cuda")) == torch.bfloat16
    assert resolve_dtype("float16", torch.device("cpu")) == torch.float16


# ---------------------------------------------------------------- mismatched checkpoints
def _copy(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def _edit_tensors(folder: Path, edit: Any) -> None:
    f = folder / "model.safetensors"
    tensors = load_file(str(f))
    edit(tensors)
    save_file(tensors, str(f), metadata={"format": "pt"})


def _edit_config(folder: Path, **fields: Any) -> None:
    f = folder / "config.json"
    cfg = json.loads(f.read_text())
    cfg.update(fields)
    f.write_text(json.dumps(cfg))


def test_missing_tensor_is_named(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    ck = _copy(checkpoints["llama"], tmp_path / "c")
    _edit_tensors(ck, lambda t: t.pop("model.layers.1.mlp.up_proj.weight"))
    with pytest.raises(CheckpointError, match=r"'model.layers.1.mlp.up_proj.weight' is missing"):
        PagedDecoder.from_pretrained(ck)


def test_wrong_shape_is_named(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    ck = _copy(checkpoints["llama"], tmp_path / "c")

    def shrink(t: dict[str, torch.Tensor]) -> None:
        t["model.layers.0.self_attn.k_proj.weight"] = torch.zeros(16, 64)

    _edit_tensors(ck, shrink)
    with pytest.raises(CheckpointError, match=r"'model.layers.0.self_attn.k_proj.weight' has "
                                              r"shape \(16, 64\), expected \(32, 64\)"):
        PagedDecoder.from_pretrained(ck)


def test_unexpected_tensor_is_named(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    ck = _copy(checkpoints["mistral"], tmp_path / "c")

    def add_bias(t: dict[str, torch.Tensor]) -> None:
        t["model.layers.0.self_attn.q_proj.bias"] = torch.zeros(64)

    _edit_tensors(ck, add_bias)
    with pytest.raises(CheckpointError, match=r"'model.layers.0.self_attn.q_proj.bias'"):
        PagedDecoder.from_pretrained(ck)


def test_missing_lm_head_when_untied(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    ck = _copy(checkpoints["llama_tied"], tmp_path / "c")
    _edit_config(ck, tie_word_embeddings=False)
    with pytest.raises(CheckpointError, match=r"'lm_head.weight' is missing"):
        PagedDecoder.from_pretrained(ck)


def test_unsupported_architecture_is_named(tmp_path: Path) -> None:
    from transformers import GPT2Config

    GPT2Config(n_layer=1, n_embd=32, n_head=2).save_pretrained(str(tmp_path))
    with pytest.raises(CheckpointError, match=r"architectures=.*model_type='gpt2'"):
        PagedDecoder.from_pretrained(tmp_path)


@pytest.mark.parametrize("fields,match", [
    ({"hidden_act": "gelu"}, r"hidden_act='gelu'"),
    ({"rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4, "short_factor": [1.0] * 8,
                          "long_factor": [1.0] * 8, "original_max_position_embeddings": 64}},
     r"rope_type='longrope'"),
    ({"num_key_value_heads": 3}, r"num_key_value_heads=3"),
])
def test_unsupported_fields_are_named(checkpoints: dict[str, Path], tmp_path: Path,
                                      fields: dict[str, Any], match: str) -> None:
    ck = _copy(checkpoints["llama"], tmp_path / "c")
    _edit_config(ck, **fields)
    with pytest.raises(CheckpointError, match=match):
        PagedDecoder.from_pretrained(ck)


def test_folder_without_weights(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "config.json").write_bytes((checkpoints["llama"] / "config.json").read_bytes())
    with pytest.raises(CheckpointError, match=r"no \*.safetensors"):
        PagedDecoder.from_pretrained(tmp_path)
    with pytest.raises(CheckpointError, match=r"no config.json"):
        PagedDecoder.from_pretrained(tmp_path / "nowhere")
