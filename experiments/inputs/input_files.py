"""The input files a run config reads, and their fingerprints (size and SHA-256).

`experiments.run.main.config_hash` covers them, so a trace or lengths file edited in place makes
a new config: resume reruns the job instead of skipping it with stale results. (Its own
module: the hashes are cached per file, and the joblib launcher pickles the job function of
`experiments.run`, which must not hold that cache by value.)
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from experiments.results.job_folder import file_sha256


def _input_paths(cfg: Mapping[str, Any]) -> dict[str, Path]:
    """The input files a config reads, by config key: the workload's trace / lengths file,
    a length distribution's `path`, the capacity file of `workload.load`, the sim
    executor's cost-model profile."""
    from experiments.inputs.workloads.datasets_source import HUB_PREFIX
    from experiments.inputs.workloads.replay import trace_path
    from experiments.paths import project_path

    out: dict[str, Path] = {}
    workload = cfg.get("workload") or {}
    file = workload.get("file")
    if isinstance(file, str) and file and not file.startswith(HUB_PREFIX):
        with contextlib.suppress(FileNotFoundError):  # the run itself names a missing file
            out["workload.file"] = trace_path(workload.get("trace_dir"), file)
    for key, value in workload.items():
        if isinstance(value, Mapping) and value.get("dist") == "file" and value.get("path"):
            out[f"workload.{key}.path"] = Path(str(value["path"]))
    capacity = workload.get("capacity_file")
    if isinstance(capacity, str) and capacity:
        out["workload.capacity_file"] = Path(capacity).expanduser()
    profile = (cfg.get("executor") or {}).get("profile")
    if isinstance(profile, str) and profile:
        out["executor.profile"] = project_path(profile)
    return {k: p for k, p in out.items() if p.is_file()}


@functools.lru_cache(maxsize=64)
def _content_entry(path: str, size: int, mtime_ns: int) -> tuple[int, str]:
    del mtime_ns  # part of the cache key only: a file written again is hashed again
    return size, file_sha256(path)


def input_fingerprints(cfg: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Size and SHA-256 of every input file of `cfg` (see `_input_paths`), by config key."""
    out: dict[str, dict[str, Any]] = {}
    for key, p in sorted(_input_paths(cfg).items()):
        st = p.stat()
        size, digest = _content_entry(str(p.resolve()), st.st_size, st.st_mtime_ns)
        out[key] = {"bytes": size, "sha256": digest}
    return out


