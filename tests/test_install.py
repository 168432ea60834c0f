"""Installed commands: the console scripts of pyproject.toml, and a clear refusal without conf/
(tests/test_console_scripts.py runs them as subprocesses, from a clone and from elsewhere)."""

from __future__ import annotations

import importlib
import sys
import tomllib
from pathlib import Path

import pytest

import experiments.run.main as run

ROOT = Path(__file__).resolve().parents[1]


def test_console_scripts_name_the_python_m_entry_points() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"schedbench-run": "experiments.cli:run",
                       "schedbench-report": "experiments.cli:report",
                       "schedbench-conformance": "experiments.cli:conformance",
                       "schedbench-capacity": "experiments.cli:capacity"}
    for target in scripts.values():
        module, _, func = target.partition(":")
        assert callable(getattr(importlib.import_module(module), func))


def test_without_the_config_folder_the_run_command_refuses_in_one_sentence(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # what a non-editable `pip install .` leaves: the package without conf/ beside it
    monkeypatch.setattr(run, "CONF_DIR", str(tmp_path / "conf"))
    monkeypatch.setattr(sys, "argv", ["schedbench-run"])
    with pytest.raises(SystemExit) as e:
        run.cli()
    message = str(e.value.code)
    assert message.startswith("schedbench: the Hydra configs are not installed with the package")
    assert "pip install -e ." in message and message.count(". ") == 0
    run.require_conf_dir(ROOT / "conf")  # the clone's own folder is fine
