"""Each record column is declared once (engines/records.py): the schemas, the row layouts and
the module's column list come from `REQUEST_COLUMNS` / `STEP_COLUMNS`."""

from __future__ import annotations

import inspect

import pytest

from engines import records
from engines.records import (
    REQUEST_COLUMNS,
    REQUEST_SCHEMA,
    STEP_COLUMNS,
    STEP_FIELDS_PER_STEP,
    STEP_SCHEMA,
    step_row,
)


def test_schemas_and_docs_come_from_the_declarations() -> None:
    assert REQUEST_SCHEMA.names == [c.name for c in REQUEST_COLUMNS]
    assert STEP_SCHEMA.names == [c.name for c in STEP_COLUMNS]
    assert [f.type for f in STEP_SCHEMA] == [c.type for c in STEP_COLUMNS]
    assert tuple(c.name for c in STEP_COLUMNS if c.per_step) == STEP_FIELDS_PER_STEP
    doc = records.columns_doc("Request columns", REQUEST_COLUMNS) + \
        records.columns_doc("Step columns", STEP_COLUMNS)
    for c in (*REQUEST_COLUMNS, *STEP_COLUMNS):
        assert c.doc
        assert f"    {c.name} ({c.type}): {c.doc}" in doc


def test_every_request_column_reads_an_attribute_of_the_held_row() -> None:
    attrs = set(records._Row.__slots__) | {"victim"}
    assert {c.attr for c in REQUEST_COLUMNS} <= attrs
    assert len({c.attr for c in REQUEST_COLUMNS}) == len(REQUEST_COLUMNS)


def test_the_step_row_takes_every_step_column_by_name_in_schema_order() -> None:
    params = inspect.signature(step_row).parameters.values()
    assert [p.name for p in params] == [c.name for c in STEP_COLUMNS]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params)


def test_a_step_row_is_built_by_name_in_schema_order() -> None:
    values = {name: i for i, name in enumerate(STEP_SCHEMA.names)}
    assert tuple(step_row(**values)) == tuple(range(len(STEP_SCHEMA)))
    with pytest.raises(TypeError):
        step_row(*values.values())  # by name only
    del values["swap_s"]
    with pytest.raises(TypeError, match="swap_s"):
        step_row(**values)
