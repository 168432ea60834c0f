"""The installed commands run as a user runs them (issue 25: `schedbench-run` failed in every
form from inside a clone, "Primary config module 'conf' not found", while `python -m
experiments.run` worked): each is a console script written as pip writes it, over a clean
copy of the checkout installed as `pip install -e .` installs it (tests/clone_copy.py), run
as a subprocess from inside the copy and from another folder: `--help`, one small job, a
tiny `-m` sweep and its report. The job must be the one `python -m experiments.run` runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from clone_copy import (
    Installed,
    command_env,
    console_script,
    console_scripts,
    copy_checkout,
    install_console_scripts,
)

PLACES = ("clone", "elsewhere")
# Integer results and the config's hash: the same for the same job, whatever started it.
SAME_JOB_KEYS = ("config_hash", "status", "completed", "num_steps", "num_preemptions",
                 "total_output_tokens", "computed_tokens")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    base = tmp_path_factory.mktemp("console")
    return install_console_scripts(copy_checkout(base / "clone"), base / "env")


@pytest.fixture(scope="module")
def elsewhere(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("elsewhere")


def cwd_for(place: str, installed: Installed, elsewhere: Path) -> Path:
    return installed.checkout if place == "clone" else elsewhere


def run_command(installed: Installed, cwd: Path, name: str, *args: str
                ) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([installed.command(name), *args], cwd=cwd, env=installed.env,
                          capture_output=True, text=True, timeout=300)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 0, f"{name} {' '.join(args)}: rc {done.returncode}\n{done.stderr}"
    return done


def test_the_scripts_are_pips_and_import_the_copy(installed: Installed, elsewhere: Path
                                                  ) -> None:
    installed_run = Path(sys.prefix) / "bin" / "schedbench-run"
    if installed_run.is_file():  # this environment's own, from `pip install -e .`
        text = installed_run.read_text()  # pip versions differ in the argv[0] clean-up only
        ours = console_script("experiments.cli:run")
        for line in ("from experiments.cli import run", "    sys.exit(run())"):
            assert line in text.splitlines() and line in ours.splitlines()
    where = subprocess.run([sys.executable, "-c", "import experiments, sys; "
                            "print(experiments.__file__); print('conf' in sys.modules)"],
                           cwd=elsewhere, env=installed.env, capture_output=True, text=True,
                           check=True).stdout.split()
    assert Path(where[0]).resolve().is_relative_to(installed.checkout.resolve())
    assert set(console_scripts(installed.checkout)) == {
        "schedbench-run", "schedbench-report", "schedbench-conformance",
        "schedbench-capacity"}


@pytest.mark.parametrize("place", PLACES)
def test_help(place: str, installed: Installed, elsewhere: Path) -> None:
    out = run_command(installed, cwd_for(place, installed, elsewhere), "schedbench-run",
                      "--help").stdout
    assert "== Configuration groups ==" in out
    assert any(line.startswith("experiment: ") and "preemption" in line
               for line in out.splitlines())
    assert "## `workload`" in out  # the config reference (docs/CONFIG.md) follows
    if place == "elsewhere":  # neither reads conf/
        for other in ("schedbench-report", "schedbench-conformance", "schedbench-capacity"):
            assert "usage:" in run_command(installed, elsewhere, other, "--help").stdout


@pytest.mark.parametrize("place", PLACES)
def test_one_job_is_the_python_m_job(place: str, installed: Installed, elsewhere: Path,
                                     tmp_path: Path) -> None:
    cwd = cwd_for(place, installed, elsewhere)
    before = set(cwd.glob("outputs/*/*/summary.json"))
    run_command(installed, cwd, "schedbench-run", "workload.num_requests=20")
    written = set(cwd.glob("outputs/*/*/summary.json")) - before
    assert len(written) == 1, written  # in the working directory, as Hydra's default says
    job = json.loads(written.pop().read_text())
    reference = tmp_path / "python_m"
    subprocess.run([sys.executable, "-m", "experiments.run", "workload.num_requests=20",
                    f"hydra.run.dir={reference}"], cwd=installed.checkout, env=command_env(),
                   check=True, capture_output=True, timeout=300)
    expected = json.loads((reference / "summary.json").read_text())
    assert job["status"] == "ok" and job["completed"] == 20
    assert {k: job[k] for k in SAME_JOB_KEYS} == {k: expected[k] for k in SAME_JOB_KEYS}


@pytest.mark.parametrize("place", PLACES)
def test_a_tiny_sweep_and_its_report(place: str, installed: Installed, elsewhere: Path
                                     ) -> None:
    cwd = cwd_for(place, installed, elsewhere)
    before = set(cwd.glob("multirun/default/*"))
    out = run_command(installed, cwd, "schedbench-run", "-m", "workload.num_requests=10",
                      "hydra.callbacks.comparison.figures=false").stdout
    sweeps = set(cwd.glob("multirun/default/*")) - before
    assert len(sweeps) == 1, sweeps
    sweep = sweeps.pop()
    for job in ("0", "1"):
        assert json.loads((sweep / job / "summary.json").read_text())["status"] == "ok"
    assert (sweep / "comparison.csv").is_file()
    assert "vllm" in out and "sglang" in out
    report = run_command(installed, cwd, "schedbench-report", str(sweep.relative_to(cwd)),
                         "--no-figures").stdout
    assert "wrote" in report or "vllm" in report

