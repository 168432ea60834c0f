"""One probe of the capacity search: a config run at one rate over R realisations, in this
process, on whatever executor the config names (`experiments.run.main.run_experiment`, the
function every job runs), its SLO attainment judged by `RULE`."""

from __future__ import annotations

import copy
import math
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from experiments.report.realizations import bootstrap_ci

TARGET = 0.90
# The rule a probe passes by (README, "Statistics"), recorded in every capacity file.
RULE = ("mean SLO attainment over the realisations >= target (slo_attainment: requests "
        "meeting every SLO target, of all arrivals)")


@dataclass(frozen=True, slots=True)
class Probe:
    """One rate probed: the mean attainment over its realisations with its 95 % bootstrap
    CI, each realisation's value, the requests/s the workload offered (mean), goodput
    (mean, req/s), and whether it passed (`RULE`)."""

    rate: float
    attainment: float
    ci: tuple[float, float]
    per_realization: list[float]
    offered_request_rate: float | None
    request_goodput: float | None
    passed: bool
    jobs: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The probe as capacity.json holds it."""
        return {"rate": self.rate, "attainment": self.attainment,
                "attainment_ci95": [None if math.isnan(x) else x for x in self.ci],
                "per_realization": self.per_realization,
                "offered_request_rate": self.offered_request_rate,
                "request_goodput": self.request_goodput, "passed": self.passed,
                **({"jobs": self.jobs} if self.jobs else {})}


def _mean(values: list[float | None]) -> float | None:
    defined = [v for v in values if v is not None]
    return float(np.mean(defined)) if defined else None


def probe_config(cfg: DictConfig, param: str, rate: float, realization: int) -> DictConfig:
    """`cfg` at workload.`param` = `rate`, realisation `realization`, logging to no W&B."""
    job = copy.deepcopy(cfg)
    OmegaConf.update(job, f"workload.{param}", float(rate))
    OmegaConf.update(job, "workload.realization", int(realization))
    OmegaConf.update(job, "logger.name", "none")
    return job


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """One simulated run of a probe: realisation `realization` at `rate`, its SLO attainment
    (0 when the job had none), offered requests/s and goodput, and its kept folder."""

    realization: int
    attainment: float
    offered_request_rate: float | None
    request_goodput: float | None
    job: str | None = None


# Runs already made, by (rate, realisation): a per-window search and the pooled one probe
# many of the same points (the bracketing walks the same x2 grid from the same start).
RunCache = dict[tuple[float, int], RunOutcome]


def run_once(cfg: DictConfig, param: str, rate: float, realization: int, out: Path,
             keep: bool = False) -> RunOutcome:
    """Run `cfg` at `rate`, realisation `realization`, into a folder under `out` (kept with
    `keep`, else removed once read)."""
    from experiments.run.main import run_experiment

    job = probe_config(cfg, param, rate, realization)
    if keep:
        folder = out / f"rate_{rate:.6g}_r{realization}"
        folder.mkdir(parents=True, exist_ok=True)
    else:
        out.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix=".probe-", dir=out))
    try:
        summary = run_experiment(job, folder, bar=False,
                                 overrides=[f"workload.{param}={rate:.6g}",
                                            f"workload.realization={realization}"])
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)
    attained = summary.get("slo_attainment")
    return RunOutcome(realization=realization,
                      attainment=float(attained) if attained is not None else 0.0,
                      offered_request_rate=summary.get("offered_request_rate"),
                      request_goodput=summary.get("request_goodput"),
                      job=str(folder) if keep else None)


def judge(rate: float, outcomes: Sequence[RunOutcome], target: float) -> Probe:
    """The probe at `rate` made of `outcomes` (one per realisation), judged by `RULE`."""
    values = [o.attainment for o in outcomes]
    mean = float(np.mean(values))
    return Probe(rate=float(rate), attainment=mean, ci=bootstrap_ci(values),
                 per_realization=values,
                 offered_request_rate=_mean([o.offered_request_rate for o in outcomes]),
                 request_goodput=_mean([o.request_goodput for o in outcomes]),
                 passed=mean >= target, jobs=[o.job for o in outcomes if o.job])


def run_probe(cfg: DictConfig, param: str, rate: float, realizations: int | Sequence[int],
              target: float, out: Path, keep: bool = False,
              cache: RunCache | None = None) -> Probe:
    """Run `cfg` at `rate` for each of `realizations` (a count R: 0 .. R - 1) into folders
    under `out` (kept with `keep`, else removed once read) and judge it by `RULE`. With a
    `cache`, a (rate, realisation) already run is read from it, and new runs are added."""
    ids = range(realizations) if isinstance(realizations, int) else realizations
    outcomes: list[RunOutcome] = []
    for k in ids:
        key = (float(rate), int(k))
        hit = cache.get(key) if cache is not None else None
        if hit is None:
            hit = run_once(cfg, param, rate, int(k), out, keep)
            if cache is not None:
                cache[key] = hit
        outcomes.append(hit)
    return judge(rate, outcomes, target)
