"""StepColumns builds the same Arrow table as converting the rows one by one."""

from __future__ import annotations

import pyarrow as pa
import pytest

from engines.records import STEP_SCHEMA
from engines.step_columns import StepColumns

SCHEMA = pa.schema([("step", pa.int64()), ("t", pa.float64()), ("mode", pa.string()),
                    ("n", pa.int64())])


def test_rows_and_runs_make_the_table_python_rows_would() -> None:
    cols = StepColumns(SCHEMA, ("step", "t"))
    rows = [(0, 0.5, "extend", 3), (1, 0.75, "decode", 2)]
    for r in rows:
        cols.append(r)
    cols.extend(3, (range(2, 5), [1.0, 1.5, 2.25], "decode", 7))
    rows += [(2, 1.0, "decode", 7), (3, 1.5, "decode", 7), (4, 2.25, "decode", 7)]
    cols.append((5, 3.0, "idle", 0))
    rows.append((5, 3.0, "idle", 0))
    expected = pa.Table.from_pylist([dict(zip(SCHEMA.names, r, strict=True)) for r in rows],
                                    schema=SCHEMA)
    assert len(cols) == 6
    assert cols.table().equals(expected)


def test_empty_table_and_bad_input() -> None:
    assert StepColumns(STEP_SCHEMA, ()).table().num_rows == 0
    cols = StepColumns(SCHEMA, ("step", "t"))
    with pytest.raises(ValueError, match="t has 1 values for 2 rows"):
        cols.extend(2, ([0, 1], [0.0], "x", 1))
    cols.extend(2, ([0, 1], [0.0, 1.0], "x", [1, 1]))
    with pytest.raises(ValueError, match="n takes one value per segment"):
        cols.table()
    with pytest.raises(TypeError, match="field 'b'"):
        StepColumns(pa.schema([("b", pa.bool_())]), ())
    with pytest.raises(ValueError, match="unknown fields"):
        StepColumns(SCHEMA, ("nope",))


def test_an_index_field_numbers_the_rows() -> None:
    cols = StepColumns(SCHEMA, ("t",), index_field="step", first_index=10)
    cols.append((99, 0.5, "a", 1))
    cols.extend(2, (-1, [1.0, 2.0], "b", 2))
    assert cols.table().column("step").to_pylist() == [10, 11, 12]
    with pytest.raises(ValueError, match="index_field 'mode'"):
        StepColumns(SCHEMA, (), index_field="mode")
