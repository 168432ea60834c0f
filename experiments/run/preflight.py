"""Checks of a command line and a config before any job runs, each failing with one message
that says what is wrong and what to type instead.

    explain_scheduler_keys(argv, conf_dir)   # a scheduler.KEY that a scheduler to run lacks
    check_real_executor(cfg.executor)        # executor=real: model_path set and a checkpoint
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from experiments.paths import project_path
from schedulers import registry


class ConfigError(ValueError):
    """A config or command line that cannot run; the message says why and what to type."""


# The closest key of the other scheduler (the schedulers' own names for one knob).
COUNTERPARTS: dict[tuple[str, str], str] = {
    ("vllm", "max_num_seqs"): "max_running_requests",
    ("vllm", "max_num_batched_tokens"): "chunked_prefill_size",
    ("vllm", "block_size"): "page_size",
    ("vllm", "policy"): "schedule_policy",
    ("sglang", "max_running_requests"): "max_num_seqs",
    ("sglang", "chunked_prefill_size"): "max_num_batched_tokens",
    ("sglang", "max_prefill_tokens"): "max_num_batched_tokens",
    ("sglang", "page_size"): "block_size",
    ("sglang", "schedule_policy"): "policy",
}
AUTO = "auto"  # kv_capacity_tokens=auto: the pool vLLM would leave (engines/kv_pool.py)


def parse_kv_capacity(value: Any) -> int | str:
    """`kv_capacity_tokens` checked: a positive number of token slots, or "auto"."""
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return AUTO
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"kv_capacity_tokens={value!r}: must be a positive number of token "
                         "slots or 'auto' (the pool vLLM would leave on the hardware)")
    try:
        tokens = int(value)
    except ValueError:
        raise ValueError(f"kv_capacity_tokens={value!r}: must be a positive number of token "
                         "slots or 'auto' (the pool vLLM would leave on the hardware)") from None
    if tokens < 1:
        raise ValueError(f"kv_capacity_tokens={tokens}: must be a positive number of token "
                         "slots (or 'auto')")
    return tokens


# Keys that are one knob for both schedulers at the top level of the config.
TOP_LEVEL: dict[str, str] = {"max_model_len": "max_model_len",
                             "context_length": "max_model_len"}


def _parse(argv: Sequence[str]) -> tuple[bool, list[Any]]:
    """(multirun?, the parsed overrides of the command line)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    multirun = any(a in ("-m", "--multirun") for a in argv)
    overrides = []
    for arg in argv:
        if arg.startswith("-"):
            continue
        try:
            overrides.append(parser.parse_override(arg))
        except Exception:  # Hydra reports a malformed override itself
            continue
    return multirun, overrides


def _values(ov: Any) -> list[str]:
    return (list(ov.sweep_string_iterator()) if ov.is_sweep_override()
            else [str(ov.value())])


