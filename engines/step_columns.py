"""The per-step records as typed columns, cheap to append to and to turn into a table.

A replay has hundreds of thousands of steps, most of them in decode runs (DESIGN.md, "Decode
runs") whose steps differ only in a few fields. Rows are stored as segments: a segment is one
step, or a run of steps. Fields that vary within a run (`per_step`) get one value per step;
the others one value per segment, repeated when the table is built. Int64 fields live in
array("q"), float64 in array("d"), strings as codes into the distinct values seen; the Arrow
table is built from the buffers, not from Python objects.
"""

from __future__ import annotations

from array import array
from collections.abc import Collection, Sequence
from typing import cast

import numpy as np
import pyarrow as pa

Value = int | float | str
_SEQUENCES = (list, tuple, range, array)


class StepColumns:
    """Rows of `schema`; the fields named in `per_step` may vary within a segment."""

    def __init__(self, schema: pa.Schema, per_step: Collection[str]) -> None:
        self.schema = schema
        unknown = set(per_step) - set(schema.names)
        if unknown:
            raise ValueError(f"step columns: per_step names unknown fields {sorted(unknown)}")
        self._kinds: list[str] = []
        for f in schema:
            if pa.types.is_int64(f.type):
                self._kinds.append("q")
            elif pa.types.is_float64(f.type):
                self._kinds.append("d")
            elif pa.types.is_string(f.type):
                if f.name in per_step:
                    raise ValueError(f"step columns: string field {f.name!r} cannot be per_step")
                self._kinds.append("s")
            else:
                raise TypeError(f"step columns: field {f.name!r} has type {f.type}")
        self._per_step = [f.name in per_step for f in schema]
        self._cols: list[array] = [array("q" if k == "s" else k) for k in self._kinds]
        self._codes: list[dict[str, int]] = [{} for _ in self._kinds]
        self._lengths = array("q")  # rows per segment
        self._num_rows = 0

    def __len__(self) -> int:
        return self._num_rows

    def _code(self, i: int, value: str) -> int:
        codes = self._codes[i]
        code = codes.get(value)
        if code is None:
            code = codes[value] = len(codes)
        return code

    def append(self, row: Sequence[Value]) -> None:
        """Add one row (a segment of one step), its values in schema order."""
        kinds = self._kinds
        for i, col in enumerate(self._cols):
            v = row[i]
            col.append(self._code(i, v) if kinds[i] == "s" else v)  # type: ignore[arg-type]
        self._lengths.append(1)
        self._num_rows += 1

    def extend(self, num_rows: int, columns: Sequence[Sequence[int | float] | Value]) -> None:
        """Add a segment of `num_rows` rows given column by column: for a `per_step` field a
        sequence of `num_rows` values (or one value for all), for the others one value."""
        kinds, per_step = self._kinds, self._per_step
        for i, (col, values) in enumerate(zip(self._cols, columns, strict=True)):
            if not per_step[i]:
                if type(values) in _SEQUENCES:
                    raise ValueError(f"step columns: {self.schema.field(i).name} takes one "
                                     "value per segment")
                col.append(self._code(i, values) if kinds[i] == "s" else values)  # type: ignore
            elif type(values) not in _SEQUENCES:
                col.extend(array(col.typecode, (values,)) * num_rows)  # type: ignore[arg-type]
            else:
                seq = cast(Sequence[float], values)
                if len(seq) != num_rows:
                    raise ValueError(f"step columns: {self.schema.field(i).name} has "
                                     f"{len(seq)} values for {num_rows} rows")
                col.extend(seq)
        self._lengths.append(num_rows)
        self._num_rows += num_rows

    def table(self) -> pa.Table:
        """The rows as an Arrow table of `schema`."""
        lengths = np.frombuffer(self._lengths, dtype=np.int64)
        arrays = []
        for i, (col, kind, field) in enumerate(zip(self._cols, self._kinds, self.schema,
                                                   strict=True)):
            values = np.frombuffer(col, dtype=np.float64 if kind == "d" else np.int64)
            if not self._per_step[i]:
                values = np.repeat(values, lengths)
            if kind == "s":
                names = pa.array(list(self._codes[i]), pa.string())
                arrays.append(pa.DictionaryArray.from_arrays(
                    pa.array(values.astype(np.int32)), names).cast(pa.string()))
            else:
                arrays.append(pa.array(values, field.type))
        return pa.Table.from_arrays(arrays, schema=self.schema)
