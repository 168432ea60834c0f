"""The per-step records as typed columns, cheap to append to and to turn into a table.

A replay has hundreds of thousands of steps, most of them in decode runs (DESIGN.md, "Decode
runs") whose steps differ only in a few fields. Rows are stored as segments: a segment is one
step, or a run of steps. Fields that vary within a run (`per_step`) get one value per step in
a typed array (int64 in array("q"), float64 in array("d")); the others one value per segment,
kept as one tuple per segment and repeated when the table is built. The Arrow table is built
from buffers and per-segment columns, not from a Python object per step.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Collection, Sequence
from operator import itemgetter
from typing import Any, cast

import numpy as np
import pyarrow as pa

Value = int | float | str
_SEQUENCES = (list, tuple, range, array)


class StepColumns:
    """Rows of `schema`; the fields named in `per_step` may vary within a segment. The int64
    field `index_field`, when given, numbers the rows from `first_index` (the values passed
    for it are ignored)."""

    def __init__(self, schema: pa.Schema, per_step: Collection[str],
                 index_field: str | None = None, first_index: int = 0) -> None:
        self.schema = schema
        self._index = schema.get_field_index(index_field) if index_field is not None else -1
        if index_field is not None and (self._index < 0 or
                                        not pa.types.is_int64(schema.field(self._index).type)):
            raise ValueError(f"step columns: index_field {index_field!r} is not an int64 field")
        self._first_index = first_index
        unknown = set(per_step) - set(schema.names)
        if unknown:
            raise ValueError(f"step columns: per_step names unknown fields {sorted(unknown)}")
        for f in schema:
            numeric = pa.types.is_int64(f.type) or pa.types.is_float64(f.type)
            if not numeric and not pa.types.is_string(f.type):
                raise TypeError(f"step columns: field {f.name!r} has type {f.type}")
            if not numeric and f.name in per_step:
                raise ValueError(f"step columns: string field {f.name!r} cannot be per_step")
        self._step_idx = [i for i, f in enumerate(schema)
                          if f.name in per_step and i != self._index]
        self._seg_idx = [i for i, f in enumerate(schema)
                         if f.name not in per_step and i != self._index]
        self._step_cols = [array("d" if pa.types.is_float64(schema.field(i).type) else "q")
                           for i in self._step_idx]
        # (field index, bound append of its column): one step row costs one call per field
        self._step_appends: list[tuple[int, Callable[[Any], None]]] = [
            (i, col.append) for i, col in zip(self._step_idx, self._step_cols, strict=True)]
        self._seg_of = itemgetter(*self._seg_idx) if len(self._seg_idx) > 1 else \
            (lambda row: tuple(row[i] for i in self._seg_idx))
        # the per-segment fields of each segment (object: bad input is caught in `table`)
        self._segments: list[tuple[object, ...]] = []
        self._lengths = array("q")  # rows per segment
        self._num_rows = 0

    def __len__(self) -> int:
        return self._num_rows

    def append(self, row: Sequence[Value]) -> None:
        """Add one row (a segment of one step), its values in schema order."""
        for i, add in self._step_appends:
            add(row[i])
        self._segments.append(self._seg_of(row))
        self._lengths.append(1)
        self._num_rows += 1

    def extend(self, num_rows: int, columns: Sequence[Sequence[int | float] | Value]) -> None:
        """Add a segment of `num_rows` rows given column by column, in schema order: for a
        `per_step` field a sequence of `num_rows` values (or one value for all), for the
        others one value."""
        for i, col in zip(self._step_idx, self._step_cols):
            values = columns[i]
            if type(values) not in _SEQUENCES:
                col.extend(array(col.typecode, (values,)) * num_rows)  # type: ignore[arg-type]
                continue
            seq = cast(Sequence[float], values)
            if len(seq) != num_rows:
                raise ValueError(f"step columns: {self.schema.field(i).name} has {len(seq)} "
                                 f"values for {num_rows} rows")
            col.extend(seq)  # type: ignore[arg-type]
        # (a per-segment field given a sequence is caught when the table is built)
        self._segments.append(self._seg_of(columns))
        self._lengths.append(num_rows)
        self._num_rows += num_rows

    def table(self) -> pa.Table:
        """The rows as an Arrow table of `schema`."""
        arrays: list[pa.Array | None] = [None] * len(self.schema)
        if self._index >= 0:
            arrays[self._index] = pa.array(
                np.arange(self._first_index, self._first_index + self._num_rows, dtype=np.int64))
        for i, col in zip(self._step_idx, self._step_cols, strict=True):
            dtype = np.float64 if col.typecode == "d" else np.int64
            arrays[i] = pa.array(np.frombuffer(col, dtype=dtype), self.schema.field(i).type)
        lengths = np.frombuffer(self._lengths, dtype=np.int64)
        for j, i in enumerate(self._seg_idx):
            field = self.schema.field(i)
            values = [seg[j] for seg in self._segments]
            if any(type(v) in _SEQUENCES for v in values):
                raise ValueError(f"step columns: {field.name} takes one value per segment")
            if pa.types.is_string(field.type):
                codes: dict[str, int] = {}
                idx = np.fromiter((codes.setdefault(v, len(codes)) for v in values),  # type: ignore
                                  dtype=np.int32, count=len(values))
                arrays[i] = pa.DictionaryArray.from_arrays(
                    pa.array(np.repeat(idx, lengths)), pa.array(list(codes), pa.string())
                ).cast(pa.string())
            else:
                dtype = np.float64 if pa.types.is_float64(field.type) else np.int64
                arrays[i] = pa.array(np.repeat(np.array(values, dtype=dtype), lengths),
                                     field.type)
        return pa.Table.from_arrays(arrays, schema=self.schema)