def _configured_schedulers(config_dir: str, groups: list[str], multirun: bool) -> list[str]:
    """The schedulers the config runs without a `scheduler=` override: those that
    `hydra.sweeper.params` sweeps in a multirun (after the given group choices, e.g. an
    experiment preset), else the default scheduler."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from experiments.run.config import register_configs

    register_configs()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=config_dir, version_base=None):
            cfg = compose(config_name="config", overrides=groups, return_hydra_config=True)
    except Exception:  # the run itself reports a config that does not compose
        return []
    finally:
        GlobalHydra.instance().clear()
    swept = OmegaConf.select(cfg, "hydra.sweeper.params.scheduler", default=None)
    if swept is None or not multirun:
        return [str(cfg.scheduler.name)]
    return [s.strip() for s in str(swept).split(",") if s.strip()]


def explain_scheduler_keys(argv: Sequence[str], config_dir: str) -> str | None:
    """When a `scheduler.KEY=...` override names a key that one of the schedulers this
    command runs does not have (typically a vLLM key in the default sweep over both), a
    message naming the scheduler that lacks it, its counterpart there if any, and the command
    that fixes the scheduler. None when every scheduler to run has every such key."""
    from experiments.run.config import SCHEDULER_SCHEMAS

    multirun, overrides = _parse(argv)
    keys = [(ov.key_or_group.split(".", 1)[1], ov.input_line) for ov in overrides
            if ov.key_or_group.startswith("scheduler.") and not ov.is_add()
            and not ov.is_delete() and ov.key_or_group.count(".") == 1]
    if not keys:
        return None
    chosen = [ov for ov in overrides if ov.key_or_group == "scheduler"]
    if chosen:
        schedulers = [v for ov in chosen for v in _values(ov)]
        if not multirun:
            schedulers = schedulers[-1:]
    else:
        groups = [ov.input_line for ov in overrides
                  if ov.key_or_group in ("experiment",) and not ov.is_sweep_override()]
        schedulers = _configured_schedulers(config_dir, groups, multirun)
    fields = {name: {f.name for f in dataclasses.fields(SCHEDULER_SCHEMAS[name])}
              for name in registry.all_names() if not registry.get(name).test_only}
    for key, arg in keys:
        owners = [s for s in fields if key in fields[s]]
        compared = [s for s in owners if s in registry.names()]
        owners = compared or owners  # the default comparison's first: the likely meaning
        lacking = [s for s in dict.fromkeys(schedulers) if s in fields and key not in fields[s]]
        if not lacking:
            continue
        if key in TOP_LEVEL:
            return (f"override {arg!r}: the context length is one setting for both "
                    f"schedulers: use the top-level key, e.g. "
                    f"{TOP_LEVEL[key]}={arg.split('=', 1)[1]}")
        running = ", ".join(dict.fromkeys(schedulers))
        if not owners:
            return None  # no scheduler has it: explain_override_error lists the valid keys
        owner = owners[0]
        lines = [f"override {arg!r}: {key} is a setting of the {'/'.join(owners)} scheduler; "
                 f"this command runs {running}, and {', '.join(lacking)} has no key {key!r}."]
        value = arg.split("=", 1)[1]
        lines.append(f"  Fix the scheduler:  {'-m ' if multirun else ''}scheduler={owner} "
                     f"scheduler.{key}={value}")
        for other in lacking:
            twin = COUNTERPARTS.get((owner, key))
            if twin and twin in fields[other]:
                how = (f"in its own sweep: -m scheduler={other} scheduler.{twin}=..." if multirun
                       else f"scheduler={other} scheduler.{twin}=...")
                lines.append(f"  {other}'s closest setting is scheduler.{twin} ({how})")
        return "\n".join(lines)
    return None


def resolve_model_path(value: str) -> Path:
    """A checkpoint path (`~` expanded) as `project_path` reads it: the model groups name
    theirs relative to the project root, e.g. models/smollm2-135m-instruct."""
    return project_path(Path(value).expanduser())


def check_real_executor(cfg_executor: DictConfig | Mapping[str, Any]) -> Path:
    """The checkpoint folder of `executor=real`, or a ConfigError that says whether
    `executor.model_path` is missing, does not exist, or is not a checkpoint."""
    if isinstance(cfg_executor, DictConfig) and OmegaConf.is_missing(cfg_executor,
                                                                       "model_path"):
        value = None
    else:
        value = cfg_executor.get("model_path")
    hint = ("a Hugging Face checkpoint folder with config.json and *.safetensors, e.g. "
            "executor.model_path=/path/to/checkpoint")
    if value in (None, "", "???"):
        raise ConfigError(f"executor=real needs executor.model_path: {hint} (or a model "
                          "whose checkpoint the project builds: model=smollm2_135m)")
    path = resolve_model_path(str(value))
    if not path.is_dir():
        what = "is a file, not a folder" if path.exists() else "does not exist"
        if not path.exists() and path.parent.name == "models":
            hint += "; `make model` builds the checkpoints of models/"
        raise ConfigError(f"executor.model_path={str(value)!r} {what}: it must be {hint}")
    missing = [name for name, found in (("config.json", (path / "config.json").is_file()),
                                        ("*.safetensors",
                                         next(path.glob("*.safetensors"), None) is not None))
               if not found]
    if missing:
        raise ConfigError(f"executor.model_path={str(value)!r} is not a checkpoint: it has no "
                          f"{' and no '.join(missing)}; it must be {hint}")
    return path


def check_config(cfg: DictConfig) -> None:
    """Every preflight check of a composed run config (before the job builds anything)."""
    try:
        parse_kv_capacity(cfg.get("kv_capacity_tokens"))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if str(OmegaConf.select(cfg, "executor.name", default="")) == "real":
        check_real_executor(cfg.executor)
