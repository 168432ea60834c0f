"""Weights & Biases: one run per job, grouped by sweep; and a reader for offline runs.

`log_run` starts a run (offline by default: written under `<dir>/wandb/offline-run-*`, for
`wandb sync` later), records the flattened config, the summary metrics, the per-request table
(scalar columns plus TTFT / TPOT / E2EL in ms) and the job's figures, and finishes it.
`read_offline_run` reads an offline run's `.wandb` file back (config, summary, group, the
tables and files it logged), which is how the tests check what a job wrote.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from experiments.sinks import json_safe

MODES = ("offline", "online", "disabled")


@dataclass(frozen=True, slots=True)
class WandbOptions:
    """The `logger=wandb` settings (see conf/logger/wandb.yaml)."""

    project: str = "schedbench"
    entity: str | None = None
    mode: str = "offline"
    dir: str | None = None
    group: str | None = None
    tags: tuple[str, ...] = ()
    log_requests_table: bool = True
    max_table_rows: int = 20000
    log_figures: bool = True

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"logger.mode={self.mode!r}: valid: {', '.join(MODES)}")
        if self.max_table_rows < 0:
            raise ValueError(f"logger.max_table_rows={self.max_table_rows!r}: must be >= 0")

    @classmethod
    def from_mapping(cls, cfg: Mapping[str, Any]) -> WandbOptions:
        """From the logger config (its `name` is ignored)."""
        d = {k: v for k, v in cfg.items() if k != "name"}
        d["tags"] = tuple(d.get("tags") or ())
        valid = set(cls.__dataclass_fields__)
        unknown = sorted(set(d) - valid)
        if unknown:
            raise ValueError(f"logger: unknown field(s) {', '.join(unknown)}; valid: "
                             f"{', '.join(sorted(valid))}")
        return cls(**d)


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one level of dotted keys."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def request_frame(requests: pa.Table, max_rows: int) -> Any:
    """The per-request table for W&B: scalar columns, the latencies in ms, prefix hits and
    the tokens computed at preemptions (sums), the first `max_rows` rows by arrival (a
    run's requests.parquet lists requests in the order they ended)."""
    import pyarrow.compute as pc

    order = pc.sort_indices(requests.select(["arrival_time"]),
                            sort_keys=[("arrival_time", "ascending")])
    t = requests.take(order.slice(0, max_rows))
    scalar = [f.name for f in t.schema if not pa.types.is_list(f.type)]
    df = t.select(scalar).to_pandas()
    arrival = df["arrival_time"].to_numpy()
    first = df["first_token_time"].to_numpy()
    finish = df["finish_time"].to_numpy()
    nout = df["output_len"].to_numpy()
    df["ttft_ms"] = (first - arrival) * 1000.0
    df["e2el_ms"] = (finish - arrival) * 1000.0
    with np.errstate(divide="ignore", invalid="ignore"):
        df["tpot_ms"] = np.where(nout > 1, (finish - first) / (nout - 1) * 1000.0, np.nan)
    for name in ("prefix_hit_tokens", "computed_at_preemption"):
        col = t.column(name).combine_chunks()
        values = np.asarray(pc.list_flatten(col).to_numpy(), dtype=np.float64)
        parents = np.asarray(pc.list_parent_indices(col).to_numpy(), dtype=np.int64)
        df[f"{name}_sum"] = np.bincount(parents, weights=values,
                                        minlength=len(col)).astype(np.int64)
    return df


def log_run(config: Mapping[str, Any], summary: Mapping[str, Any], requests: pa.Table,
            out_dir: str | Path, opts: WandbOptions, group: str | None, name: str,
            figures: Mapping[str, Path] | None = None) -> Path | None:
    """Log one job as one W&B run; returns the run's folder (None when disabled)."""
    if opts.mode == "disabled":
        return None
    os.environ.setdefault("WANDB_SILENT", "true")
    import wandb

    root = Path(opts.dir) if opts.dir else Path(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    # Keyword arguments through a dict: wandb's annotations of `mode` differ between releases,
    # and an ignore comment needed by one release is an unused ignore under another.
    init_args: dict[str, Any] = dict(
        project=opts.project, entity=opts.entity, mode=opts.mode, dir=str(root),
        group=opts.group or group, name=name, tags=list(opts.tags),
        config=json_safe(flatten(config)), settings=wandb.Settings(console="off"))
    run = wandb.init(**init_args)
    try:
        run.summary.update(json_safe(dict(summary)))
        payload: dict[str, Any] = {}
        if opts.log_requests_table and opts.max_table_rows:
            payload["requests"] = wandb.Table(dataframe=request_frame(requests,
                                                                      opts.max_table_rows))
        if opts.log_figures:
            for key, path in (figures or {}).items():
                payload[f"figures/{key}"] = wandb.Image(str(path))
        if payload:
            run.log(payload)
        run_dir = Path(run.dir).parent  # .../offline-run-*/files -> .../offline-run-*
    finally:
        run.finish()
    return run_dir


# --- reading an offline run back ------------------------------------------------------------

_HEADER = b":W&B"
_BLOCK = 32768
_REC_HEADER = 7  # crc32 (4), length (2), type (1): the LevelDB log format W&B writes


@dataclass
class OfflineRun:
    """What an offline run's `.wandb` file holds, decoded."""

    path: Path
    run_id: str = ""
    project: str = ""
    group: str = ""
    name: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    history_keys: set[str] = field(default_factory=set)


def _records(data: bytes) -> list[bytes]:
    if data[:4] != _HEADER:
        raise ValueError("not a W&B run file (no :W&B header)")
    pos, buf, out = 7, b"", []
    while pos + _REC_HEADER <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _REC_HEADER:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + _REC_HEADER])
        pos += _REC_HEADER
        if kind == 0 and length == 0:
            continue
        buf += data[pos:pos + length]
        pos += length
        if kind in (1, 4):  # FULL, LAST
            out.append(buf)
            buf = b""
    return out


def _set(target: dict[str, Any], item: Any) -> None:
    keys = list(item.nested_key) or [item.key]
    node = target
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    node[keys[-1]] = json.loads(item.value_json)


def read_offline_run(run_dir: str | Path) -> OfflineRun:
    """Decode the `run-*.wandb` file of an offline run folder."""
    import importlib

    # Generated protobuf code: typed as Any, since not every wandb release ships its stubs.
    pb: Any = importlib.import_module("wandb.proto.wandb_internal_pb2")

    files = sorted(Path(run_dir).glob("run-*.wandb"))
    if not files:
        raise FileNotFoundError(f"{run_dir}: no run-*.wandb file")
    out = OfflineRun(path=files[0])
    for raw in _records(files[0].read_bytes()):
        rec = pb.Record()
        rec.ParseFromString(raw)
        kind = rec.WhichOneof("record_type")
        if kind == "run":
            out.run_id, out.project = rec.run.run_id, rec.run.project
            out.group, out.name = rec.run.run_group, rec.run.display_name
            for item in rec.run.config.update:
                _set(out.config, item)
        elif kind == "config":
            for item in rec.config.update:
                _set(out.config, item)
        elif kind == "summary":
            for item in rec.summary.update:
                _set(out.summary, item)
        elif kind == "history":
            out.history_keys.update(i.nested_key[0] if i.nested_key else i.key
                                    for i in rec.history.item)
        elif kind == "files":
            out.files.extend(f.path for f in rec.files.files)
    return out


def offline_runs(root: str | Path) -> list[Path]:
    """The offline run folders under `root` (e.g. a job folder)."""
    return sorted(p for p in Path(root).glob("**/offline-run-*") if p.is_dir())
