"""Experiments: running jobs (`run`), their inputs (`inputs`), their results (`results`),
reports on them (`report`) and the conformance replay (`conformance`).

Importing the package applies `SCHEDBENCH_CORE` (engines/compiled_core.py): with
`SCHEDBENCH_CORE=compiled` the replay's hot modules come from the build of `make compiled`.
Nothing exits here: when that core is refused (missing, stale, or an unknown value), importing
one of its modules raises `CompiledCoreError` with the reason, and the command-line entry
points (`experiments.cli`) print it as one line and exit 2.
"""

from engines.compiled_core import CompiledCoreError, activate_from_env, refuse

try:
    activate_from_env()
except CompiledCoreError as _e:
    refuse(_e)
