"""Step time from public per-operator GPU measurements (`cost_model=measured`), and the roofline
fitted to them (`cost_model=fitted_roofline`).

A measured profile is a folder under conf/profiles/measured/ (built by
scripts/build_measured_profiles.py from Vidur's and LLMServingSim's published medians; the
sources, with repository, path, commit and blob, are in its `profile.json`):

- `linear.csv`: per number of tokens T, each per-layer operator's median in ms (Vidur's names:
  attn_pre_proj, attn_post_proj, mlp_up_proj, mlp_down_proj, input_layernorm,
  post_attention_layernorm, attn_rope, mlp_act, add; emb once per step);
- `attn_decode.csv`: the decode attention kernel of one layer, per (prior context, batch);
- `attn_prefill.csv`: the prefill attention kernel of one layer, per (chunk, prior context).

`MeasuredCostModel` interpolates each operator at the shapes the step really has
(`interp`): the linear and elementwise operators at the step's T tokens; decode attention at
the decode batch size and its mean prior context (the kernel reads every context once: what
Vidur's predictor does too); prefill attention at each chunk's length and prior context,
summed over chunks. Times one layer, times the layers, plus what the measurements leave out
(DESIGN.md, "Executors"): the LM head (the measured up projection at the same number of rows,
scaled by the ratio of weight sizes, unless the source measured it), the KV-cache write (its
bytes at the hardware's bandwidth), and the CPU time between steps, sampling included
(`step_overhead_s`, not measured by these sources).

Outside the measured range a value is extrapolated linearly from the nearest two measured
points (decode attention beyond the largest measured batch of a context: proportionally to
the batch; a prefill chunk shorter than the shortest measured one: scaled by its causal
pairs), and counted: `extrapolated` holds
the number of operator look-ups that left the measured range, by operator.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engines.executors.specs import HardwareSpec, ModelSpec
from schedulers.contract import ScheduledChunk

PER_LAYER_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj",
                 "input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act")
# Vidur measures one residual add; a layer has two.
ADDS_PER_LAYER = 2
MEASURED_DIR = "conf/profiles/measured"


class MeasuredRangeError(ValueError):
    """A shape outside the measured range when extrapolation is refused."""


def interp(xs: Sequence[float], ys: Sequence[float], x: float) -> tuple[float, bool]:
    """Piecewise-linear interpolation of (xs, ys) (xs increasing) at x, and whether x lay
    outside [xs[0], xs[-1]]: then the line through the two nearest points, never below 0
    (a single point: its value)."""
    n = len(xs)
    if n == 0:
        raise ValueError("interp: no points")
    if n == 1:
        return ys[0], x != xs[0]
    if x < xs[0]:
        i, out = 0, True
    elif x > xs[-1]:
        i, out = n - 2, True
    else:
        lo, hi = 0, n - 1
        while hi - lo > 1:  # bisect: xs[lo] <= x <= xs[hi]
            mid = (lo + hi) // 2
            if xs[mid] <= x:
                lo = mid
            else:
                hi = mid
        i, out = lo, False
    x0, x1 = xs[i], xs[i + 1]
    y0, y1 = ys[i], ys[i + 1]
    y = y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return (y if y > 0.0 else 0.0), out


@dataclass(frozen=True)
class Curve:
    """One operator's measured medians along one axis (ms)."""

    xs: tuple[float, ...]
    ys: tuple[float, ...]

    def at(self, x: float) -> tuple[float, bool]:
        return interp(self.xs, self.ys, x)


def _curves(rows: Iterable[tuple[int, int, float]]) -> dict[int, Curve]:
    groups: dict[int, list[tuple[int, float]]] = {}
    for g, x, y in rows:
        groups.setdefault(g, []).append((x, y))
    return {g: Curve(tuple(float(x) for x, _ in sorted(pts)), tuple(y for _, y in sorted(pts)))
            for g, pts in sorted(groups.items())}


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


