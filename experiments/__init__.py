"""Experiments: Hydra runs, workloads, metrics, reports.

Importing the package first applies `SCHEDBENCH_CORE` (experiments/compiled_core.py): with
`SCHEDBENCH_CORE=compiled` the replay's hot modules come from the build of `make compiled`.
"""

import sys

from experiments.compiled_core import CompiledCoreError, activate_from_env

try:
    activate_from_env()
except CompiledCoreError as _e:
    print(f"error: {_e}", file=sys.stderr)
    raise SystemExit(2) from None
