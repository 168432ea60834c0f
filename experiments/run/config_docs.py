"""The config reference (docs/CONFIG.md), generated from the structured configs.

    python -m experiments.run.config_docs            # rewrite docs/CONFIG.md
    python -m experiments.run.config_docs --check    # exit 1 when docs/CONFIG.md is out of date
    python -m experiments.run.config_docs --print    # print it (what `experiments.run --help` adds)

Every key of every config group option, with its type (from the schema in
`experiments/run/config.py`, mirrored from the dataclasses the objects are built from), its
default (the value the composed config holds when that option is chosen) and its meaning:
the comment on the field in the dataclass source, else the comment on the key in the
option's YAML file, else the sentence of the schema's docstring that names it. A field added
to a dataclass shows up here at once; the test keeps the committed file in step.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import inspect
import io
import re
import sys
import tokenize
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from omegaconf import MISSING, DictConfig, OmegaConf

from experiments.paths import PROJECT_ROOT

ROOT = PROJECT_ROOT
CONF_DIR = ROOT / "conf"
DOC_PATH = ROOT / "docs" / "CONFIG.md"
# (group, what it picks) in the order of the reference
GROUPS: tuple[tuple[str, str], ...] = (
    ("scheduler", "the scheduler and its settings (upstream names)"),
    ("executor", "what computes a step: simulated (cost model) or real (a checkpoint)"),
    ("model", "the model's shape (cost model, KV bytes)"),
    ("hardware", "the accelerator's peaks (roofline cost model, swap link)"),
    ("workload", "the requests: generators and trace replays"),
    ("slo", "goodput targets"),
    ("logger", "where a job's results go besides its folder"),
)

# A paragraph after a group's list of options.
GROUP_NOTES: dict[str, str] = {
    "scheduler": (
        "**Runs code named in the config**: `+scheduler.target=package.module:factory` (a key "
        "of no schema, hence the `+`) builds the scheduler from outside the project: it "
        "imports `package.module` and calls `factory(kv_capacity_tokens, **the other "
        "scheduler keys)` (`max_model_len=` too when set), as Hydra's `_target_` would; any "
        "importable callable is run, so use configs and command lines you trust only "
        "(experiments/run/build.py)."),
}

# --- where meanings come from -------------------------------------------------------------

# Keys that several schemas share (the workload options, the model and length schemas), with
# one meaning each; used when neither the source nor the YAML comments the key.
SHARED_MEANINGS: dict[str, str] = {
    "model.hidden_size": "Hugging Face config.json name: hidden dimension",
    "model.num_hidden_layers": "decoder layers",
    "model.num_attention_heads": "query heads",
    "model.num_key_value_heads": "KV heads (grouped-query attention)",
    "model.intermediate_size": "MLP inner dimension",
    "model.vocab_size": "vocabulary (embedding and LM-head rows)",
    "model.head_dim": "per-head dimension (null: hidden_size / num_attention_heads)",
    "model.tie_word_embeddings": "LM head shares the embedding weights",
    "model.attention_bias": "q/k/v projections have a bias (Qwen2)",
    "hardware.memory_bytes": "accelerator memory, bytes, the total NVML reports (sizes the "
                             "schedulers' unset batch limits and kv_capacity_tokens=auto; "
                             "0: unknown)",
    "hardware.device_name": "the name the device reports (vLLM's batch defaults read it; "
                            "empty: name)",
    "hardware.fit_from": "a GPU without measurements: the GPU whose fitted roofline "
                         "executor.cost_model=fitted_roofline applies to this one's peaks "
                         "(empty: none, its own fit or a refusal)",
    "slo.ttft": "time-to-first-token target, ms (null: none)",
    "slo.tpot": "time-per-output-token target, ms (null: none)",
    "slo.e2el": "end-to-end latency target, ms (null: none)",
    "workload.seed": "seed of this workload (null: the top-level seed)",
    "workload.vocab_size": "prompt token ids are drawn below this",
    "workload.eos_token_id": "the token the model emits to stop (EOS)",
    "workload.trace_dir": "folder of the trace files (default: $SCHEDBENCH_TRACE_DIR, else "
                          "data/traces)",
    "workload.max_tokens": "the clients' max_tokens cap (policies fixed and cap_eos)",
    "workload.max_tokens_policy": "trace (recorded length, EOS ignored) | trace_eos (recorded "
                                  "length as cap, EOS not ignored) | fixed (max_tokens for all) "
                                  "| cap_eos (max_tokens cap, EOS at the recorded length)",
    "workload.long_inputs": "prompts over max_input_len: drop | clip",
    "workload.time_window": "[start, end] seconds of the trace to replay (null: all)",
    "workload.rate_scale": "arrival rate multiplier: 2 replays twice as fast",
    "workload.max_requests": "replay at most this many requests (null: all)",
    "workload.max_input_len": "longest prompt kept, tokens (null: no limit)",
    "workload.burstiness": "gamma shape of the inter-arrival gaps (1: Poisson)",
    "workload.request_rate": "requests per second (.inf: all at t=0)",
    "workload.num_requests": "requests to generate",
    "workload.num_prefix_groups": "distinct shared prefixes",
    "workload.num_conversations": "conversations to generate",
    "workload.tick_s": "spread arrivals stamped in ticks uniformly over this many seconds",
    "workload.share_prefixes": "equal block ids become equal tokens (prefix sharing)",
    "workload.split": "Hugging Face dataset split",
    "workload.shuffle": "shuffle the dataset rows (seeded) before taking them",
    "workload.input_column": "column of prompt lengths",
    "workload.output_column": "column of output lengths",
    "workload.output_lengths": "sim runs: a JSON file {request_id: output length}, each "
                               "request's EOS at that length (null: run to max_tokens)",
    "workload.output_tokens": "sim runs: a JSON file {request_id: [token ids]} (a real run's "
                              "outputs): each request's EOS at its list's length and the "
                              "sim executor samples those tokens (null: rule tokens)",
    "scheduler.prefill_max_requests": "most requests admitted in one prefill batch (null: no "
                                      "limit)",
    ".dist": "fixed | uniform | lognormal | file",
    ".value": "dist=fixed: the length",
    ".low": "dist=uniform: lowest length",
    ".high": "dist=uniform: highest length",
    ".mean": "dist=lognormal: mean length",
    ".sigma": "dist=lognormal: log-space standard deviation",
    ".min": "draws are clipped to at least this",
    ".max": "draws are clipped to at most this (null: no limit)",
    ".path": "dist=file: the trace file to draw lengths from",
    ".column": "dist=file: input_length or output_length",
}


def _shared_meaning(key: str) -> str:
    if key in SHARED_MEANINGS:
        return SHARED_MEANINGS[key]
    return SHARED_MEANINGS.get("." + key.rsplit(".", 1)[-1], "") if key.count(".") > 1 else ""

def _source_comments(cls: type) -> dict[str, str]:
    """Trailing `# comments` of the fields of dataclass `cls`, from its source."""
    try:
        src = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    out: dict[str, str] = {}
    lines = src.splitlines()
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type != tokenize.COMMENT:
            continue
        line = lines[tok.start[0] - 1]
        m = re.match(r"\s+(\w+)\s*:", line)
        if m and tok.start[1] > m.end():
            out[m.group(1)] = tok.string.lstrip("#").strip()
    return out


def _yaml_comments(path: Path) -> dict[str, str]:
    """Comments on the keys of a YAML file: the trailing one, else the comment lines just
    above the key (top-level and one level of nesting, as `outer.inner`)."""
    if not path.is_file():
        return {}
    out: dict[str, str] = {}
    above: list[str] = []
    parent = ""
    for raw in path.read_text().splitlines():
        stripped = raw.strip()
        if stripped.startswith("#"):
            above.append(stripped.lstrip("#").strip())
            continue
        m = re.match(r"(\s*)([\w.]+):(.*)$", raw)
        if not m or stripped.startswith("-"):
            above = []
            continue
        indent, key, rest = m.groups()
        if not indent:
            parent = key
        name = f"{parent}.{key}" if indent and parent else key
        comment = rest.split(" #", 1)[1].strip() if " #" in rest else ""
        text = comment or " ".join(above)
        if text and key != "defaults":
            out[name] = text
        above = []
    return out


def _docstring_sentence(cls: type, name: str) -> str:
    doc = " ".join((inspect.getdoc(cls) or "").split())
    for sentence in re.split(r"(?<=[.;])\s+", doc):
        first = re.search(r"`([^`]+)`", sentence)
        if first and first.group(1) == name:  # a sentence about this field
            return sentence.rstrip(";")
    return ""


def _origin(schema: type) -> type | None:
    """The dataclass a mirrored schema was made from (None for a hand-written schema)."""
    from experiments.run.config import _MIRRORS

    for original, mirrored in _MIRRORS.items():
        if mirrored is schema:
            return original
    return None


# --- rendering ------------------------------------------------------------------------------

def _type_name(t: Any) -> str:
    if isinstance(t, type) and issubclass(t, enum.Enum):
        return " \\| ".join(m.name for m in t)
    if isinstance(t, type) and not typing.get_args(t):
        return t.__name__
    text = str(t).replace("typing.", "").replace("NoneType", "None")
    return re.sub(r"<class '(\w+)'>", r"\1", text).replace("|", "\\|")


def _value(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, enum.Enum):
        return v.name
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float) and v == float("inf"):
        return ".inf"
    return str(v)


def _range_text(f: dataclasses.Field[Any]) -> str:
    """The declared range of a field (schedulers/config_range.py), for the range column."""
    from schedulers.config_range import field_range

    rng = field_range(f)
    return "" if rng is None else rng.text().replace("|", "\\|")


def _rows(schema: type, node: Any, yaml_path: Path | None, prefix: str = "", group: str = ""
          ) -> Iterator[tuple[str, str, str, str, str]]:
    """(key, type, range, default, meaning) of every field of `schema` (nested ones
    dotted)."""
    origin = _origin(schema)
    comments = _source_comments(schema)
    for cls in reversed(origin.__mro__ if origin else ()):  # a base declares shared fields
        if dataclasses.is_dataclass(cls):
            comments.update(_source_comments(cls))
    yaml = _yaml_comments(yaml_path) if yaml_path else {}
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        if f.name == "name" and not prefix:
            continue
        key = prefix + f.name
        t = hints[f.name]
        sub = node.get(f.name) if isinstance(node, DictConfig) else None
        if dataclasses.is_dataclass(t) and isinstance(t, type):
            yield from _rows(t, sub, yaml_path, key + ".", group)
            continue
        meaning = (comments.get(f.name) or yaml.get(key) or yaml.get(f.name)
                   or _docstring_sentence(origin or schema, f.name)
                   or (_docstring_sentence(schema, f.name) if origin else "")
                   or _shared_meaning(f"{group}.{key}" if group else key)
                   # a field a base class shares (schedulers/eviction.py)
                   or next((text for cls in (origin.__mro__[1:] if origin else ())
                            if (text := _docstring_sentence(cls, f.name))), ""))
        if isinstance(node, DictConfig) and OmegaConf.is_missing(node, f.name):
            default = "(required)"
        elif isinstance(node, DictConfig) and OmegaConf.is_interpolation(node, f.name):
            raw = node._get_node(f.name)
            default = str(raw._value() if raw is not None else "")  # as written, unresolved
        else:
            value = OmegaConf.to_container(sub) if isinstance(sub, DictConfig | list) or \
                OmegaConf.is_config(sub) else sub
            default = _value(value) if f.name in (node or {}) else _value(
                f.default if f.default is not dataclasses.MISSING else MISSING)
        yield (key, _type_name(t), _range_text(f), f"`{default}`",
               meaning.replace("|", "\\|"))


def _table(rows: list[tuple[str, str, str, str, str]], prefix: str) -> str:
    lines = ["| key | type | range | default | meaning |", "|---|---|---|---|---|"]
    for key, typ, valid, default, meaning in rows:
        lines.append(f"| `{prefix}{key}` | {typ} | {valid} | {default} | {meaning} |")
    return "\n".join(lines) + "\n"


def _compose(overrides: list[str]) -> DictConfig:
    from experiments.run.config import compose_run_config

    return compose_run_config(overrides, str(CONF_DIR))


def _first_comment(path: Path) -> str:
    lines = []
    for raw in path.read_text().splitlines():
        s = raw.strip()
        if s.startswith("# @package"):
            continue
        if not s.startswith("#"):
            break
        lines.append(s.lstrip("#").strip())
    text = " ".join(lines)
    return re.split(r"(?<=[.?])\s", text, maxsplit=1)[0] if text else ""


def _default_options() -> dict[str, str]:
    """The group options conf/config.yaml picks by default."""
    import yaml

    out: dict[str, str] = {}
    for item in yaml.safe_load((CONF_DIR / "config.yaml").read_text()).get("defaults", []):
        if isinstance(item, dict):
            out.update({str(k): str(v) for k, v in item.items()})
    return out


def _base_option(group: str, option: str) -> str | None:
    """The option of the same group that `option` builds on (its defaults list names it, as
    conf/scheduler/sglang_optimistic.yaml names sglang), if any."""
    import yaml

    data = yaml.safe_load((CONF_DIR / group / f"{option}.yaml").read_text()) or {}
    others = set(_options(group)) - {option}
    return next((d for d in data.get("defaults", []) if isinstance(d, str) and d in others),
                None)


def _options(group: str) -> list[str]:
    from experiments.run.config import group_options

    return group_options(group)


def generate() -> str:
    """The reference as Markdown."""
    from experiments.run.config import RunConfig

    out = io.StringIO()
    out.write("# Configuration reference\n\n"
              "Generated by `python -m experiments.run.config_docs` from the structured configs "
              "(`experiments/run/config.py`) and the defaults of `conf/`; do not edit by hand. "
              "`python -m experiments.run --help` prints it too. Set any key on the command "
              "line (`kv_capacity_tokens=32768`, `scheduler.max_num_seqs=64`), pick a group "
              "option with `group=option` (`scheduler=sglang`), sweep with `-m` and commas. "
              "A key that does not exist fails at once, listing the valid ones. The range "
              "column gives the values a numeric key accepts (`[a, b]` inclusive, `(a, b]` "
              "excluding a; `2^26` is 2 to the 26th; null passes where the type allows it, "
              "and every float must be finite unless inf is listed); a value outside it is "
              "refused before anything runs, in one line naming the key "
              "(schedulers/config_range.py, experiments/run/ranges.py).\n\n")
    base = _compose([])
    defaults = _default_options()
    out.write("## Top level (`conf/config.yaml`)\n\n")
    groups = {g for g, _ in GROUPS}
    top = [r for r in _rows(RunConfig, base, CONF_DIR / "config.yaml")
           if r[0].split(".")[0] not in groups]
    out.write(_table(top, ""))
    for group, what in GROUPS:
        out.write(f"\n## `{group}`: {what}\n\n")
        out.write(f"Options (`conf/{group}/`): "
                  + ", ".join(f"`{group}={o}`" for o in _options(group))
                  + f" (default: `{defaults.get(group)}`).\n")
        if group in GROUP_NOTES:
            out.write(f"\n{GROUP_NOTES[group]}\n")
        seen: dict[type, str] = {}
        for option in _options(group):
            cfg = _compose([f"{group}={option}"])
            node = cfg[group]
            schema = OmegaConf.get_type(node)
            if not (isinstance(schema, type) and dataclasses.is_dataclass(schema)):
                continue
            first = _first_comment(CONF_DIR / group / f"{option}.yaml")
            out.write(f"\n### `{group}={option}`\n\n{first}\n\n" if first else
                      f"\n### `{group}={option}`\n\n")
            if schema in seen and group in ("model", "hardware"):
                out.write(f"Same keys as `{group}={seen[schema]}`; its values:\n\n")
            seen.setdefault(schema, option)
            rows = list(_rows(schema, node, CONF_DIR / group / f"{option}.yaml", "", group))
            parent = _base_option(group, option)
            if parent is not None:  # a variant: only what it changes
                of_parent = {r[0]: r for r in _rows(
                    schema, _compose([f"{group}={parent}"])[group],
                    CONF_DIR / group / f"{parent}.yaml", "", group)}
                rows = [(k, t, v, d, m or of_parent[k][4]) for k, t, v, d, m in rows
                        if k not in of_parent or of_parent[k][3] != d]
                out.write(f"`{group}={parent}` with these values (every other key as "
                          "there):\n\n")
            out.write(_table(rows, f"{group}."))
    out.write("\n## `experiment`: presets (`conf/experiment/`, `experiment=NAME`)\n\n")
    for option in _options("experiment"):
        first = _first_comment(CONF_DIR / "experiment" / f"{option}.yaml")
        out.write(f"- `experiment={option}`: {first}\n")
    out.write("\n## `hydra/launcher`: where the jobs of a multirun run\n\n")
    for option in _options("hydra/launcher"):
        path = CONF_DIR / "hydra" / "launcher" / f"{option}.yaml"
        keys = _yaml_comments(path)
        out.write(f"- `hydra/launcher={option}`: {_first_comment(path)}"
                  + ("" if not keys else " Keys (`hydra.launcher.*`): "
                     + "; ".join(f"`{k}` ({v})" for k, v in keys.items())) + "\n")
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    """Command line (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/CONFIG.md is stale")
    ap.add_argument("--print", action="store_true", help="print the reference")
    args = ap.parse_args(argv)
    text = generate()
    if args.print:
        print(text)
        return 0
    if args.check:
        current = DOC_PATH.read_text() if DOC_PATH.is_file() else ""
        if current != text:
            print(f"{DOC_PATH} is out of date: run python -m experiments.run.config_docs",
                  file=sys.stderr)
            return 1
        return 0
    from experiments.results.sinks import write_text

    write_text(text, DOC_PATH)
    print(f"wrote {DOC_PATH}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