@dataclass(frozen=True)
class MeasuredProfile:
    """The derived tables of one measured (model, GPU) pair (see the module docstring)."""

    key: str
    label: str
    model: str
    hardware: str
    linear: dict[str, Curve]            # operator -> ms along the number of tokens
    decode: dict[int, Curve]            # prior context -> ms along the batch size
    prefill: dict[int, Curve]           # chunk -> ms along the prior context
    meta: Mapping[str, Any]

    @property
    def complete(self) -> bool:
        """Whether every operator of a step has measurements (attention included)."""
        return bool(self.decode) and bool(self.prefill)

    @classmethod
    def load(cls, folder: str | Path) -> MeasuredProfile:
        """Read a profile folder (profile.json, linear.csv, and the attention tables when the
        pair has them)."""
        folder = Path(folder)
        meta_path = folder / "profile.json"
        if not meta_path.is_file():
            raise FileNotFoundError(f"cost model: measured profile {folder}: no profile.json "
                                    "(build it with scripts/build_measured_profiles.py)")
        meta = json.loads(meta_path.read_text())
        rows = _read_csv(folder / "linear.csv")
        ops = [k for k in rows[0] if k != "num_tokens"] if rows else []
        tokens = tuple(float(r["num_tokens"]) for r in rows)
        linear = {op: Curve(tokens, tuple(float(r[op]) for r in rows)) for op in ops}
        decode: dict[int, Curve] = {}
        prefill: dict[int, Curve] = {}
        if (folder / "attn_decode.csv").is_file():
            decode = _curves((int(r["kv_cache_size"]), int(r["batch_size"]), float(r["ms"]))
                             for r in _read_csv(folder / "attn_decode.csv"))
        if (folder / "attn_prefill.csv").is_file():
            prefill = _curves((int(r["prefill_chunk_size"]), int(r["kv_cache_size"]),
                               float(r["ms"]))
                              for r in _read_csv(folder / "attn_prefill.csv"))
        return cls(key=folder.name, label=str(meta["label"]), model=str(meta["model"]),
                   hardware=str(meta["hardware"]), linear=linear, decode=decode,
                   prefill=prefill, meta=meta)


def _along_batch(curve: Curve, batch: int) -> float:
    """A decode-attention curve at `batch`, proportional to the batch outside its measured
    batches (the kernel streams batch x context keys: time through the origin; used only
    where fewer than two measured contexts cover the batch)."""
    if batch > curve.xs[-1]:
        return curve.ys[-1] * batch / curve.xs[-1]
    if batch < curve.xs[0]:
        return curve.ys[0] * batch / curve.xs[0]
    return curve.at(batch)[0]


