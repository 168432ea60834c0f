"""experiments/results/arrow_pandas.py: a run builds and reads Arrow arrays without importing
pandas, and pandas still works afterwards where it is needed (W&B tables use `Table.to_pandas`)."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import sys
from experiments.results.arrow_pandas import defer_pandas_import
defer_pandas_import()
import numpy as np, pyarrow as pa, pyarrow.compute as pc
a = pa.array([1.5, 2.5])
assert a.to_numpy().tolist() == [1.5, 2.5]
assert pc.sum(pa.array(np.arange(4))).as_py() == 6
assert pa.scalar(3).as_py() == 3
assert "pandas" not in sys.modules, "pandas was imported"
df = pa.table({"x": [1, 2]}).to_pandas()
assert "pandas" in sys.modules and df["x"].tolist() == [1, 2]
import pandas as pd
assert pa.array(pd.Series([4, 5])).to_pylist() == [4, 5]  # the shim sees pandas again
print("ok")
"""


def test_arrow_works_without_pandas_then_with_it() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                         check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
