"""Fuzz every numeric key of docs/CONFIG.md with hostile values (issue 24, item 5).

    python scripts/fuzz_config.py                 # every key x every value, in-process
    python scripts/fuzz_config.py --sample 40     # a seeded sample
    python scripts/fuzz_config.py --subprocess 30 # also 30 sampled cases as real commands

Each case is one job with one value changed: the group option whose table lists the key
(`scheduler=sglang`, `model=qwen2_7b`...), small workload sizes for speed, and the key set to
NaN, inf, a negative number, zero, a huge number or a value of the wrong type. It runs as
`python -m experiments.run` would (`experiments.run.main.cli`: the command-line checks, then
the job, `run_experiment`), in this process, each under a 10 s alarm; `--subprocess N` also
runs N sampled cases as real commands and reads their exit status and stderr. The
limit is on the case's CPU time (a loaded host stretches the wall clock, not it). A case passes
when it ends within the limit either with a valid result (status ok) or refused with one line
`error: ...` naming the key (its full path or its own name); anything else is a failure: a
traceback, several lines, a message that does not name the key, a timeout. Prints the counts:
cases, keys, refused with one line, valid, failures (each failure listed), and exits 1 when
there is any.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

LIMIT_S = 10.0
# Small sizes per workload, so that a valid case runs in a second or two; a key under test
# keeps its fuzzed value (the size override is left out).
SMALL: dict[str, dict[str, str]] = {
    "synthetic": {"workload.num_requests": "40"},
    "shared_prefix": {"workload.num_groups": "4", "workload.prompts_per_group": "4"},
    "multi_turn": {"workload.num_conversations": "8"},
    # traces: the first minute too, so that max_requests=huge (all) stays a short replay
    "azure_code": {"workload.max_requests": "100", "workload.time_window": "[0,60]"},
    "azure_conv": {"workload.max_requests": "100", "workload.time_window": "[0,60]"},
    "mooncake": {"workload.max_requests": "50", "workload.time_window": "[0,60]"},
    "mooncake_conversation": {"workload.max_requests": "50", "workload.time_window": "[0,60]"},
    "lengths": {"workload.max_requests": "100"},
    "smollm2_prompts": {"workload.num_requests": "4"},
}


@dataclasses.dataclass(frozen=True)
class Key:
    """A numeric key of docs/CONFIG.md and the group option whose table lists it."""

    key: str
    typ: str  # int | float
    choice: str | None  # e.g. "scheduler=sglang"; None: the top level


@dataclasses.dataclass(frozen=True)
class Case:
    key: Key
    value: str  # as typed on the command line

    def overrides(self, extra: dict[str, str]) -> list[str]:
        group = self.key.choice.split("=", 1) if self.key.choice else None
        out = [self.key.choice] if self.key.choice else []
        workload = group[1] if group and group[0] == "workload" else "synthetic"
        sizes = {**SMALL.get(workload, {}), **extra.get(workload, {})}  # type: ignore[arg-type]
        out += [f"{k}={v}" for k, v in sizes.items() if k != self.key.key]
        out += ["progress=off", f"{self.key.key}={self.value}"]
        return out


@dataclasses.dataclass
class Outcome:
    kind: str  # valid | refused | failure
    detail: str
    seconds: float


def numeric_keys(doc: Path = ROOT / "docs" / "CONFIG.md") -> list[Key]:
    """Every (key, group option) row of the reference whose type is int or float."""
    keys: list[Key] = []
    choice: str | None = None
    for line in doc.read_text().splitlines():
        m = re.match(r"### `(\w+=\w+)`", line)
        if m:
            choice = m.group(1)
        elif line.startswith("## ") and "Top level" not in line:
            choice = None if line.startswith("## Top") else choice
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        key, typ = cells[0].strip("`"), cells[1].split(" ")[0]
        if typ in ("int", "float"):
            keys.append(Key(key, typ, choice))
    return keys


def values(typ: str) -> list[str]:
    """NaN, inf, negative, zero, huge and values of the wrong type."""
    huge = "1000000000000000" if typ == "int" else "1e300"
    wrong = ["abc", "1.5"] if typ == "int" else ["abc", "true"]
    return ["nan", "inf", "-1", "0", huge, *wrong]


def cases(keys: list[Key]) -> list[Case]:
    return [Case(k, v) for k in keys for v in values(k.typ)]


class _Timeout(Exception):
    pass


@contextlib.contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    """Interrupt the body after `seconds` of this process's CPU time (a spinning loop burns
    it; a host shared with other work slows the wall clock, not this), or after ten times
    that on the wall clock."""
    def fire(*_: object) -> None:
        raise _Timeout(f"still running after {seconds:g} s of CPU time")

    old = {sig: signal.signal(sig, fire) for sig in (signal.SIGPROF, signal.SIGALRM)}
    signal.setitimer(signal.ITIMER_PROF, seconds)
    signal.setitimer(signal.ITIMER_REAL, 10 * seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _names_key(line: str, key: str) -> bool:
    leaf = key.rsplit(".", 1)[-1]
    return key in line or re.search(rf"\b{re.escape(leaf)}\b", line) is not None


def judge(case: Case, rc: int, stderr_lines: list[str], seconds: float) -> Outcome:
    """Classify a finished case from its exit status and the lines it printed as errors."""
    if seconds > LIMIT_S:
        return Outcome("failure", f"took {seconds:.1f} s", seconds)
    if rc == 0:
        return Outcome("valid", "", seconds)
    lines = [ln for ln in stderr_lines if ln.strip()]
    if len(lines) != 1 or not lines[0].startswith("error: "):
        return Outcome("failure", f"{len(lines)} error lines: " + " / ".join(lines[-3:])[:600],
                       seconds)
    if not _names_key(lines[0], case.key.key):
        return Outcome("failure", f"the message does not name the key: {lines[0][:300]}",
                       seconds)
    return Outcome("refused", lines[0], seconds)


def run_in_process(case: Case, extra: dict[str, dict[str, str]]) -> Outcome:
    """The case as `experiments.run.main.cli` runs a single job, in this process."""
    from experiments.run.config import compose_run_config
    from experiments.run.main import CONF_DIR, run_experiment
    from experiments.run.preflight import (
        check_command_line,
        check_config,
        explain_scheduler_keys,
    )
    from experiments.user_error import UserError, one_line

    argv = case.overrides(extra)
    t0 = time.process_time()  # CPU seconds: the limit holds on a loaded host too
    try:
        with _alarm(LIMIT_S), tempfile.TemporaryDirectory(prefix="fuzz_job_") as out:
            problem = explain_scheduler_keys(argv, CONF_DIR) or check_command_line(argv,
                                                                                  CONF_DIR)
            if problem:
                return judge(case, 1, [one_line(problem)], time.process_time() - t0)
            cfg = compose_run_config(argv, CONF_DIR)
            try:
                check_config(cfg)
                summary = run_experiment(cfg, Path(out) / "job", bar=False)
            except UserError as e:
                return judge(case, 1, [one_line(e)], time.process_time() - t0)
            if summary.get("status") != "ok":
                return Outcome("failure", f"status {summary.get('status')}",
                               time.process_time() - t0)
            return judge(case, 0, [], time.process_time() - t0)
    except _Timeout as e:
        return Outcome("failure", str(e), time.process_time() - t0)
    except Exception as e:
        where = traceback.format_exc().strip().splitlines()[-3:-2]
        detail = f"{type(e).__name__}: {e} ({where[0].strip() if where else ''})"
        return Outcome("failure", detail[:600], time.process_time() - t0)


def run_as_command(case: Case, extra: dict[str, dict[str, str]]) -> Outcome:
    """The case as a real `python -m experiments.run` command (stderr read back)."""
    with tempfile.TemporaryDirectory(prefix="fuzz_job_") as out:
        argv = [sys.executable, "-m", "experiments.run", f"hydra.run.dir={out}/job",
                *case.overrides(extra)]
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True,
                                  timeout=LIMIT_S + 20, env={**os.environ, "CI": "1"})
        except subprocess.TimeoutExpired:
            return Outcome("failure", "timed out", time.perf_counter() - t0)
        # the process's start (imports) is not the run's: up to 20 s more on a loaded host
        seconds = time.perf_counter() - t0
        outcome = judge(case, proc.returncode, proc.stderr.splitlines(), 0.0)
        outcome.seconds = seconds
        return outcome


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sample", type=int, default=0, help="run a seeded sample of N cases")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default=None,
                    help="only the keys of group options starting so (e.g. workload=azure)")
    ap.add_argument("--subprocess", type=int, default=0,
                    help="also run N sampled cases as real commands")
    ap.add_argument("--tokenizer", default=None,
                    help="workload=smollm2_prompts: its tokenizer folder (default: the "
                         "project's models/smollm2-135m-instruct; skipped when absent)")
    ap.add_argument("--trace-dir", default=os.environ.get("SCHEDBENCH_TRACE_DIR"),
                    help="folder of the traces (default: $SCHEDBENCH_TRACE_DIR)")
    args = ap.parse_args(argv)
    if args.trace_dir:
        os.environ["SCHEDBENCH_TRACE_DIR"] = args.trace_dir
    import logging

    logging.disable(logging.WARNING)
    keys = numeric_keys()
    extra: dict[str, dict[str, str]] = {}
    skipped: list[str] = []
    tokenizer = Path(args.tokenizer) if args.tokenizer else ROOT / "models" / \
        "smollm2-135m-instruct"
    if tokenizer.is_dir():
        extra["smollm2_prompts"] = {"workload.tokenizer": str(tokenizer)}
    else:
        skipped.append("workload=smollm2_prompts (no tokenizer; --tokenizer)")
    tmp = Path(tempfile.mkdtemp(prefix="fuzz_lengths_"))
    (tmp / "l.csv").write_text("input_length,output_length\n" +
                               "".join(f"{20 + i},{8 + i % 7}\n" for i in range(200)))
    extra["lengths"] = {"workload.file": str(tmp / "l.csv")}
    trace_dir = Path(os.environ.get("SCHEDBENCH_TRACE_DIR", ROOT / "data" / "traces"))
    for option in ("azure_code", "azure_conv", "mooncake", "mooncake_conversation"):
        if not trace_dir.is_dir():
            skipped.append(f"workload={option} (no traces in {trace_dir})")
    keys = [k for k in keys if not any(k.choice and k.choice in s for s in skipped)]
    if args.only:
        keys = [k for k in keys if (k.choice or "").startswith(args.only)]
    every = cases(keys)
    chosen = every
    if args.sample:
        chosen = random.Random(args.seed).sample(every, min(args.sample, len(every)))
    counts = {"valid": 0, "refused": 0, "failure": 0}
    failures: list[tuple[str, Case, Outcome]] = []
    slowest = 0.0
    t0 = time.perf_counter()
    for case in chosen:
        outcome = run_in_process(case, extra)
        counts[outcome.kind] += 1
        slowest = max(slowest, outcome.seconds)
        if outcome.kind == "failure":
            failures.append(("in-process", case, outcome))
    commands = {"valid": 0, "refused": 0, "failure": 0}
    if args.subprocess:
        for case in random.Random(args.seed + 1).sample(every, min(args.subprocess,
                                                                    len(every))):
            outcome = run_as_command(case, extra)
            commands[outcome.kind] += 1
            if outcome.kind == "failure":
                failures.append(("command", case, outcome))
    rows = len({(k.choice, k.key) for k in keys})
    print(f"cases: {len(chosen)} (of {len(every)}), keys: {rows} rows of docs/CONFIG.md "
          f"({len({k.key for k in keys})} distinct keys), values per key: {len(values('int'))}")
    print(f"refused with one line naming the key: {counts['refused']}")
    print(f"valid result: {counts['valid']}")
    print(f"anything else (failure): {counts['failure']}")
    print(f"slowest case: {slowest:.2f} s; all in {time.perf_counter() - t0:.0f} s")
    if args.subprocess:
        print(f"as commands ({args.subprocess}): refused {commands['refused']}, valid "
              f"{commands['valid']}, failure {commands['failure']}")
    for what in skipped:
        print(f"skipped: {what}")
    for where, case, outcome in failures:
        print(f"FAILURE ({where}) {' '.join(case.overrides(extra))}: {outcome.detail}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
