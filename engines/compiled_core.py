"""The compiled core: the replay's hot modules compiled to C by mypyc, from the same sources.

`make compiled` (scripts/build_compiled.py) compiles `COMPILED_MODULES` into `build/compiled/`
and writes a manifest with the sha256 of each module's source. A process that starts with
`SCHEDBENCH_CORE=compiled` in its environment imports those modules from the build instead of
the `.py` files (`experiments/__init__.py` calls `activate_from_env`, before anything imports
the schedulers or the engine; a refused build makes the import of a compiled module raise
`CompiledCoreError`, and the command-line entry points print that as one line); every other
module, and every process without the variable, runs the Python sources. The Python sources stay
the reference: the compiled modules are the same code, and tests/test_compiled_core.py checks
that both give byte-identical records and agree with the recorded upstream decisions.

A build whose sources have changed since (or that is missing, or was built for another Python)
is refused with the reason; nothing falls back silently.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

# The checkout: this file is engines/compiled_core.py.
PROJECT_ROOT = Path(__file__).resolve().parents[1]
ENV_VAR = "SCHEDBENCH_CORE"
CORES = ("python", "compiled")
BUILD_DIR = PROJECT_ROOT / "build" / "compiled"
MANIFEST = "manifest.json"

# The modules of the replay's inner loop: both schedulers' state machines, the engine, the
# recorder and the simulated executor. Modules that OmegaConf reads as structured configs
# (dataclass annotations), runtime-checkable protocols and anything on the real model's path
# stay Python.
COMPILED_MODULES: tuple[str, ...] = (
    "schedulers.host_pool",
    "schedulers.victim_policy",
    "schedulers.vllm.block_pool",
    "schedulers.vllm.kv_cache_manager",
    "schedulers.vllm.kv_cache_utils",
    "schedulers.vllm.request",
    "schedulers.vllm.scheduler",
    "schedulers.vllm.decode_run",
    "schedulers.vllm.async_scheduler",
    "schedulers.sglang.kv_cache",
    "schedulers.sglang.memory_pool",
    "schedulers.sglang.new_token_ratio",
    "schedulers.sglang.radix_cache",
    "schedulers.sglang.req",
    "schedulers.sglang.schedule_batch",
    "schedulers.sglang.schedule_policy",
    "schedulers.sglang.scheduler",
    "schedulers.sglang.decode_run",
    "schedulers.sglang.overlap",
    "engines.arrivals",
    "engines.engine",
    "engines.pipeline",
    "engines.livelock",
    "engines.records",
    "engines.step_columns",
    "engines.executors.sim",
    "engines.cost_model",
    "engines.decode_batch_cost",
)


class CompiledCoreError(RuntimeError):
    """The compiled core was asked for and cannot be used (missing, stale, wrong Python)."""


@dataclass(frozen=True)
class CoreInfo:
    """Which core this process runs: "python" or "compiled" (with the build's digest)."""

    core: str
    build_digest: str | None = None


_ACTIVE = CoreInfo("python")


def source_path(module: str, root: Path = PROJECT_ROOT) -> Path:
    """The `.py` file of a dotted module name under `root`."""
    return root.joinpath(*module.split(".")).with_suffix(".py")


def source_digest(path: Path) -> str:
    """sha256 of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def python_tag() -> str:
    """The interpreter a build is for (its extension modules only load there)."""
    return f"{sys.implementation.cache_tag}-{sys.platform}"


# Packages whose every source the build depends on: the compiled modules and what they
# import (mypyc may specialise a compiled module on the types and constants it imports).
SOURCE_PACKAGES = ("schedulers", "engines")


def dependency_digests(root: Path = PROJECT_ROOT) -> dict[str, str]:
    """sha256 of every other `.py` file of `SOURCE_PACKAGES`, by path from `root`."""
    compiled = {source_path(m, root) for m in COMPILED_MODULES}
    return {str(p.relative_to(root)): source_digest(p)
            for pkg in SOURCE_PACKAGES for p in sorted((root / pkg).rglob("*.py"))
            if p not in compiled}


def read_manifest(build_dir: Path = BUILD_DIR) -> dict[str, object]:
    """The build's manifest: {"python": tag, "modules": {name: source sha256},
    "dependencies": {path: sha256}, "digest": ...}."""
    path = build_dir / MANIFEST
    if not path.is_file():
        raise CompiledCoreError(
            f"{ENV_VAR}=compiled: no compiled core at {build_dir} (run `make compiled`)")
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise CompiledCoreError(f"{ENV_VAR}=compiled: {path} is unreadable ({e}); run "
                                "`make compiled`") from e
    if not isinstance(data, dict):
        raise CompiledCoreError(f"{ENV_VAR}=compiled: {path} is not a manifest; run "
                                "`make compiled`")
    return data


def stale_sources(manifest: dict[str, object], root: Path = PROJECT_ROOT) -> list[str]:
    """The sources (paths from `root`) that differ from the ones the build was made from:
    a compiled module's, or any other file of `SOURCE_PACKAGES` (added, removed, changed)."""
    built = manifest.get("modules")
    built = built if isinstance(built, dict) else {}
    stale = [str(source_path(m, root).relative_to(root)) for m in COMPILED_MODULES
             if built.get(m) is None or not source_path(m, root).is_file()
             or built[m] != source_digest(source_path(m, root))]
    deps = manifest.get("dependencies")
    deps = deps if isinstance(deps, dict) else {}
    now = dependency_digests(root)
    stale += sorted(p for p in set(deps) | set(now) if deps.get(p) != now.get(p))
    return stale