class OperatorTimes:
    """Per-layer operator times of one measured profile, interpolated at a step's shapes,
    counting the look-ups that left the measured range (`extrapolated`)."""

    def __init__(self, profile: MeasuredProfile, refuse_outside: bool = False) -> None:
        self.profile = profile
        self.refuse_outside = refuse_outside
        self.extrapolated: dict[str, int] = {}
        self._decode_kvs = tuple(float(k) for k in profile.decode)
        self._decode = tuple(profile.decode.values())
        self._prefill_chunks = tuple(float(c) for c in profile.prefill)
        self._prefill = tuple(profile.prefill.values())

    def _note(self, op: str, what: str) -> None:
        if self.refuse_outside:
            raise MeasuredRangeError(
                f"cost model: measured profile {self.profile.label!r}: {op} at {what} is "
                "outside the measured range (cost_model=measured refuses it with "
                "executor.extrapolate=false)")
        self.extrapolated[op] = self.extrapolated.get(op, 0) + 1

    def op(self, name: str, num_tokens: float) -> float:
        """ms of one call of a per-token operator at `num_tokens` rows."""
        y, out = self.profile.linear[name].at(num_tokens)
        if out:
            self._note(name, f"{num_tokens:g} tokens")
        return y

    def decode_attention(self, batch: int, prior_context: float) -> float:
        """ms of one layer's decode attention for `batch` sequences of mean prior context
        `prior_context`: along the batch within each measured context, then along the
        context between the measured contexts whose batches cover `batch`."""
        kvs: list[float] = []
        ys: list[float] = []
        for kv, curve in zip(self._decode_kvs, self._decode, strict=True):
            if curve.xs[0] <= batch <= curve.xs[-1]:
                kvs.append(kv)
                ys.append(curve.at(batch)[0])
        if len(kvs) < 2:  # no two contexts measured at this batch: along the batch too
            self._note("attn_decode", f"batch {batch}")
            kvs = list(self._decode_kvs)
            ys = [_along_batch(c, batch) for c in self._decode]
        y, out = interp(kvs, ys, prior_context)
        if out:
            self._note("attn_decode", f"context {prior_context:g}")
        return y

    def prefill_attention(self, chunk: int, prior_context: int) -> float:
        """ms of one layer's prefill attention of a chunk of `chunk` tokens after
        `prior_context` cached ones: along the context within each measured chunk length,
        then along the chunk length between the nearest measured lengths below and above
        whose contexts cover `prior_context` (else the nearest two, their contexts extended
        by a line fitted to each)."""
        chunks, curves = self._prefill_chunks, self._prefill
        lo = hi = -1
        for i, (c, curve) in enumerate(zip(chunks, curves, strict=True)):
            if curve.xs[0] <= prior_context <= curve.xs[-1]:
                if c <= chunk:
                    lo = i
                elif hi < 0:
                    hi = i
        if lo >= 0 and chunks[lo] == chunk:
            return curves[lo].at(prior_context)[0]
        if lo >= 0 and hi >= 0:
            y0, y1 = curves[lo].at(prior_context)[0], curves[hi].at(prior_context)[0]
            c0, c1 = chunks[lo], chunks[hi]
        else:
            self._note("attn_prefill", f"chunk {chunk} at context {prior_context}")
            n = len(chunks)
            i = 0
            while i < n - 2 and chunks[i + 1] < chunk:
                i += 1
            y0 = _extended(curves[i], prior_context)
            if n == 1 or chunk <= chunks[0]:
                c0 = chunks[0]
                # shorter than the shortest measured chunk: scaled by its causal pairs
                return y0 * (chunk * prior_context + chunk * (chunk + 1) / 2) / (
                    c0 * prior_context + c0 * (c0 + 1) / 2)
            y1 = _extended(curves[i + 1], prior_context)
            c0, c1 = chunks[i], chunks[i + 1]
        y = y0 + (y1 - y0) * (chunk - c0) / (c1 - c0)
        return y if y > 0.0 else 0.0


def _extended(curve: Curve, x: float) -> float:
    """A curve at x, beyond its measured range along the least-squares line of all its
    points (a steadier slope than its two end points)."""
    if curve.xs[0] <= x <= curve.xs[-1] or len(curve.xs) < 2:
        return curve.at(x)[0]
    n = len(curve.xs)
    mx = sum(curve.xs) / n
    my = sum(curve.ys) / n
    sxx = sum((a - mx) ** 2 for a in curve.xs)
    slope = sum((a - mx) * (b - my) for a, b in zip(curve.xs, curve.ys, strict=True)) / sxx
    y = my + slope * (x - mx)
    return y if y > 0.0 else 0.0


def lm_head_ms(times: OperatorTimes, model: ModelSpec, rows: int) -> float:
    """ms of the LM head over `rows` rows: measured when the source has it, else the measured
    up projection at the same rows scaled by the ratio of the weight sizes (vocab x hidden
    against hidden x 2 x intermediate: a GEMM of the same rows, streaming its weights)."""
    if rows <= 0:
        return 0.0
    if "lm_head" in times.profile.linear:
        return times.op("lm_head", rows)
    ratio = model.vocab_size / (2.0 * model.intermediate_size)
    return times.op("mlp_up_proj", rows) * ratio



def step_shape(chunks: Sequence[ScheduledChunk],
               prefill_attention: Callable[[int, int], float]) -> tuple[int, int, int, float]:
    """A step's shape as the cost models price it: its tokens, its decodes (one-token
    chunks), the sum of their prior contexts, and the prefill attention of the other chunks
    (`prefill_attention(length, prior context)` summed)."""
    t = n_dec = dec_ctx = 0
    attention = 0.0
    for c in chunks:
        n = len(c.token_ids)
        t += n
        if n == 1:
            n_dec += 1
            dec_ctx += c.start_pos
        else:
            attention += prefill_attention(n, c.start_pos)
    return t, n_dec, dec_ctx, attention

