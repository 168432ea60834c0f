"""Build conf/profiles/measured/ (the tables of `executor.cost_model=measured` and the fits of
`executor.cost_model=fitted_roofline`) from the public per-operator GPU measurements.

Usage:
    python scripts/build_measured_profiles.py RAW [--out conf/profiles/measured]

RAW is a folder holding the source files at their repository paths (scripts/measured_sources.py
lists repository, path, commit and blob of each):

    RAW/vidur/LICENSE                                   (github.com/microsoft/vidur, MIT)
    RAW/vidur/data/profiling/compute/{a100,h100,a40}/meta-llama/Llama-2-7b-hf/mlp.csv
    RAW/vidur/data/profiling/compute/a100/meta-llama/Meta-Llama-3-8B/mlp.csv
    RAW/llmservingsim/LICENSE                           (github.com/casys-kaist/LLMServingSim, MIT)
    RAW/llmservingsim/profiler/v0/perf_models/H100/meta-llama/Llama-3.1-8B/tp1/layers.csv

e.g. `git clone https://github.com/microsoft/vidur RAW/vidur` and
`git clone https://github.com/casys-kaist/LLMServingSim RAW/llmservingsim` (then check out the
snapshots named in measured_sources.py). Vidur's attention measurements come from the
transcription committed at scripts/vidur_offline/attention_sample.txt.

What it writes (small CSVs; the shapes held out for scripts/gpu_timing_error.py are left out):
- <pair>/linear.csv, <pair>/profile.json, and for the pair with attention measurements
  <pair>/attn_decode.csv and <pair>/attn_prefill.csv;
- fitted_roofline/<hardware>.json: the roofline fitted per measured GPU (a GPU without
  measurements borrows one at run time: its hardware config's `fit_from`, e.g. h200 and a10);
- LICENSE-vidur.txt, LICENSE-LLMServingSim.txt: the sources' notices.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import measured_sources as ms

from engines.executors.specs import HardwareSpec, ModelSpec
from engines.measured_cost import ADDS_PER_LAYER, LayerRoofline, RooflineFit

ROOT = ms.ROOT


def load_model(name: str) -> ModelSpec:
    """A conf/model group as a ModelSpec."""
    d = yaml.safe_load((ROOT / "conf" / "model" / f"{name}.yaml").read_text())
    d.pop("defaults", None)
    return ModelSpec(**d)


def load_hardware(name: str) -> HardwareSpec:
    """A conf/hardware group as a HardwareSpec."""
    d = yaml.safe_load((ROOT / "conf" / "hardware" / f"{name}.yaml").read_text())
    d.pop("defaults", None)
    name = str(d.pop("name"))
    text = {k: str(d.pop(k)) for k in ("device_name", "fit_from") if k in d}
    return HardwareSpec(name=name, **text, **{k: float(v) for k, v in d.items()})


def gemm_sum(ops: dict[str, float]) -> float:
    """A layer's linear operators (GEMMs), ms."""
    return sum(ops[o] for o in ms.LINEAR_OPS)


def elementwise_sum(ops: dict[str, float]) -> float:
    """A layer's elementwise operators (ms), as the measured model adds them."""
    t = sum(ops[o] for o in ms.ELEMENTWISE_OPS if o != "add" and o in ops)
    return t + ADDS_PER_LAYER * ops.get("add", 0.0)


def fit_elementwise(points: list[tuple[int, float]]) -> tuple[float, float]:
    """(floor_s, s_per_token) of a layer's elementwise operators: least relative squares."""
    tok = np.array([float(n) for n, _ in points])
    y = np.array([t for _, t in points])
    a = np.stack([1.0 / y, tok / y], axis=1)
    sol, *_ = np.linalg.lstsq(a, np.ones(len(y)), rcond=None)
    return max(float(sol[0]), 0.0), max(float(sol[1]), 0.0)


def write_csv(path: Path, header: list[str], rows: list[list[object]]) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)


def _fmt(x: float) -> str:
    return f"{x:.6g}"


# The small-batch floor of a layer's four GEMMs is their launches: at most about 5 us each.
# Bounded, so that the fit cannot trade a large floor for a bandwidth efficiency above what
# the GEMMs reach.
MAX_LAYER_FLOOR_S = 20e-6


