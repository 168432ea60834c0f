"""The schedulers. Each package registers its own entry (`<package>/entry.py`, see
schedulers/registry.py and DESIGN.md "Adding a scheduler"); importing this package imports
the built-in ones, in the order comparisons list them (hence no import sorting here)."""

# isort: off
from schedulers.vllm import entry as _vllm  # noqa: F401
from schedulers.sglang import entry as _sglang  # noqa: F401
from schedulers.fcfs_reserve import entry as _fcfs_reserve  # noqa: F401
# isort: on
