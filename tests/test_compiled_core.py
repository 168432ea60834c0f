"""The compiled core (engines/compiled_core.py, `make compiled`): refused when it cannot
be trusted; when built, the same records as the Python sources and the real schedulers'
decisions on every recorded conformance case."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from engines.compiled_core import (
    BUILD_DIR,
    COMPILED_MODULES,
    MANIFEST,
    CompiledCoreError,
    activate,
    dependency_digests,
    python_tag,
    read_manifest,
    source_digest,
    source_path,
    stale_sources,
)

ROOT = Path(__file__).resolve().parents[1]


def _run(code_or_script: list[str], core: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SCHEDBENCH_CORE": core, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *code_or_script], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600, check=False)


def _fresh_manifest() -> dict[str, object]:
    return {"python": python_tag(), "digest": "x",
            "modules": {m: source_digest(source_path(m)) for m in COMPILED_MODULES},
            "dependencies": dependency_digests()}


def test_every_compiled_module_has_a_source() -> None:
    assert all(source_path(m).is_file() for m in COMPILED_MODULES)
    assert len(set(COMPILED_MODULES)) == len(COMPILED_MODULES)


@pytest.mark.parametrize("command", ["experiments.run", "experiments.report",
                                     "experiments.conformance"])
def test_an_unknown_core_is_refused_by_name(command: str) -> None:
    proc = _run(["-m", command, "--help"], "fast")
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: SCHEDBENCH_CORE='fast'")
    assert "python, compiled" in proc.stderr and "Traceback" not in proc.stderr


def test_importing_the_package_never_exits_and_a_refused_core_is_never_replaced() -> None:
    # importing `experiments` only records the refusal; the compiled modules then refuse
    # to load rather than fall back to the sources
    code = ("import experiments\n"
            "try:\n    import engines.engine\nexcept Exception as e:\n"
            "    print(type(e).__name__, e)\nelse:\n    print('imported')")
    proc = _run(["-c", code], "fast")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("CompiledCoreError SCHEDBENCH_CORE='fast'")


def test_a_missing_build_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CompiledCoreError, match=r"no compiled core at .* \(run `make compiled`\)"):
        activate(build_dir=tmp_path)


def test_a_stale_build_names_the_changed_sources(tmp_path: Path) -> None:
    manifest = _fresh_manifest()
    modules = manifest["modules"]
    assert isinstance(modules, dict)
    modules["schedulers.vllm.scheduler"] = "0" * 64
    del modules["engines.records"]
    deps = manifest["dependencies"]
    assert isinstance(deps, dict) and "schedulers/contract.py" in deps
    deps["schedulers/contract.py"] = "0" * 64  # a module the compiled ones import
    deps["engines/gone.py"] = "0" * 64  # a source removed since the build
    (tmp_path / MANIFEST).write_text(json.dumps(manifest))
    stale = ["schedulers/vllm/scheduler.py", "engines/records.py", "engines/gone.py",
             "schedulers/contract.py"]
    assert stale_sources(read_manifest(tmp_path)) == stale
    with pytest.raises(CompiledCoreError, match=r"stale, these sources changed since: "
                       + re.escape(", ".join(stale))):
        activate(build_dir=tmp_path)


@pytest.mark.parametrize("text", ["{not json", "[1, 2]"])
def test_a_damaged_manifest_is_refused(tmp_path: Path, text: str) -> None:
    (tmp_path / MANIFEST).write_text(text)
    with pytest.raises(CompiledCoreError, match=r"manifest.json is (unreadable|not a manifest)"):
        activate(build_dir=tmp_path)


def test_a_build_for_another_python_is_refused(tmp_path: Path) -> None:
    manifest = {**_fresh_manifest(), "python": "cpython-39-linux"}
    (tmp_path / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(CompiledCoreError, match="is for cpython-39-linux"):
        activate(build_dir=tmp_path)


def _built() -> str | None:
    """Why the build cannot be used here, or None when it can."""
    try:
        manifest = read_manifest(BUILD_DIR)
    except CompiledCoreError:
        return "no compiled core: run `make compiled` (CI does)"
    if manifest.get("python") != python_tag():
        return "the compiled core is for another Python: run `make compiled`"
    stale = stale_sources(manifest)
    return f"the compiled core is stale ({', '.join(stale)}): run `make compiled`" if stale \
        else None


needs_build = pytest.mark.skipif(_built() is not None, reason=_built() or "")


@needs_build
def test_compiled_records_equal_the_python_sources() -> None:
    runs = {}
    for core in ("python", "compiled"):
        proc = _run(["tests/compiled_core_check.py"], core)
        assert proc.returncode == 0, proc.stderr
        runs[core] = json.loads(proc.stdout)
    suffix = {core: {Path(f).suffix for f in runs[core]["modules"].values()}
              for core in runs}
    assert suffix == {"python": {".py"}, "compiled": {".so"}}
    assert runs["compiled"]["runs"] == runs["python"]["runs"]
    # every configuration preempts or retracts, so the eviction paths were compared too
    assert all(evictions > 0 for _, _, evictions in runs["python"]["runs"])


@needs_build
def test_compiled_core_agrees_with_the_real_schedulers_and_its_decode_runs() -> None:
    # the conformance cases and the decode-run property, in a process whose schedulers and
    # engine are the compiled ones (importing experiments first applies SCHEDBENCH_CORE)
    code = ("import sys, experiments, pytest; "
            "import schedulers.vllm.scheduler as v, engines.engine as e; "
            "assert v.__file__.endswith('.so') and e.__file__.endswith('.so'); "
            "sys.exit(pytest.main(['-o', 'addopts=', '-q', '-p', 'no:cacheprovider', "
            "'tests/test_conformance_vllm.py', 'tests/test_conformance_sglang.py', "
            "'tests/test_decode_runs.py']))")
    proc = _run(["-c", code], "compiled")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert re.search(r"\b[1-9]\d* passed", proc.stdout) and "failed" not in proc.stdout
