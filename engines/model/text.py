"""Text in and out of a checkpoint: its tokenizer, its chat template, decoding outputs.

A checkpoint folder that carries tokenizer files (tokenizer.json or tokenizer_config.json, as
`make model` writes) is read with `transformers.AutoTokenizer`; prompts are wrapped in the
folder's chat template (a user turn, the generation prompt appended) and tokenized as they
would be for `generate()`.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def has_tokenizer(folder: str | Path) -> bool:
    """Whether `folder` holds tokenizer files."""
    return any((Path(folder) / f).is_file() for f in TOKENIZER_FILES)


@lru_cache(maxsize=4)
def load_tokenizer(folder: str) -> Any:
    """The tokenizer of a checkpoint folder (cached per folder). Raises ValueError naming the
    folder when it has no tokenizer files."""
    if not has_tokenizer(folder):
        raise ValueError(f"tokenizer: {folder!r} holds no tokenizer files "
                         f"({', '.join(TOKENIZER_FILES)}); for SmolLM2 run `make model`")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


def chat_prompt_ids(tokenizer: Any, text: str) -> list[int]:
    """The token ids of `text` as one user turn in the tokenizer's chat template, ending with
    the assistant's generation prompt. Raises ValueError when there is no chat template."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("tokenizer: no chat template (tokenizer_config.json / "
                         "chat_template.jinja)")
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                             add_generation_prompt=True, tokenize=False)
    return list(tokenizer(rendered, add_special_tokens=False)["input_ids"])


def decode(tokenizer: Any, token_ids: list[int]) -> str:
    """The text of `token_ids`, special tokens (the final EOS) left out."""
    return str(tokenizer.decode(token_ids, skip_special_tokens=True))
