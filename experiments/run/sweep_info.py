"""What every job of one multirun shares: the W&B group of this invocation and the swept keys.

The launching process writes `<sweep dir>/sweep.json` when the multirun starts
(`experiments.run.callbacks.ComparisonCallback.on_multirun_start`); each job reads it, wherever it
runs (in-process, a joblib worker, a Slurm node on the shared filesystem), to name its W&B run
after its swept values only and to join the invocation's group. Running the same sweep folder
twice (a reproduce script) makes two groups.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from experiments.results.sinks import write_json

SWEEP_FILE = "sweep.json"


@dataclass(frozen=True, slots=True)
class SweepInfo:
    """One multirun invocation: its name, W&B group, swept keys and start time (UTC)."""

    name: str
    group: str
    swept: tuple[str, ...]
    started: str

    @classmethod
    def new(cls, name: str, swept: Iterable[str]) -> SweepInfo:
        """A new invocation of the sweep `name` (a fresh, unique group)."""
        now = datetime.now(UTC)
        group = f"{name}-{now:%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"
        return cls(name, group, tuple(dict.fromkeys(swept)), now.isoformat(timespec="seconds"))


def swept_keys(task_overrides: Iterable[str], sweeper_params: Mapping[str, Any] | None
               ) -> list[str]:
    """The keys a multirun sweeps: those of `hydra.sweeper.params` and the command-line
    overrides with several values (`key=a,b`, `key=range(...)`, ...)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    keys = [str(k) for k, v in (sweeper_params or {}).items() if _values(parser, k, v) != 1]
    fixed = set()
    for arg in task_overrides:
        try:
            ov = parser.parse_override(str(arg))
        except Exception:
            continue
        if ov.is_sweep_override():
            keys.append(ov.key_or_group)
        else:
            fixed.add(ov.key_or_group)  # a single value on the command line wins
    return [k for k in dict.fromkeys(keys) if k not in fixed]


def _values(parser: Any, key: object, value: object) -> int | None:
    """How many values the sweeper param `key: value` sweeps (None: unknown); a param of
    one value (`workload.realization: range(1)`, the default `repeats`) sweeps nothing."""
    try:
        ov = parser.parse_override(f"{key}={value}")
        return len(list(ov.sweep_string_iterator())) if ov.is_sweep_override() else 1
    except Exception:
        return None


def write_sweep_info(sweep_dir: str | Path, info: SweepInfo) -> Path:
    """Write `info` to `<sweep_dir>/sweep.json` (atomically)."""
    d = asdict(info)
    d["swept"] = list(info.swept)
    return write_json(d, Path(sweep_dir) / SWEEP_FILE)


def read_sweep_info(sweep_dir: str | Path) -> SweepInfo | None:
    """The invocation's `sweep.json`, or None when there is none (or it is unreadable)."""
    try:
        d = json.loads((Path(sweep_dir) / SWEEP_FILE).read_text())
        return SweepInfo(str(d["name"]), str(d["group"]), tuple(d["swept"]), str(d["started"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
