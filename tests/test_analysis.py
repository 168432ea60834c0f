"""experiments.report.analysis (the README's worked example runs here) and comparing two sweeps."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from experiments.report.analysis import load
from experiments.report.cli import main
from experiments.report.compare import match_jobs
from experiments.report.tables import load_sweep

ROOT = Path(__file__).resolve().parents[1]
TINY = ["workload.num_requests=16", "workload.request_rate=200", "kv_capacity_tokens=4096",
        "workload.prompt_len.mean=200", "progress=off",
        "hydra.callbacks.comparison.figures=false", "hydra.callbacks.comparison.print_table=false"]


def sweep(path: Path, *args: str) -> Path:
    proc = subprocess.run([sys.executable, "-m", "experiments.run", "-m",
                           f"hydra.sweep.dir={path}", *TINY, *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=180,
                          env={**os.environ, "CI": "true"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return path


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("sweeps")
    a = sweep(root / "a", "scheduler=vllm,sglang", "workload.request_rate=100,200",
              "workload.output_len.mean=30")
    b = sweep(root / "b", "scheduler=vllm,sglang", "workload.request_rate=100,200",
              "workload.output_len.mean=60")
    return a, b


def readme_example() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Analysis from Python", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)  # type: ignore[union-attr]


def test_readme_analysis_example_runs(sweeps: tuple[Path, Path]) -> None:
    code = readme_example()
    assert 'sweep = "multirun/default/' in code
    code = re.sub(r'sweep = "[^"]+"', f"sweep = {str(sweeps[0])!r}", code, count=1)
    scope: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), scope)
    res = scope["res"]
    p99 = scope["p99"]
    assert isinstance(p99, pd.Series) and set(p99.index) == {"vllm", "sglang"}
    assert len(res.jobs) == 4  # type: ignore[attr-defined]


def test_load_a_sweep_and_a_job_with_job_scheduler_and_swept_columns(
        sweeps: tuple[Path, Path]) -> None:
    res = load(sweeps[0])
    assert res.params == ["workload.request_rate"]
    assert list(res.requests.columns[:3]) == ["job", "scheduler", "workload.request_rate"]
    assert len(res.requests) == 4 * 16 and set(res.requests["job"]) == {0, 1, 2, 3}
    assert set(res.requests["workload.request_rate"]) == {100, 200}
    by_job = res.requests.groupby("job")["scheduler"].first()
    assert by_job.tolist() == res.jobs.sort_values("job")["scheduler"].tolist()
    assert "token_times" not in res.requests and (res.requests["e2el_ms"] > 0).all()
    steps = res.steps.groupby("job").size()
    assert steps.tolist() == [load(sweeps[0] / str(j), requests=False).steps.shape[0]
                              for j in steps.index]
    job = load(sweeps[0] / "1", list_columns=True)
    assert len(job.jobs) == 1 and len(job.requests) == 16 and "token_times" in job.requests
    with pytest.raises(FileNotFoundError, match="is not a folder"):
        load(sweeps[0] / "nope")


def test_report_compares_two_sweeps_matching_jobs_by_parameters(
        sweeps: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = sweeps
    pairing = match_jobs(load_sweep(a), load_sweep(b))
    assert pairing.params == ["workload.request_rate"] and len(pairing.pairs) == 4
    assert all(x.scheduler == y.scheduler and x.overrides["workload.request_rate"] ==
               y.overrides["workload.request_rate"] for x, y in pairing.pairs)
    main([str(a), str(b), "--out", str(tmp_path), "--labels", "base,long"])
    table = pd.read_csv(tmp_path / "compare.csv")
    assert len(table) == 4 and {"median_e2el_ms [base]", "median_e2el_ms [long]",
                                "median_e2el_ms [long/base]"} <= set(table.columns)
    ratio = table["median_e2el_ms [long]"] / table["median_e2el_ms [base]"]
    assert ratio.tolist() == pytest.approx(table["median_e2el_ms [long/base]"].tolist())
    assert (tmp_path / "evictions_vs_request_rate_base_vs_long.pdf").is_file()
    assert "4 matched jobs" in capsys.readouterr().out


def test_compare_md_prints_ratios_as_ratios_and_says_what_differs(
        sweeps: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = sweeps
    main([str(a), str(b), "--out", str(tmp_path), "--labels", "base,long", "--no-figures"])
    md = (tmp_path / "compare.md").read_text()
    # above the table: the one config value the two sweeps were run with differently
    assert ("What differs between A and B: `workload.output_len.mean`: 30.0 in A, 60.0 in B."
            in md)
    assert "What differs between A and B" in capsys.readouterr().out
    lines = [line for line in md.split("\n") if line.startswith("| ")]
    columns = [c.strip() for c in lines[0].split("|")[1:-1]]
    rows = [line.split("|")[1:-1] for line in lines[1:]]
    table = pd.read_csv(tmp_path / "compare.csv")
    for name in ("output_throughput [long/base]", "preempted_request_share [long/base]",
                 "completed [long/base]"):
        cells = [r[columns.index(name)].strip() for r in rows]
        values = table[name].tolist()
        assert cells == [f"{v:.3g}x" if v == v else "n/a" for v in values], name
    assert "preempted_request_share [long/base] (%)" not in md
