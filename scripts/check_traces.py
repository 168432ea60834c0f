#!/usr/bin/env python3
"""Fail loudly, before any study runs, when a trace it needs is missing.

    python scripts/check_traces.py [WORKLOAD ...]

checks the trace file of every trace-replay workload preset (conf/workload/*.yaml with a
`file:` inside the trace folder; default: all of them, else those named) where the workloads
look for it (`workload.trace_dir`, else $SCHEDBENCH_TRACE_DIR, else data/traces), and exits
with status 1 naming each missing file and how to get it (scripts/fetch_traces.sh). A study
preset records a failed job and goes on (on_error=record): a missing trace must stop the
reproduction before that, not leave a table of failed jobs.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from experiments.inputs.workloads.replay import trace_path  # noqa: E402

WORKLOADS = ROOT / "conf" / "workload"


def preset(name: str) -> dict[str, Any]:
    """A workload preset's keys, over those of the presets its `defaults` list names."""
    cfg = yaml.safe_load((WORKLOADS / f"{name}.yaml").read_text()) or {}
    merged: dict[str, Any] = {}
    for base in cfg.pop("defaults", None) or []:
        if isinstance(base, str) and (WORKLOADS / f"{base}.yaml").is_file():
            merged.update(preset(base))
    return {**merged, **cfg}


def trace_files(names: Sequence[str] = ()) -> dict[str, str]:
    """Workload preset -> the trace file it replays (inside the trace folder), for every
    preset of conf/workload/ that replays one (or those in `names`)."""
    out = {}
    for path in sorted(WORKLOADS.glob("*.yaml")):
        cfg = preset(path.stem)
        file = cfg.get("file")
        if "trace_dir" in cfg and isinstance(file, str) and file != "???" \
                and (not names or path.stem in names):
            out[path.stem] = file
    unknown = sorted(set(names) - set(out))
    if unknown:
        raise SystemExit(f"check_traces: no trace-replay workload preset named {unknown} "
                         f"(known: {sorted(trace_files())})")
    return out


def missing(files: dict[str, str]) -> list[str]:
    """The error of each trace file that is not where the workloads look for it."""
    errors = []
    for name, file in files.items():
        try:
            trace_path(None, file)
        except FileNotFoundError as e:
            errors.append(f"workload={name}: {e}")
    return errors


def main(argv: Sequence[str] | None = None) -> int:
    """Check the traces; print what is missing and return 1, else 0."""
    names = list(sys.argv[1:] if argv is None else argv)
    files = trace_files(names)
    errors = missing(files)
    for e in errors:
        print(f"missing trace: {e}", file=sys.stderr)
    if errors:
        print(f"check_traces: {len(errors)} of {len(files)} traces missing; nothing was run",
              file=sys.stderr)
        return 1
    print(f"traces: all {len(files)} present ({', '.join(sorted(set(files.values())))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
