"""Byte for byte (issue 30 item 8): what the report writes is a function of the sweep's jobs
alone. The same small sweep (both schedulers, two realisations, a pool tight enough that vLLM
evicts and SGLang does not) reported from two folders of different names, in two processes
with different string-hash seeds (set and dict orders), gives the same bytes in every table;
one figure (PNG and PDF) drawn in two such processes too. No date, wall time, absolute path,
folder name or hash order gets into what `make reproduce` commits."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "CI": "true"}
COLUMNS = "num_preemptions,median_e2el_victim_ms,prefix_recovery_on_resume"
# One figure of the report, drawn in a process of its own (argv: comparison.csv, target).
FIGURE = """
import sys
import pandas as pd
from experiments.report.figures import Metric, metric_vs_load
from experiments.report.tables import EVICTION_METRICS, figure_frame
frame = figure_frame(pd.read_csv(sys.argv[1]), ["scheduler", "workload.realization"])
metric_vs_load(frame, None, [Metric(*m) for m in EVICTION_METRICS], sys.argv[2],
               title="Evictions")
"""


def run(args: list[str], hash_seed: str = "0") -> None:
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env={**ENV, "PYTHONHASHSEED": hash_seed})
    assert proc.returncode == 0, proc.stderr[-3000:]


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_a_report_is_the_same_bytes_from_another_folder_and_process(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    run(["-m", "experiments.run", "-m", "workload.num_requests=40", "repeats=2",
         "kv_capacity_tokens=4096", f"hydra.sweep.dir={sweep}", "logger=none",
         "hydra.callbacks.comparison.figures=false",
         "hydra.callbacks.comparison.print_table=false"])
    renamed = tmp_path / "elsewhere" / "sweep_of_another_name"
    shutil.copytree(sweep, renamed)
    outs = []
    for k, source in enumerate((sweep, renamed)):
        out = tmp_path / f"report_{k}"
        run(["-m", "experiments.report", str(source), "--out", str(out), "--title",
             "Tiny study", "--columns", COLUMNS, "--no-figures"], hash_seed=str(k + 1))
        run(["-c", FIGURE, str(out / "comparison.csv"), str(out / "evictions.png")],
            hash_seed=str(k + 1))
        outs.append(files(out))
    first, second = outs
    assert {"comparison.csv", "aggregated.md", "headline.md", "victims_paired.csv",
            "evictions.png", "evictions.pdf", "report.json"} <= set(first)
    assert sorted(first) == sorted(second)
    assert [n for n in first if first[n] != second[n]] == []
    for name, data in first.items():  # nothing of where it ran
        if name.endswith((".csv", ".md", ".json")):
            text = data.decode()
            assert str(tmp_path) not in text and "sweep_of_another_name" not in text, name
