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
from experiments.user_error import ConfigError
from schedulers import registry

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


def configured_schedulers(config_dir: str, groups: list[str], multirun: bool) -> list[str]:
    """The schedulers the config runs without a `scheduler=` override: those that
    `hydra.sweeper.params` sweeps in a multirun (after the given group choices, e.g. an
    experiment preset), else the default scheduler."""
    from experiments.run.config import compose_run_config

    try:
        cfg = compose_run_config(groups, config_dir, return_hydra_config=True)
    except Exception:  # the run itself reports a config that does not compose
        return []
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
        schedulers = configured_schedulers(config_dir, groups, multirun)
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
    """Every preflight check of a composed run config (before the job builds anything): the
    declared ranges (experiments/run/ranges.py), the real executor's checkpoint."""
    from experiments.run.ranges import check_ranges

    check_ranges(cfg)
    try:
        parse_kv_capacity(cfg.get("kv_capacity_tokens"))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if str(OmegaConf.select(cfg, "executor.name", default="")) == "real":
        check_real_executor(cfg.executor)


# --- the command line, composed before Hydra runs anything -----------------------------------

_MAX_COMPOSED = 64  # configs composed to check one command line


def _command_configs(argv: Sequence[str]) -> list[list[str]] | None:
    """The override lists whose configs cover every value of the command line: each
    combination of the group choices (`scheduler=vllm,sglang`) with every swept key at its
    first value, then each other value of a swept key on its own; None when the command line
    holds what this does not expand (Hydra then checks it alone)."""
    from experiments.run.config import GROUPS

    multirun, overrides = _parse(argv)
    fixed: list[str] = []
    group_choices: list[list[str]] = []
    swept: list[tuple[int, list[str]]] = []
    for ov in overrides:
        key = ov.key_or_group
        if ov.is_sweep_override():
            if not multirun:
                return None
            try:
                values = [f"{ov.get_key_element()}={v}" for v in ov.sweep_string_iterator()]
            except Exception:
                return None
            if key in GROUPS or "/" in key:
                group_choices.append(values)
            else:
                swept.append((len(fixed), values))
                fixed.append(values[0])
        else:
            fixed.append(ov.input_line)
    combos: list[list[str]] = [[]]
    for values in group_choices:
        combos = [[*c, v] for c in combos for v in values]
    out = [c + fixed for c in combos]
    for index, values in swept:
        for value in values[1:]:
            variant = list(fixed)
            variant[index] = value
            out.append(combos[0] + variant)
    return out[:_MAX_COMPOSED]


def _without_schemas(text: str) -> str:
    """Hydra's "Available options" list without the schemas (`base_*`), on one line."""
    lines = [ln.strip() for ln in text.splitlines()]
    options = [ln for ln in lines if ln and "options in" not in ln and not ln.startswith(
        ("In '", "Config search path", "provider=", "base_", "Could not"))]
    head = lines[0] if lines else text
    return f"{head.rstrip('.')}; options: {', '.join(options)}" if options else head


def composition_error(error: BaseException, overrides: Sequence[str], config_dir: str
                      ) -> str:
    """One line for a config that Hydra cannot compose: a group option that does not exist
    (its options, without the schemas `base_*`), a key that does not exist (the valid keys,
    `explain_override_error`), a value of the wrong type (the key, the value, the type)."""
    from hydra.errors import MissingConfigException
    from omegaconf.errors import OmegaConfBaseException

    from experiments.run.config import explain_override_error, group_options

    if isinstance(error, MissingConfigException):
        missing = str(getattr(error, "missing_cfg_file", "") or "")
        group, _, option = missing.rpartition("/")
        if group and (Path(config_dir) / group).is_dir():
            import difflib

            options = group_options(group)
            near = difflib.get_close_matches(option, options, n=1)
            hint = f" (did you mean {group}={near[0]}?)" if near else ""
            return (f"{group}={option}: no such option{hint}; options: "
                    f"{', '.join(options)}")
        return _without_schemas(str(error))
    typo = explain_override_error(overrides, config_dir)
    if typo:
        return typo
    cause: BaseException | None = error
    while cause is not None and not isinstance(cause, OmegaConfBaseException):
        cause = cause.__cause__ or cause.__context__
    if cause is not None:
        key = getattr(cause, "full_key", None)
        msg = str(getattr(cause, "msg", "") or cause).strip().splitlines()[0]
        return f"{key}: {msg}" if key else msg
    return " ".join(str(error).split())


def check_command_line(argv: Sequence[str], config_dir: str) -> str | None:
    """Compose the configs of a command line (`_command_configs`) before Hydra runs anything
    and check them (`check_config`): one line saying what is wrong (a missing option or key,
    a value of the wrong type or out of its range), or None when all compose and pass."""
    from experiments.run.config import compose_run_config

    combos = _command_configs(argv)
    if not combos:
        return None
    for overrides in combos:
        try:
            cfg = compose_run_config(overrides, config_dir)
        except Exception as e:
            return composition_error(e, overrides, config_dir)
        try:
            check_config(cfg)
        except ConfigError as e:
            if str(OmegaConf.select(cfg, "on_error", default="fail")) not in (
                    "record", "OnError.record"):
                return str(e)
    return None
