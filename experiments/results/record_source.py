"""Read a run's records column by column, batch by batch: from an Arrow table in memory or
from a parquet file, so that metrics need only the columns they use and one batch at a time."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

BATCH_ROWS = 8192


@dataclass(frozen=True, slots=True)
class RecordSource:
    """A table of records: `table` (in memory) or `path` (a parquet file), exactly one."""

    table: pa.Table | None = None
    path: Path | None = None

    def __post_init__(self) -> None:
        if (self.table is None) == (self.path is None):
            raise ValueError("RecordSource: give exactly one of table and path")

    @classmethod
    def of(cls, x: pa.Table | str | Path) -> RecordSource:
        """A source over a table, or over the parquet file at a path."""
        return cls(table=x) if isinstance(x, pa.Table) else cls(path=Path(x))

    @property
    def num_rows(self) -> int:
        if self.table is not None:
            return int(self.table.num_rows)
        assert self.path is not None
        return int(pq.ParquetFile(self.path).metadata.num_rows)

    @property
    def column_names(self) -> list[str]:
        """The columns the records hold."""
        if self.table is not None:
            return list(self.table.column_names)
        assert self.path is not None
        return list(pq.read_schema(self.path).names)

    def batches(self, columns: Sequence[str], batch_rows: int = BATCH_ROWS
                ) -> Iterator[pa.RecordBatch]:
        """The rows in order, only `columns`, at most `batch_rows` per batch."""
        if self.table is not None:
            yield from self.table.select(list(columns)).to_batches(max_chunksize=batch_rows)
            return
        assert self.path is not None
        # pre_buffer=False: with it (pyarrow's default) the reader keeps every row group it
        # has read until it is closed, so memory grows with the file. One thread: the
        # columns are small.
        f = pq.ParquetFile(self.path, pre_buffer=False)
        try:
            yield from f.iter_batches(batch_size=batch_rows, columns=list(columns),
                                      use_threads=False)
        finally:
            f.close()

    def read(self, columns: Sequence[str]) -> pa.Table:
        """The whole of `columns` (use for scalar columns: O(rows) memory)."""
        if self.table is not None:
            return self.table.select(list(columns))
        assert self.path is not None
        return pq.read_table(self.path, columns=list(columns), use_threads=False)


def table_digest(*tables: pa.Table) -> str:
    """sha256 over the tables' Arrow IPC stream bytes: equal digests, equal records (schema,
    values and order), however they were written (each table is first made one chunk: a
    file's row groups, or a recorder's batches, follow how its steps were committed)."""
    h = hashlib.sha256()
    for t in tables:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, t.schema) as w:
            w.write_table(t.combine_chunks())
        h.update(sink.getvalue().to_pybytes())
    return h.hexdigest()
