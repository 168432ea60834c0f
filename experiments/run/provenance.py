"""What really ran, for summary.json: the project's git state, the model and device of the
real executor (its checkpoint, not the sim's model group), the workload's own name.

    git_state()                          # {"git_commit": sha or None, "git_dirty": bool or None}
    checkpoint_config(cfg.executor)      # the checkpoint's config.json, or None
    real_model_summary(executor, path)   # model, layers, hidden size, dtype, device, timer
    workload_summary(cfg, stream, None)  # the workload config's name, what it dropped
"""

from __future__ import annotations

import json
import platform
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from experiments.inputs.workloads import RequestStream
from experiments.paths import PROJECT_ROOT


def _git(root: Path, *args: str) -> str | None:
    try:
        proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def git_state(root: str | Path = PROJECT_ROOT) -> dict[str, Any]:
    """The commit checked out at `root` and whether tracked or untracked (not ignored) files
    differ from it; both None when `root` is not the top of a git checkout (an installed
    copy inside some other repository is not the project's checkout)."""
    top = _git(Path(root), "rev-parse", "--show-toplevel")
    if top is None or Path(top.strip()).resolve() != Path(root).resolve():
        return {"git_commit": None, "git_dirty": None}
    commit = _git(Path(root), "rev-parse", "HEAD")
    status = _git(Path(root), "status", "--porcelain")
    return {"git_commit": commit.strip() if commit else None,
            "git_dirty": bool(status.strip()) if status is not None else None}


def checkpoint_config(cfg_executor: Mapping[str, Any] | DictConfig) -> dict[str, Any] | None:
    """The `config.json` of the real executor's checkpoint as a dict; None when the path is
    unset or holds no readable config (the executor's builder then says which)."""
    if isinstance(cfg_executor, DictConfig) and OmegaConf.is_missing(cfg_executor,
                                                                     "model_path"):
        return None
    path = cfg_executor.get("model_path")
    if not path:
        return None
    from experiments.run.preflight import resolve_model_path

    try:
        data = json.loads((resolve_model_path(str(path)) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def device_name(device: Any) -> str:
    """A readable name of a torch device: the GPU's model, or the CPU's."""
    import torch

    dev = torch.device(device)
    if dev.type == "cuda" and torch.cuda.is_available():
        return str(torch.cuda.get_device_name(dev))
    return f"cpu ({platform.processor() or platform.machine()})"


def real_model_summary(executor: Any, model_path: str, config: Mapping[str, Any] | None
                       ) -> dict[str, Any]:
    """summary.json's model and hardware fields for `executor=real`: the checkpoint's name
    (its `_name_or_path`, else the folder), path, layers, hidden size, the dtype and device
    it ran in, the device's name as the hardware, and the step timer as resolved for that
    device (`timer`, `timer_repeats`, `timer_prefill_repeats`, `timer_clock`;
    `timer_reference_s` and its source for timer=reference)."""
    cfg = executor.model.config
    name = str((config or {}).get("_name_or_path") or "") or str(Path(model_path).resolve())
    return {"model": name, "model_path": str(model_path),
            "num_hidden_layers": int(cfg.num_hidden_layers),
            "hidden_size": int(cfg.hidden_size),
            "dtype": str(executor.model.dtype).removeprefix("torch."),
            "device": str(executor.model.device),
            "hardware": device_name(executor.model.device),
            "timer": executor.timer.name, "timer_repeats": executor.timer.repeats,
            "timer_prefill_repeats": executor.timer.prefill_repeats,
            "timer_clock": executor.timer.clock,
            "timer_reference_s": executor.timer.reference_s,
            "timer_reference_source": executor.timer.reference_source}


def step_clock(executor_cfg: Any, executor: Any) -> str:
    """The clock the engine's time ran on (summary.json `clock`): `simulated` (the cost
    model's predicted step times), else the real executor's measured step times: `cuda_events`
    on a GPU, else its CPU timer (`executor.timer`: `wall` or `cpu`)."""
    if str(executor_cfg.name) != "real":
        return "simulated"
    model = getattr(executor, "model", None)
    if model is not None and getattr(model.device, "type", "") == "cuda":
        return "cuda_events"
    return str(executor_cfg.get("timer", "wall"))


def sim_model_summary(model: Any, hardware: Any) -> dict[str, Any]:
    """summary.json's model and hardware fields for `executor=sim`: the model and hardware
    groups the cost model was given (nothing ran on a device)."""
    return {"model": model.name, "model_path": None,
            "num_hidden_layers": int(model.num_hidden_layers),
            "hidden_size": int(model.hidden_size), "dtype": None, "device": None,
            "hardware": hardware.name, "timer": None, "timer_repeats": None,
            "timer_prefill_repeats": None,
            "timer_clock": None, "timer_reference_s": None, "timer_reference_source": None}


def workload_label(cfg: DictConfig, label: str | None = None) -> str:
    """The workload's own name: `label` when given, else the config file Hydra composed
    (`workload=azure_conv`: "azure_conv", where `workload.name` is the generator, "azure"
    for both Azure traces), else `workload.name` (a config composed without Hydra's run)."""
    if label:
        return label
    if HydraConfig.initialized():
        choice = HydraConfig.get().runtime.choices.get("workload")
        if choice:
            return str(choice)
    return str(cfg.workload.name)


def workload_summary(cfg: DictConfig, stream: RequestStream, label: str | None
                     ) -> dict[str, Any]:
    """summary.json's workload fields: its own name, generator, trace file, and what its
    transforms dropped (reason -> count) or clipped before the run."""
    return {"workload": workload_label(cfg, label),
            "workload_generator": str(cfg.workload.name),
            "workload_file": cfg.workload.get("file"),
            "workload_dropped": dict(stream.dropped),
            "workload_clipped": stream.clipped}
