"""The writer thread: trend rows written on a thread of their own (as pages, or by SQLite's inserts) while the
loader prepares the next shard."""

from __future__ import annotations

import contextlib
import queue
import threading

import pyarrow as pa

from trendconv.heap import Trimmer
from trendconv.loading import connection
from trendconv.loading.insert import insert_trend
from trendconv.loading.table import TablePages


class Writer:
    """Writes trend rows on a thread of its own, in the order they are given, while the loader reads and
    prepares the next shard: the page writer's C part and SQLite run without the GIL, so the two overlap. One
    thread and a short queue keep the order (and so the database bytes) and bound the rows in flight. A failed
    write is raised again by the next `put` or by `close`; later rows are then dropped, as the build is
    abandoned."""

    _IN_FLIGHT = 2

    def __init__(self, conn: connection.Connection, stats, *, clean: bool = False, pages: TablePages | None = None):
        """STATS: trend_data's stat columns; with CLEAN, rows come with raw values (see `insert_trend`). With PAGES,
        the rows are written as pages while they fit that plan, and inserted by SQLite from the first that does
        not (trendconv.loading.table)."""
        self._conn, self._stats, self._clean, self.pages = conn, stats, clean, pages
        self.offered = self.inserted = 0
        self._error: BaseException | None = None
        self._queue: queue.Queue = queue.Queue(self._IN_FLIGHT)
        self._trimmer = Trimmer()  # the batches' freed memory given back (trendconv.heap)
        self._thread = threading.Thread(target=self._run, name="trendconv-writer", daemon=True)
        self._thread.start()

    def put(self, rows: pa.Table) -> None:
        self._raise()
        self.offered += rows.num_rows
        self._trimmer.add(rows.num_rows)
        self._queue.put(rows)

    def close(self) -> None:
        """Wait until every row given is inserted (or the first failure, raised here)."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        self._raise()

    def finish(self, summary) -> None:
        """`close`, then the rows inserted and the duplicates left out into SUMMARY (a LoadSummary)."""
        self.close()
        summary.rows, summary.duplicates = self.inserted, self.offered - self.inserted

    def drop(self) -> None:
        """`close` for a build being abandoned: a failure of the writer is not raised, as the one being handled is
        the one to report."""
        with contextlib.suppress(BaseException):
            self.close()

    def _run(self) -> None:
        while (rows := self._queue.get()) is not None:
            if self._error is None:
                try:
                    self.inserted += self._insert(rows)
                except BaseException as exc:  # noqa: BLE001 - handed to the loading thread
                    self._error = exc

    def _insert(self, rows: pa.Table) -> int:
        pages = self.pages
        if pages is None or not pages.streaming:
            return insert_trend(self._conn, rows, self._stats, clean=self._clean)
        before = pages.appended
        stop = pages.put(rows)
        if stop is None:
            return pages.appended - before
        pages.hand_over(self._conn, self._stats)
        return pages.appended - before + insert_trend(self._conn, rows.slice(stop), self._stats, clean=self._clean)

    def _raise(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error