def fit_linear(points: list[tuple[LayerRoofline, int, float]]) -> tuple[float, float, float]:
    """(flops_eff, bandwidth_eff, floor_s) minimizing the squared relative error of
    max(memory, compute) + floor against the measured GEMM sums of a layer (seconds), over a
    grid of efficiencies (the floor by least squares, within 0..MAX_LAYER_FLOOR_S)."""
    best: tuple[float, float, float, float] | None = None
    y = np.array([p[2] for p in points])
    wb = np.array([p[0].layer_weight_bytes / p[0].bandwidth for p in points])
    fl = np.array([2.0 * p[0].layer_params * p[1] / p[0].flops for p in points])
    for ef in np.arange(0.30, 1.0001, 0.005):
        comp = fl / ef
        for eb in np.arange(0.30, 1.0001, 0.005):
            base = np.maximum(wb / eb, comp)
            r = (y - base) / y  # the floor fits the rest, on relative error
            w = 1.0 / y
            floor = min(max(float(np.sum(w * r) / np.sum(w * w)), 0.0), MAX_LAYER_FLOOR_S)
            err = float(np.sum((r - w * floor) ** 2))
            if best is None or err < best[0]:
                best = (err, float(ef), float(eb), floor)
    assert best is not None
    return best[1], best[2], best[3]


def fit_decode_attention(lay: LayerRoofline, decode: dict[int, dict[int, float]]
                         ) -> tuple[float, float]:
    """(floor_s, bandwidth_eff) of decode attention: floor + bytes / (bw * eff)."""
    rows, y = [], []
    for kv, row in decode.items():
        for b, t in row.items():
            rows.append((1.0, b * (kv + 1) * lay.kv_layer_bytes / lay.bandwidth))
            y.append(t * 1e-3)
    a = np.array(rows) / np.array(y)[:, None]
    sol, *_ = np.linalg.lstsq(a, np.ones(len(y)), rcond=None)
    return max(float(sol[0]), 0.0), 1.0 / float(sol[1])


def fit_prefill_attention(lay: LayerRoofline, floor: float,
                          prefill: dict[int, dict[int, float]]) -> float:
    """The FLOP efficiency of prefill attention given the floor (least relative squares)."""
    x, y = [], []
    for c, row in prefill.items():
        for kv, t in row.items():
            pairs = c * kv + c * (c + 1) / 2
            x.append(lay.attn_flops_per_pair * pairs / lay.flops)
            y.append(t * 1e-3 - floor)
    xa, ya = np.array(x), np.array(y)
    w = 1.0 / (ya + floor)
    inv = float(np.sum(w * w * xa * ya) / np.sum(w * w * xa * xa))
    return 1.0 / inv