class MeasuredCostModel:
    """A step's seconds from a measured profile (see the module docstring)."""

    uses_padded_kv = False
    uses_plan = True

    def __init__(self, profile: MeasuredProfile, model: ModelSpec, hardware: HardwareSpec,
                 step_overhead_s: float = 0.0, refuse_outside: bool = False) -> None:
        if not profile.complete:
            raise ValueError(
                f"cost model: measured profile {profile.label!r} has no attention "
                f"measurements ({'; '.join(profile.meta.get('notes', []))}); use "
                "executor.cost_model=fitted_roofline for this pair")
        if step_overhead_s < 0:
            raise ValueError(f"cost model: step_overhead_s={step_overhead_s!r}: must be >= 0")
        self.profile = profile
        self.model = model
        self.times = OperatorTimes(profile, refuse_outside)
        self.step_overhead_s = step_overhead_s
        self.source = f"measured profile: {profile.label}"
        self._layers = model.num_hidden_layers
        self._kv_layer_bytes = model.kv_bytes_per_token / model.num_hidden_layers
        self._bandwidth = hardware.memory_bandwidth

    @property
    def extrapolated(self) -> dict[str, int]:
        return self.times.extrapolated

    def _layer_ms(self, num_tokens: int) -> float:
        op = self.times.op
        t = 0.0
        for name in PER_LAYER_OPS:
            t += op(name, num_tokens)
        if "add" in self.profile.linear:
            t += ADDS_PER_LAYER * op("add", num_tokens)
        # the KV-cache write: its bytes at the hardware's bandwidth (not transcribed)
        return t + num_tokens * self._kv_layer_bytes / self._bandwidth * 1e3

    def _step_ms(self, num_tokens: int, num_seqs: int, attention_ms: float) -> float:
        times = self.times
        per_layer = self._layer_ms(num_tokens) + attention_ms
        t = self._layers * per_layer
        if "emb" in self.profile.linear:
            t += times.op("emb", num_tokens)
        norm = "final_layernorm" if "final_layernorm" in self.profile.linear \
            else "input_layernorm"
        t += times.op(norm, num_tokens)
        return t + lm_head_ms(times, self.model, num_seqs)

    def plan_seconds(self, chunks: Sequence[ScheduledChunk]) -> float:
        """Seconds of a step running these chunks (each decode's context, each prefill
        chunk's length and prior context)."""
        if not chunks:
            return 0.0
        t, n_dec, dec_ctx, attention = step_shape(chunks, self.times.prefill_attention)
        if n_dec:
            attention += self.times.decode_attention(n_dec, dec_ctx / n_dec)
        return self._step_ms(t, len(chunks), attention) * 1e-3 + self.step_overhead_s

    def seconds(self, num_tokens: int, attn_pairs: int, kv_read_tokens: int,
                num_seqs: int = 1, padded_kv_tokens: int | None = None) -> float:
        """A pure decode step from its aggregate terms (every chunk one token: kv_read_tokens
        is the contexts after the step); other steps need the chunks (`plan_seconds`)."""
        if num_tokens != num_seqs:
            raise ValueError("cost model: the measured profile needs each chunk's shape for "
                             "a step with prefill chunks (plan_seconds)")
        prior = (kv_read_tokens - num_seqs) / num_seqs
        attention = self.times.decode_attention(num_seqs, prior)
        return self._step_ms(num_tokens, num_seqs, attention) * 1e-3 + self.step_overhead_s