class _CompiledFinder(importlib.abc.MetaPathFinder):
    """Finds the compiled modules' extension files in the build; nothing else."""

    def __init__(self, build_dir: Path, modules: Sequence[str]) -> None:
        self.build_dir = build_dir
        self.modules = frozenset(modules)

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.modules:
            return None
        stem = self.build_dir.joinpath(*fullname.split("."))
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            candidate = stem.parent / (stem.name + suffix)
            if candidate.is_file():
                loader = importlib.machinery.ExtensionFileLoader(fullname, str(candidate))
                return importlib.util.spec_from_file_location(fullname, candidate,
                                                              loader=loader)
        raise ImportError(f"compiled core: {fullname} is missing from {self.build_dir} "
                          "(run `make compiled`)")


def activate(build_dir: Path = BUILD_DIR, root: Path = PROJECT_ROOT) -> CoreInfo:
    """Import `COMPILED_MODULES` from the build from now on. Raises `CompiledCoreError` when
    the build is missing, was made for another Python, or compiled other sources, or when
    one of the modules was already imported from its source."""
    global _ACTIVE
    if _ACTIVE.core == "compiled":
        return _ACTIVE
    manifest = read_manifest(build_dir)
    if manifest.get("python") != python_tag():
        raise CompiledCoreError(
            f"{ENV_VAR}=compiled: the build at {build_dir} is for {manifest.get('python')}, "
            f"this is {python_tag()} (run `make compiled`)")
    stale = stale_sources(manifest, root)
    if stale:
        shown = ", ".join(stale[:8]) + (f" and {len(stale) - 8} more" if len(stale) > 8 else "")
        raise CompiledCoreError(
            f"{ENV_VAR}=compiled: the build at {build_dir} is stale, these sources changed "
            f"since: {shown} (run `make compiled`, or unset the variable to run the Python "
            "sources)")
    loaded = [m for m in COMPILED_MODULES if m in sys.modules]
    if loaded:
        raise CompiledCoreError(
            f"{ENV_VAR}=compiled: {', '.join(loaded)} already imported from source; set the "
            "variable before the process starts")
    # mypyc's runtime library of the build is a top-level module beside the packages.
    if str(build_dir) not in sys.path:
        sys.path.append(str(build_dir))
    sys.meta_path.insert(0, _CompiledFinder(build_dir, COMPILED_MODULES))
    _ACTIVE = CoreInfo("compiled", str(manifest.get("digest")))
    return _ACTIVE


class _RefusingFinder(importlib.abc.MetaPathFinder):
    """Raises why the compiled core was refused when a compiled module is imported, so that
    a refused `SCHEDBENCH_CORE=compiled` never falls back to the sources silently."""

    def __init__(self, error: CompiledCoreError, modules: Sequence[str]) -> None:
        self.error = error
        self.modules = frozenset(modules)

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname in self.modules:
            raise CompiledCoreError(str(self.error))
        return None


_REFUSED: CompiledCoreError | None = None


def refuse(error: CompiledCoreError) -> None:
    """From now on, importing a compiled module raises `error` (what the core was refused
    for); `refusal()` returns it, for entry points to print as one line."""
    global _REFUSED
    _REFUSED = error
    sys.meta_path.insert(0, _RefusingFinder(error, COMPILED_MODULES))


def refusal() -> CompiledCoreError | None:
    """Why the core `SCHEDBENCH_CORE` asked for was refused in this process, or None."""
    return _REFUSED


def activate_from_env() -> CoreInfo:
    """`activate()` when `SCHEDBENCH_CORE=compiled`; nothing for "python" or unset. Any
    other value is an error naming it."""
    value = os.environ.get(ENV_VAR, "python").strip() or "python"
    if value not in CORES:
        raise CompiledCoreError(f"{ENV_VAR}={value!r}: valid values are {', '.join(CORES)}")
    return activate() if value == "compiled" else _ACTIVE


def active_core() -> CoreInfo:
    """The core this process runs."""
    return _ACTIVE


def core_summary() -> dict[str, str | None]:
    """summary.json's record of the core: `core` ("python" or "compiled") and `core_build`
    (the build's digest, None for the Python sources)."""
    return {"core": _ACTIVE.core, "core_build": _ACTIVE.build_digest}
