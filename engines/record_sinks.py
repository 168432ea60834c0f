"""Where a `Recorder` puts its finished rows: kept in memory, or spooled to a parquet file.

A sink takes Arrow record batches of one schema. `MemorySink` keeps them (tests, small runs);
`ParquetSink` appends each batch to a parquet file as it comes (one row group per batch), so
a replay holds only the batch being filled. The file is written under the name it is given
(the caller picks a temporary name and moves it into place when the run is complete).
Encoding and compressing a row group release the GIL, so a writer thread does them while the
replay goes on (in order, at most two batches queued); an error there surfaces at the next
`write` or at `close`.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
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
    write, or by `close` for an empty table), from a writer thread."""

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
        self._queue: queue.Queue[pa.RecordBatch | None] = queue.Queue(maxsize=2)
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def _open(self) -> pq.ParquetWriter:
        if self._closed:
            raise RuntimeError(f"record sink: {self.path} is already closed")
        if self._writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(str(self.path), self.schema,
                                            use_dictionary=self.use_dictionary)
        return self._writer

    def _drain(self) -> None:
        writer = self._writer
        assert writer is not None
        while True:
            batch = self._queue.get()
            if batch is None:
                return
            if self._error is None:
                try:
                    writer.write_batch(batch)
                except BaseException as e:  # re-raised in the replay's thread
                    self._error = e

    def _raise_error(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"record sink: writing {self.path} failed: "
                               f"{type(self._error).__name__}: {self._error}") from self._error

    def write(self, batch: pa.RecordBatch) -> None:
        """Queue `batch` for the file (written in order by the writer thread)."""
        self._raise_error()
        self._open()
        if self._thread is None:
            self._thread = threading.Thread(target=self._drain, name=f"sink:{self.path.name}",
                                            daemon=True)
            self._thread.start()
        self._queue.put(batch)
        self.num_rows += batch.num_rows

    def _stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    def close(self) -> None:
        """Write what is queued and the footer; the file is complete (and holds a valid empty
        table if nothing was written)."""
        if self._closed:
            return
        writer = self._open()
        self._stop()
        self._raise_error()
        writer.close()
        self._closed = True

    def discard(self) -> None:
        """Close and delete the file (a run that failed leaves nothing behind)."""
        self._stop()
        if self._writer is not None and not self._closed:
            with contextlib.suppress(Exception):
                self._writer.close()
        self._closed = True
        if self.path.exists():
            os.unlink(self.path)