# --- the roofline fitted to the measurements ----------------------------------------------
@dataclass(frozen=True)
class RooflineFit:
    """Per-GPU parameters of `FittedRooflineCostModel`, fitted to measured operators
    (scripts/build_measured_profiles.py writes them to conf/profiles/measured/fitted_roofline/
    <hardware>.json).

    flops_efficiency, bandwidth_efficiency: of the linear layers (GEMMs) against the peaks;
    layer_floor_s: a layer's linear and elementwise operators' fixed time (launches: the
    small-batch floor); elementwise_s_per_token: norms, rope, activation, residual adds per
    token per layer; attn_decode_bandwidth_efficiency and attn_floor_s: decode attention
    reading the KV cache; attn_prefill_flops_efficiency: prefill attention's causal FLOPs.
    `fitted_to`: the measured sources; `extrapolated_from`: the GPU whose fit this is when
    this GPU has no measurements (None: fitted to its own).
    """

    hardware: str
    flops_efficiency: float
    bandwidth_efficiency: float
    layer_floor_s: float
    elementwise_s_per_token: float
    attn_decode_bandwidth_efficiency: float
    attn_floor_s: float
    attn_prefill_flops_efficiency: float
    fitted_to: tuple[str, ...]
    extrapolated_from: str | None = None
    notes: tuple[str, ...] = ()

    @classmethod
    def load(cls, path: str | Path) -> RooflineFit:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"cost model: no fitted roofline at {path} (build it with "
                                    "scripts/build_measured_profiles.py)")
        d = json.loads(path.read_text())
        d["fitted_to"] = tuple(d["fitted_to"])
        d["notes"] = tuple(d.get("notes", ()))
        return cls(**d)

    def to_json(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}

    @property
    def label(self) -> str:
        """The provenance of a step time from this fit."""
        s = "roofline fitted to " + ", ".join(self.fitted_to)
        if self.extrapolated_from:
            s += f" (extrapolated from {self.extrapolated_from} to {self.hardware})"
        return s


def borrowed_fit(fit: RooflineFit, hardware: str) -> RooflineFit:
    """`fit` (another GPU's) applied to `hardware`, which has no measurements: the same
    efficiencies, floors and elementwise term against `hardware`'s own peaks
    (`hardware.fit_from`; its label says so: "extrapolated from <fit's GPU> to <hardware>").
    Sound only for GPUs of the same architecture, whose kernels reach the same fractions of
    their peaks (DESIGN.md, "Executors")."""
    if fit.extrapolated_from:
        raise ValueError(f"hardware {hardware!r}: fit_from={fit.hardware!r}: that fit is itself "
                         f"extrapolated from {fit.extrapolated_from!r}; borrow the measured one")
    return RooflineFit(**{**fit.__dict__, "hardware": hardware, "extrapolated_from": fit.hardware,
                          "notes": (*fit.notes, f"{hardware}: no measurements; the "
                                    f"{fit.hardware} efficiencies and floors applied to the "
                                    f"{hardware}'s peaks (an extrapolation)")})


class LayerRoofline:
    """The fitted roofline's per-layer terms for one model on one GPU (seconds)."""

    def __init__(self, fit: RooflineFit, model: ModelSpec, hardware: HardwareSpec) -> None:
        h, d = model.hidden_size, model.head_size
        q, kv = model.num_attention_heads * d, model.num_key_value_heads * d
        self.layer_params = 2 * h * q + 2 * h * kv + 3 * h * model.intermediate_size
        self.layer_weight_bytes = self.layer_params * model.dtype_bytes
        self.kv_layer_bytes = model.kv_bytes_per_token / model.num_hidden_layers
        self.attn_flops_per_pair = 4.0 * model.num_attention_heads * d
        self.flops = hardware.peak_flops
        self.bandwidth = hardware.memory_bandwidth
        self.fit = fit

    def linear(self, num_tokens: float) -> float:
        """Linear layers plus elementwise operators of one layer at `num_tokens` rows."""
        f = self.fit
        mem = self.layer_weight_bytes / (self.bandwidth * f.bandwidth_efficiency)
        comp = 2.0 * self.layer_params * num_tokens / (self.flops * f.flops_efficiency)
        return (comp if comp > mem else mem) + f.layer_floor_s \
            + f.elementwise_s_per_token * num_tokens

    def decode_attention(self, batch: int, prior_context_sum: float) -> float:
        """One layer's decode attention over `batch` sequences whose prior contexts sum to
        `prior_context_sum` (each reads its context and the new token)."""
        f = self.fit
        return f.attn_floor_s + (prior_context_sum + batch) * self.kv_layer_bytes / (
            self.bandwidth * f.attn_decode_bandwidth_efficiency)

    def prefill_attention(self, chunk: int, prior_context: int) -> float:
        """One layer's prefill attention of one chunk (its causal query-key pairs)."""
        f = self.fit
        pairs = chunk * prior_context + chunk * (chunk + 1) / 2
        return f.attn_floor_s + self.attn_flops_per_pair * pairs / (
            self.flops * f.attn_prefill_flops_efficiency)


