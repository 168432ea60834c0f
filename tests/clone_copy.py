"""A clean copy of this checkout, as a fresh clone holds it, and the installed console
commands run against it (tests/test_console_scripts.py, tests/test_readme_walk.py).

`copy_checkout` copies the files git tracks and the untracked ones it does not ignore: no
.venv, outputs/, multirun/, build/ or models/. `install_console_scripts` does what
`pip install -e .` does for the copy without touching any environment: a folder of links to
the copy's packages only (the editable finder of setuptools maps just those, never the
checkout's root, so `conf/` is not importable) and, in another folder, the console scripts of
pyproject.toml's [project.scripts] written from pip's template (`console_script`). Running
such a script puts its own folder first on sys.path, not the working directory: exactly the
difference between `schedbench-run` and `python -m experiments.run`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# pyproject.toml [tool.setuptools.packages.find] include: the top-level packages installed.
PACKAGES = ("schedulers", "engines", "kernels", "experiments")


def copy_checkout(dest: Path) -> Path:
    """The checkout's files (tracked, and untracked but not ignored) copied into `dest`."""
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout: cannot tell a clone's files from build outputs")
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=ROOT, check=True,
                            capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        src = ROOT / name
        if src.is_symlink() or not src.is_file():  # deleted in the work tree, or a link
            continue
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)
    return dest


def console_script(target: str, python: str = sys.executable) -> str:
    """The text pip writes for a console script `module:function` (pip's template)."""
    module, _, func = target.partition(":")
    return (f"#!{python}\n"
            "import sys\n"
            f"from {module} import {func}\n"
            "if __name__ == '__main__':\n"
            "    sys.argv[0] = sys.argv[0].removesuffix('.exe')\n"
            f"    sys.exit({func}())\n")


def console_scripts(checkout: Path) -> dict[str, str]:
    """[project.scripts] of the checkout's pyproject.toml: command -> module:function."""
    scripts: dict[str, str] = tomllib.loads((checkout / "pyproject.toml").read_text())[
        "project"]["scripts"]
    return scripts


@dataclass(frozen=True)
class Installed:
    """A checkout with its console scripts: `bin` holds them, `env` runs them."""

    checkout: Path
    bin: Path
    env: dict[str, str]

    def command(self, name: str) -> str:
        """The path of console script `name`."""
        return str(self.bin / name)


def command_env() -> dict[str, str]:
    """The environment for a command the tests start: no compiled core asked for, no
    progress bar, no W&B login."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("SCHEDBENCH_CORE", "PYTHONPATH", "WANDB_MODE")}
    env["CI"] = "true"
    return env


def install_console_scripts(checkout: Path, where: Path) -> Installed:
    """The console scripts of `checkout` in `where`/bin, its packages in `where`/site."""
    site = where / "site"
    bin_dir = where / "bin"
    site.mkdir(parents=True)
    bin_dir.mkdir(parents=True)
    for package in PACKAGES:
        (site / package).symlink_to(checkout / package, target_is_directory=True)
    for name, target in console_scripts(checkout).items():
        script = bin_dir / name
        script.write_text(console_script(target))
        script.chmod(0o755)
    env = command_env()
    env["PYTHONPATH"] = str(site)
    return Installed(checkout, bin_dir, env)
