"""Arrow without pandas until something asks for pandas.

pyarrow's pandas shim imports pandas (about 0.2 s, a sixth of a short job's start-up) the
first time any array is built or converted to NumPy, only to ask whether a value is a pandas
object; a replay never passes one. `defer_pandas_import()` lets the shim look once while
pandas cannot be imported, so that it records "no pandas" and stops looking. What needs
pandas later (`Table.to_pandas` for W&B tables, the figures) imports it then: the shim tries
again whenever pandas is required (pyarrow/pandas-shim.pxi: `_check_import` with `raise_`),
which tests/test_arrow_pandas.py checks on the pinned pyarrow.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType


class _NoPandas:
    """A meta-path finder that makes `import pandas` fail (while installed)."""

    @staticmethod
    def find_spec(name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if name == "pandas":
            raise ModuleNotFoundError("pandas deferred", name=name)
        return None


def defer_pandas_import() -> None:
    """Let pyarrow settle its pandas check now without importing pandas (no-op when pandas
    is already imported)."""
    if "pandas" in sys.modules:
        return
    import pyarrow as pa

    finder = _NoPandas()
    sys.meta_path.insert(0, finder)
    try:
        pa.array([0])
    finally:
        sys.meta_path.remove(finder)