class FittedRooflineCostModel:
    """The roofline with per-GPU efficiencies, floors and an elementwise term fitted to the
    measured operators (`RooflineFit`); the LM head is a GEMM at the same efficiencies, the
    CPU time between steps `step_overhead_s`."""

    uses_padded_kv = False
    uses_plan = True

    def __init__(self, fit: RooflineFit, model: ModelSpec, hardware: HardwareSpec,
                 step_overhead_s: float = 0.0) -> None:
        if step_overhead_s < 0:
            raise ValueError(f"cost model: step_overhead_s={step_overhead_s!r}: must be >= 0")
        self.fit = fit
        self.layer = LayerRoofline(fit, model, hardware)
        self.step_overhead_s = step_overhead_s
        self.source = fit.label
        self._layers = model.num_hidden_layers
        self._head_params = model.vocab_size * model.hidden_size
        self._head_bytes = self._head_params * model.dtype_bytes

    def _lm_head(self, rows: int) -> float:
        f, lay = self.fit, self.layer
        mem = self._head_bytes / (lay.bandwidth * f.bandwidth_efficiency)
        comp = 2.0 * self._head_params * rows / (lay.flops * f.flops_efficiency)
        return comp if comp > mem else mem

    def plan_seconds(self, chunks: Sequence[ScheduledChunk]) -> float:
        """Seconds of a step running these chunks."""
        if not chunks:
            return 0.0
        t, n_dec, dec_ctx, attention = step_shape(chunks, self.layer.prefill_attention)
        if n_dec:
            attention += self.layer.decode_attention(n_dec, dec_ctx)
        return self._layers * (self.layer.linear(t) + attention) + self._lm_head(len(chunks)) \
            + self.step_overhead_s

    def seconds(self, num_tokens: int, attn_pairs: int, kv_read_tokens: int,
                num_seqs: int = 1, padded_kv_tokens: int | None = None) -> float:
        """A pure decode step from its aggregate terms (see `MeasuredCostModel.seconds`)."""
        if num_tokens != num_seqs:
            raise ValueError("cost model: the fitted roofline needs each chunk's shape for a "
                             "step with prefill chunks (plan_seconds)")
        attention = self.layer.decode_attention(num_seqs, kv_read_tokens - num_seqs)
        return self._layers * (self.layer.linear(num_tokens) + attention) \
            + self._lm_head(num_seqs) + self.step_overhead_s


def measured_profile_folder(root: Path, model: str, hardware: str) -> Path | None:
    """The complete measured profile of (model, hardware) under `root`
    (conf/profiles/measured), or None."""
    for meta in sorted(root.glob("*/profile.json")):
        d = json.loads(meta.read_text())
        if d.get("model") == model and d.get("hardware") == hardware and d.get("complete"):
            return meta.parent
    return None


def available_pairs(root: Path) -> list[str]:
    """'model on hardware (label)' of every complete measured profile under `root`."""
    out = []
    for meta in sorted(root.glob("*/profile.json")):
        d = json.loads(meta.read_text())
        if d.get("complete"):
            out.append(f"model={d['model']} hardware={d['hardware']} ({d['label']})")
    return out


def relative_errors(predicted: Sequence[float], measured: Sequence[float]) -> list[float]:
    """|predicted - measured| / measured, per shape."""
    return [abs(p - m) / m for p, m in zip(predicted, measured, strict=True) if m > 0
            and not math.isnan(p)]