def build(raw: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(raw / "vidur" / "LICENSE", out / "LICENSE-vidur.txt")
    shutil.copyfile(raw / "llmservingsim" / "LICENSE", out / "LICENSE-LLMServingSim.txt")
    decode_all, prefill_all = ms.read_attention_sample()
    decode = {kv: r for kv, r in decode_all.items() if kv not in ms.HELD_DECODE_KV}
    prefill = {c: r for c, r in prefill_all.items() if c not in ms.HELD_PREFILL_CHUNKS}
    per_gpu: dict[str, list[tuple[LayerRoofline, int, float]]] = {}
    elem_gpu: dict[str, list[tuple[int, float]]] = {}
    labels: dict[str, list[str]] = {}
    llmss_attn: dict[int, dict[int, float]] = {}
    for src in ms.SOURCES:
        linear = ms.read_linear(raw, src)
        table, held = ms.split_tokens(list(linear))
        folder = out / src.key
        folder.mkdir(exist_ok=True)
        ops = [o for o in (*ms.LINEAR_OPS, *ms.ELEMENTWISE_OPS, *ms.STEP_OPS, *ms.HEAD_OPS)
               if o in linear[table[0]]]
        write_csv(folder / "linear.csv", ["num_tokens", *ops],
                  [[n, *(_fmt(linear[n][o]) for o in ops)] for n in table])
        complete = src.attention
        if complete:
            write_csv(folder / "attn_decode.csv", ["kv_cache_size", "batch_size", "ms"],
                      [[kv, b, _fmt(t)] for kv, row in decode.items() for b, t in row.items()])
            write_csv(folder / "attn_prefill.csv", ["prefill_chunk_size", "kv_cache_size", "ms"],
                      [[c, kv, _fmt(t)] for c, row in prefill.items() for kv, t in row.items()])
        if "attn_prefill_no_context" in linear[table[0]]:
            llmss_attn = {n: {0: linear[n]["attn_prefill_no_context"]} for n in table}
        sources = [{"repo": src.repo, "path": src.path, "commit": src.commit, "blob": src.blob,
                    "snapshot": src.snapshot, "license": "MIT"}]
        if complete:
            sources.append({**ms.VIDUR_ATTENTION, "license": "MIT"})
        meta = {"label": src.label, "model": src.model, "hardware": src.gpu,
                "complete": complete, "unit": "ms per call of one layer's operator (median)",
                "sources": sources, "notes": list(src.notes),
                "held_out": {"linear_num_tokens": held,
                             **({"attn_decode_kv_cache_size": list(ms.HELD_DECODE_KV),
                                 "attn_prefill_chunk_size": list(ms.HELD_PREFILL_CHUNKS)}
                                if complete else {})},
                "built_by": "scripts/build_measured_profiles.py"}
        (folder / "profile.json").write_text(json.dumps(meta, indent=1) + "\n")
        lay = LayerRoofline(_unit_fit(src.gpu), load_model(src.model), load_hardware(src.gpu))
        per_gpu.setdefault(src.gpu, []).extend(
            (lay, n, gemm_sum(linear[n]) * 1e-3) for n in table)
        if src.kind == "vidur_mlp":  # LLMServingSim's eager norms are not a fused kernel's
            elem_gpu.setdefault(src.gpu, []).extend(
                (n, elementwise_sum(linear[n]) * 1e-3) for n in table)
        labels.setdefault(src.gpu, []).append(src.label)
    fit_dir = out / "fitted_roofline"
    fit_dir.mkdir(exist_ok=True)
    a100_lay = LayerRoofline(_unit_fit("a100_80g"), load_model("llama2_7b"),
                             load_hardware("a100_80g"))
    attn_floor, attn_bw = fit_decode_attention(a100_lay, decode)
    attn_pf = fit_prefill_attention(a100_lay, attn_floor, prefill)
    fits: dict[str, RooflineFit] = {}
    for gpu, points in per_gpu.items():
        ef, eb, floor = fit_linear(points)
        efloor, elem = fit_elementwise(elem_gpu[gpu])
        floor += efloor
        notes: list[str] = []
        pf = attn_pf
        if gpu != "a100_80g":
            notes.append("decode attention (efficiency, floor) borrowed from the a100 fit to "
                         "vidur a100 llama-2-7b: no decode attention measured on this GPU")
            if gpu == "h100" and llmss_attn:
                h_lay = LayerRoofline(_unit_fit(gpu), load_model("llama3_8b"),
                                      load_hardware(gpu))
                pf = fit_prefill_attention(h_lay, attn_floor, llmss_attn)
                notes.append("prefill attention efficiency fitted to llmservingsim h100 "
                             "llama-3.1-8b attn (no prior context)")
            else:
                notes.append("prefill attention efficiency borrowed from the a100 fit")
        fits[gpu] = RooflineFit(
            hardware=gpu, flops_efficiency=round(ef, 4), bandwidth_efficiency=round(eb, 4),
            layer_floor_s=float(f"{floor:.4g}"), elementwise_s_per_token=float(f"{elem:.4g}"),
            attn_decode_bandwidth_efficiency=round(min(attn_bw, 1.0), 4),
            attn_floor_s=float(f"{attn_floor:.4g}"),
            attn_prefill_flops_efficiency=round(min(pf, 1.0), 4),
            fitted_to=tuple(labels[gpu]), notes=tuple(notes))
    for gpu, fit in fits.items():
        (fit_dir / f"{gpu}.json").write_text(json.dumps(fit.to_json(), indent=1) + "\n")
        print(f"{gpu}: {fit.label}: {json.dumps(fit.to_json())}")


def _unit_fit(gpu: str) -> RooflineFit:
    """A fit of 1.0 efficiencies (LayerRoofline's shape terms are read from it unscaled)."""
    return RooflineFit(gpu, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0, ())


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("raw", type=Path, help="folder with the source files (see above)")
    ap.add_argument("--out", type=Path, default=ROOT / "conf" / "profiles" / "measured")
    args = ap.parse_args(argv)
    build(args.raw, args.out)


if __name__ == "__main__":
    main()
