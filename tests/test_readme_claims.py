"""What README.md and the Makefile say about the reproduce scripts, the demo's figures and the
launchers is what they do (issue 25): timings that come from a measurement the scripts print,
figure names the demo writes, each launcher's worker count."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from experiments.report.figures import figure_stem
from experiments.run.config import compose_run_config

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
SCRIPTS = ("preemption", "prefix_recovery", "victim_choice", "victim_policies", "real_model",
           "sensitivity")


def readme_timings() -> dict[str, str]:
    """The README's table of wall times: study -> its time column."""
    rows = re.findall(r"^\| `reproduce_([a-z_]+)\.sh` \| ([^|]+) \|", README, re.M)
    return {name: time.strip() for name, time in rows}


def seconds(text: str) -> int:
    """The first duration in `text` ("34 s", "7 min 42 s") in seconds."""
    found = re.search(r"(?:(\d+) min )?(\d+) s\b", text)
    assert found, text
    return int(found.group(1) or 0) * 60 + int(found.group(2))


def test_every_script_ends_by_printing_its_wall_time_and_cores() -> None:
    out = subprocess.run(["bash", "-c", "source scripts/_wall_time.sh; start=$SECONDS; "
                          "wall_time preemption \"$start\" tables in results/preemption"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert re.fullmatch(r"preemption: \d+ s wall on \d+ CPU cores; tables in "
                        r"results/preemption\n", out), out
    for script in ("_reproduce.sh", "reproduce_victim_policies.sh",
                   "reproduce_real_model.sh"):
        lines = (ROOT / "scripts" / script).read_text().strip().splitlines()
        assert lines[-1].startswith("wall_time "), script  # the last thing it prints
        assert "start=$SECONDS" in lines[:lines.index("set -euo pipefail") + 2], script


@pytest.mark.parametrize("study", SCRIPTS)
def test_readme_timings_are_measurements_the_study_readmes_record(study: str) -> None:
    timings = readme_timings()
    assert "| script | wall time on 2 cores | measured by |" in README
    assert study in timings, f"README.md gives no wall time for reproduce_{study}.sh"
    study_readme = (ROOT / "results" / study / "README.md").read_text()
    if timings[study].startswith("not timed"):  # said so in both places, no number made up
        assert re.search(r"not (?:timed|measured) as one run", study_readme), study
        return
    quiet = seconds(timings[study])  # the first (lowest) figure: the curated run's
    recorded = [seconds(m) for m in re.findall(r"(?:\d+ min )?\d+ s wall|\d+ s on 2",
                                               study_readme)]
    assert quiet in recorded, (study, quiet, recorded)


def test_the_makefile_quotes_the_readme_s_timings() -> None:
    timings = readme_timings()
    makefile = (ROOT / "Makefile").read_text()
    # the Makefile need quote no time (make reproduce prints them); any it quotes is measured
    claims = re.findall(r"(\d+) s on 2 cores|about (\d+) minutes? on 2 cores", makefile)
    for exact, about in claims:
        assert not about, "the Makefile gives a time no script printed: about N minutes"
        assert int(exact) in {seconds(t) for t in timings.values()}, exact


def test_readme_names_the_figures_the_demo_writes() -> None:
    demo = README.split("`make demo` runs the default comparison", 1)[1].split("\n\n")[0]
    for what in ("latency_cdf_ttft_e2el", figure_stem("evictions", None),
                 figure_stem("victim_e2el", None), "kv_use_vs_time"):
        assert f"`{what}`" in demo, what


@pytest.mark.parametrize("launcher", ["local", "joblib"])
def test_readme_gives_each_launchers_worker_count(launcher: str) -> None:
    cfg = compose_run_config([f"hydra/launcher={launcher}"], str(ROOT / "conf"),
                             return_hydra_config=True)
    said = re.search(rf"`hydra/launcher={launcher}`[^`]*(?:`[^`]*`[^`]*)*?`n_jobs=(-?\d+)`",
                     README)
    assert said, f"README.md does not say hydra/launcher={launcher}'s n_jobs"
    assert int(said.group(1)) == cfg.hydra.launcher.n_jobs
