"""Build the compiled core (`make compiled`): mypyc compiles the modules that
`engines.compiled_core.COMPILED_MODULES` lists into build/compiled/, with a manifest of
the sources it compiled. A process started with `SCHEDBENCH_CORE=compiled` then imports them
from there (see engines/compiled_core.py).

    python scripts/build_compiled.py [--jobs N]

Needs mypy (the dev extra) and a C compiler. About a minute on 2 cores. The build is made in
a scratch folder and moved into place when it is complete.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engines.compiled_core import (  # noqa: E402
    BUILD_DIR,
    COMPILED_MODULES,
    MANIFEST,
    dependency_digests,
    python_tag,
    source_digest,
    source_path,
)


def build(out: Path, jobs: int) -> dict[str, object]:
    """Compile the modules into `out` (replaced when complete); returns the manifest."""
    import mypy.version
    from mypyc.build import mypycify
    from setuptools import Distribution

    sources = {m: source_path(m) for m in COMPILED_MODULES}
    digests = {m: source_digest(p) for m, p in sources.items()}
    deps = dependency_digests(ROOT)
    out.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".compiled-", dir=out.parent))
    cwd = Path.cwd()
    try:
        os.chdir(ROOT)  # mypyc names the modules after their paths from the project root
        ext = mypycify([str(p.relative_to(ROOT)) for p in sources.values()],
                       opt_level="3", target_dir=str(scratch / "c"))
        dist = Distribution({"name": "schedbench-compiled-core", "ext_modules": ext})
        cmd = dist.get_command_obj("build_ext")
        cmd.build_lib = str(scratch / "lib")  # type: ignore[attr-defined]
        cmd.build_temp = str(scratch / "obj")  # type: ignore[attr-defined]
        cmd.parallel = jobs  # type: ignore[attr-defined]
        cmd.ensure_finalized()
        cmd.run()
    finally:
        os.chdir(cwd)
    tag = python_tag()
    digest = hashlib.sha256(json.dumps([tag, mypy.version.__version__, digests, deps],
                                       sort_keys=True).encode()).hexdigest()
    manifest: dict[str, object] = {"python": tag, "mypy": mypy.version.__version__,
                                   "modules": digests, "dependencies": deps, "digest": digest}
    lib = scratch / "lib"
    (lib / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    old = out.with_name(out.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if out.exists():
        out.rename(old)
    lib.rename(out)
    shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(scratch, ignore_errors=True)
    return manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                    help="C compiler processes (default: the CPU count)")
    ap.add_argument("--out", type=Path, default=BUILD_DIR, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    manifest = build(args.out, max(1, args.jobs))
    print(f"compiled core: {len(COMPILED_MODULES)} modules into {args.out} "
          f"({time.perf_counter() - t0:.0f} s; digest {str(manifest['digest'])[:12]}); "
          "run with SCHEDBENCH_CORE=compiled")
    return 0


if __name__ == "__main__":
    sys.exit(main())
