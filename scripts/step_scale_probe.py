#!/usr/bin/env python3
"""How far does the real-model study's outcome move when every step is k % slower? (issue 29)

Runs the study's workload (scripts/real_vs_sim.py's settings) on the simulator with a profile
whose every coefficient and measurement is scaled by each of `--scales`, each request's output
length taken from a real run (`--lengths`, a real run's output_lengths.json), and prints per
scale the evictions, request throughput, median TTFT and p99 E2E. A statistic that jumps
between neighbouring scales sits on a cliff: a real run whose clock drifts by that much
cannot repeat it, whatever the clock.

    python scripts/step_scale_probe.py --lengths RUN/output_lengths.json [--scheduler sglang]
        [--profile conf/profiles/smollm2_135m_cpu_ref.json] [--rate 2]
        [--scales 0.97 0.98 0.99 1 1.01 1.02 1.03] [Hydra overrides...]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import real_vs_sim  # noqa: E402


def scaled_profile(profile: dict, scale: float) -> dict:
    """`profile` with every fitted coefficient and measured step time times `scale`."""
    out = copy.deepcopy(profile)
    out["fit"]["coefficients"] = {k: v * scale for k, v in out["fit"]["coefficients"].items()}
    for m in out["measurements"]:
        m["seconds"] *= scale
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lengths", required=True, type=Path)
    ap.add_argument("--scheduler", default="sglang", choices=("vllm", "sglang"))
    ap.add_argument("--profile", default="conf/profiles/smollm2_135m_cpu_ref.json")
    ap.add_argument("--rate", type=float, default=2.0)
    ap.add_argument("--scales", nargs="+", type=float,
                    default=[0.97, 0.98, 0.99, 1.0, 1.01, 1.02, 1.03])
    args, overrides = ap.parse_known_args(argv)
    if not args.lengths.is_file():
        raise SystemExit(f"step_scale_probe: --lengths {args.lengths}: no such file")
    base = json.loads((ROOT / args.profile).read_text())
    study = [*real_vs_sim.study_overrides(rate=args.rate), f"scheduler={args.scheduler}"]
    if args.scheduler == "sglang" and not overrides:
        overrides = list(real_vs_sim.SGLANG_OVERRIDES)
    print("| scale | evictions | throughput (req/s) | median TTFT (ms) | p99 E2E (ms) |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for scale in args.scales:
            prof = Path(tmp) / f"profile_{scale}.json"
            prof.write_text(json.dumps(scaled_profile(base, scale)))
            with contextlib.redirect_stdout(io.StringIO()), \
                    contextlib.redirect_stderr(io.StringIO()):
                s, _ = real_vs_sim.run(
                    [*study, *overrides, "executor=sim", "executor.cost_model=profile_batch",
                     f"executor.profile={prof}", f"workload.output_lengths={args.lengths}"],
                    Path(tmp) / f"run_{scale}")
            print(f"| {scale:g} | {s['num_preemptions']} | {s['request_throughput']:.3f} | "
                  f"{s['median_ttft_ms']:.0f} | {s['p99_e2el_ms']:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
