"""The README's shell commands, run as written, in order, on a clean copy of the checkout
(issue 25: "the README's commands all run as written on a fresh clone").

Every command of a shell code block of README.md (a fence with no language, `sh`, `bash` or
`shell`) is walked: run from the copy's root with bash, it must exit 0 without a traceback.
A command listed in `SKIPPED` is not run, for the reason given there; one in `SLOW` runs
only under the `slow` marker (`SCHEDBENCH_SLOW=1`). Every other command runs by default,
so a command added to the README is walked unless it is listed. A listed command that the
README no longer has fails the walk (the lists stay true).

The copy (tests/clone_copy.py) has the files a clone has and a `.venv` of its own (what `make`
would create) whose packages are this environment's, installed already: `make demo` runs its
recipe, not the install. `multirun/default/<date_time>` is the newest sweep folder the
commands before it wrote. The Python block of the README runs as tests/test_analysis.py.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest
from clone_copy import ROOT, command_env, copy_checkout

README = ROOT / "README.md"
SHELL_FENCES = ("", "sh", "bash", "shell")
# Commands not run here, and why.
SKIPPED = {
    "make test": "the test suite, of which this walk is a part",
    "python -m experiments.run -m experiment=preemption hydra/launcher=slurm "
    "hydra.launcher.partition=cpu hydra.launcher.account=my_project "
    "hydra.launcher.timeout_min=30 hydra.launcher.mem_gb=8 hydra.launcher.cpus_per_task=1 "
    "'hydra.launcher.setup=[\"source .venv/bin/activate\"]'":
        "needs a Slurm cluster (tests/test_submitit.py runs the same launcher path with "
        "hydra/launcher=submitit_local)",
}
# Commands run only under the `slow` marker, and why.
SLOW = {
    "make lint": "ruff and mypy over the whole copy, a minute or more on 2 cores",
    ".venv/bin/python -m experiments.run -m experiment=preemption":
        "20 jobs over the Azure traces (34 s to 220 s on 2 cores); needs the traces",
}
PLACEHOLDER = "multirun/default/<date_time>"


def readme_commands(text: str) -> list[str]:
    """The commands of the shell code blocks of `text`, in order, as written (a command
    continued with a backslash spans its lines; comments kept, bash skips them); blank and
    comment-only lines left out."""
    commands: list[str] = []
    fence: str | None = None
    pending: list[str] = []
    for line in text.splitlines():
        if line.startswith("```"):
            fence = line[3:].strip() if fence is None else None
            continue
        if fence is None or fence not in SHELL_FENCES:
            continue
        pending.append(line.rstrip())
        if pending[-1].endswith("\\"):
            continue
        command = "\n".join(pending)
        pending = []
        if key(command):
            commands.append(command)
    return commands


def key(command: str) -> str:
    """A command in one line, comments out, one space between words: how the lists here
    name it."""
    words = shlex.split(command.replace("\\\n", " "), comments=True)
    return " ".join(shlex.quote(w) if " " in w else w for w in words)


COMMANDS = readme_commands(README.read_text())


def test_the_lists_name_only_commands_the_readme_has() -> None:
    stale = sorted((set(SKIPPED) | set(SLOW)) - {key(c) for c in COMMANDS})
    assert not stale, f"listed here but not in README.md: {stale}"
    found = readme_commands("```\nmake a  # why\n\nb \\\n  --c=1 'd e'\n```\n```python\nx\n```")
    assert found == ["make a  # why", "b \\\n  --c=1 'd e'"]
    assert [key(c) for c in found] == ["make a", "b --c=1 'd e'"]


def project_site_packages() -> list[str]:
    """This environment's site-packages folders."""
    return [p for p in site.getsitepackages() if Path(p).is_dir()]


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clean copy of the checkout with a `.venv` of its own over this environment's
    packages (none of them reinstalled; `make` finds the venv installed)."""
    copy = copy_checkout(tmp_path_factory.mktemp("readme") / "clone")
    venv = copy / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = subprocess.run([str(venv / "bin" / "python"), "-c",
                              "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    Path(purelib, "project_packages.pth").write_text("\n".join(project_site_packages()) + "\n")
    for tool in ("ruff", "mypy"):  # `make lint`
        found = Path(sys.prefix) / "bin" / tool
        if found.is_file():
            (venv / "bin" / tool).symlink_to(found)
    # what `make` leaves after installing: newer than pyproject.toml and the constraints
    (venv / "bin" / ".installed").touch()
    return copy


def walk_env() -> dict[str, str]:
    env = command_env()
    traces = os.environ.get("SCHEDBENCH_TRACE_DIR") or str(ROOT.parent / "shared" / "data"
                                                          / "traces")
    if Path(traces).is_dir():  # the README: "here: export SCHEDBENCH_TRACE_DIR=..."
        env["SCHEDBENCH_TRACE_DIR"] = str(Path(traces).resolve())
    return env


def as_run(command: str, clone: Path) -> str:
    """`command` with the README's placeholder for a sweep folder replaced by the newest one
    the commands before it wrote."""
    if PLACEHOLDER not in command:
        return command
    sweeps = sorted((clone / "multirun" / "default").glob("*"), key=lambda p: p.name)
    assert sweeps, f"{command}: no sweep folder; the README's sweeps run before it"
    return command.replace(PLACEHOLDER, str(sweeps[-1].relative_to(clone)))


def walked(command: str) -> object:
    if key(command) in SKIPPED:
        return pytest.param(command, marks=pytest.mark.skip(reason=SKIPPED[key(command)]))
    if key(command) in SLOW:
        return pytest.param(command, marks=pytest.mark.slow)
    return command


@pytest.mark.parametrize("command", [walked(c) for c in COMMANDS],
                         ids=[re.sub(r"\W+", "_", key(c))[:60] for c in COMMANDS])
def test_readme_command_runs_as_written(command: str, clone: Path) -> None:
    env = walk_env()
    if command.startswith("make ") and shutil.which("make") is None:
        pytest.skip("no make on this machine")
    if "experiment=preemption" in command and "SCHEDBENCH_TRACE_DIR" not in env \
            and not (clone / "data" / "traces").is_dir():
        pytest.skip("no traces: scripts/fetch_traces.sh, or SCHEDBENCH_TRACE_DIR")
    done = subprocess.run(["bash", "-c", as_run(command, clone)], cwd=clone, env=env,
                          capture_output=True, text=True, timeout=600)
    assert "Traceback" not in done.stderr, f"{command}\n{done.stderr[-3000:]}"
    assert done.returncode == 0, f"{command}: rc {done.returncode}\n{done.stderr[-3000:]}"
