"""Where a `Recorder` puts its finished rows: kept in memory, or spooled to a parquet file.

A sink takes Arrow record batches of one schema. `MemorySink` keeps them (tests, small runs);
`ParquetSink` appends each batch to a parquet file as it comes (one row group per batch), so
a replay holds only the batch being filled. The file is written under the name it is given
(the caller picks a temporary name and moves it into place when the run is complete).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


class MemorySink:
    """Keeps every batch; `table()` is their concatenation as one chunk per column."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self._batches: list[pa.RecordBatch] = []
        self.num_rows = 0

    def write(self, batch: pa.RecordBatch) -> None:
        """Keep `batch`."""
        self._batches.append(batch)
        self.num_rows += batch.num_rows

    def table(self) -> pa.Table:
        """All rows written so far, in write order, one chunk per column."""
        return pa.Table.from_batches(self._batches, schema=self.schema).combine_chunks()

    def close(self) -> None:
        """Nothing to release."""

    def discard(self) -> None:
        """Drop the rows."""
        self._batches.clear()


class ParquetSink:
    """Appends each batch to the parquet file `path` as a row group (opened at the first
    write, or by `close` for an empty table)."""

    def __init__(self, schema: pa.Schema, path: str | Path,
                 use_dictionary: bool | list[str] = True) -> None:
        self.schema = schema
        self.path = Path(path)
        # dictionary-encode all columns, none, or the named ones (the encoding costs time and
        # only pays for columns with few distinct values)
        self.use_dictionary = use_dictionary
        self._writer: pq.ParquetWriter | None = None
        self._closed = False
        self.num_rows = 0

    def _open(self) -> pq.ParquetWriter:
        if self._closed:
            raise RuntimeError(f"record sink: {self.path} is already closed")
        if self._writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(str(self.path), self.schema,
                                            use_dictionary=self.use_dictionary)
        return self._writer

    def write(self, batch: pa.RecordBatch) -> None:
        """Append `batch` to the file."""
        self._open().write_batch(batch)
        self.num_rows += batch.num_rows

    def close(self) -> None:
        """Write the footer; the file is complete (and holds a valid empty table if nothing
        was written)."""
        if self._closed:
            return
        self._open().close()
        self._closed = True

    def discard(self) -> None:
        """Close and delete the file (a run that failed leaves nothing behind)."""
        if self._writer is not None and not self._closed:
            with contextlib.suppress(Exception):
                self._writer.close()
        self._closed = True
        if self.path.exists():
            os.unlink(self.path)
