"""Where the project's relative paths are read from.

A path in a config (a model group's checkpoint, a cost-model profile, a tokenizer, an output
lengths file) is taken as given when it is absolute or exists from the working directory,
else from the project root, so that `conf/` can name `models/...` or `conf/profiles/...` and
a run works from any directory.
"""

from __future__ import annotations

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def project_path(value: str | Path) -> Path:
    """`value` as given when it is absolute or exists, else under `PROJECT_ROOT`."""
    path = Path(value)
    return path if path.is_absolute() or path.exists() else PROJECT_ROOT / path
