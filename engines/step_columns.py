"""The per-step records as typed columns: a row costs one append per column, a run of decode
steps one extend per column, and the Arrow table is built from the buffers without converting
Python objects (a replay has hundreds of thousands of steps)."""

from __future__ import annotations

from array import array
from collections.abc import Sequence

import numpy as np
import pyarrow as pa


class StepColumns:
    """Rows of a step schema: int64 columns in array("q"), float64 in array("d"), string
    columns as small codes into a list of the distinct values seen."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self._kinds: list[str] = []
        for f in schema:
            if pa.types.is_int64(f.type):
                self._kinds.append("q")
            elif pa.types.is_float64(f.type):
                self._kinds.append("d")
            elif pa.types.is_string(f.type):
                self._kinds.append("s")
            else:
                raise TypeError(f"step columns: field {f.name!r} has type {f.type}")
        self._cols: list[array] = [array("q" if k == "s" else k) for k in self._kinds]
        self._codes: list[dict[str, int]] = [{} for _ in self._kinds]
        self._strings = [i for i, k in enumerate(self._kinds) if k == "s"]

    def __len__(self) -> int:
        return len(self._cols[0])

    def _code(self, i: int, value: str) -> int:
        codes = self._codes[i]
        code = codes.get(value)
        if code is None:
            code = codes[value] = len(codes)
        return code

    def append(self, row: Sequence[int | float | str]) -> None:
        """Add one row, its values in schema order."""
        cols = self._cols
        for i in self._strings:
            cols[i].append(self._code(i, row[i]))  # type: ignore[arg-type]
        for i, (col, kind) in enumerate(zip(cols, self._kinds, strict=True)):
            if kind != "s":
                col.append(row[i])

    def extend(self, num_rows: int, columns: Sequence[Sequence[int | float] | int | float | str]
               ) -> None:
        """Add `num_rows` rows given column by column: a sequence of `num_rows` values, or one
        value repeated."""
        for i, (col, values) in enumerate(zip(self._cols, columns, strict=True)):
            if isinstance(values, str):
                col.extend(array("q", (self._code(i, values),)) * num_rows)
            elif isinstance(values, (int, float)):
                col.extend(array(col.typecode, (values,)) * num_rows)
            else:
                if len(values) != num_rows:
                    raise ValueError(f"step columns: {self.schema.field(i).name} has "
                                     f"{len(values)} values for {num_rows} rows")
                col.extend(values)

    def table(self) -> pa.Table:
        """The rows as an Arrow table of `schema`."""
        arrays = []
        for i, (col, kind, field) in enumerate(zip(self._cols, self._kinds, self.schema,
                                                   strict=True)):
            if kind == "s":
                names = list(self._codes[i])
                indices = pa.array(np.frombuffer(col, dtype=np.int64).astype(np.int32))
                arrays.append(pa.DictionaryArray.from_arrays(
                    indices, pa.array(names, pa.string())).cast(pa.string()))
            else:
                dtype = np.int64 if kind == "q" else np.float64
                arrays.append(pa.array(np.frombuffer(col, dtype=dtype), field.type))
        return pa.Table.from_arrays(arrays, schema=self.schema)
