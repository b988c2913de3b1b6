"""Freed memory given back to the system as the load goes, where the C library allows it (glibc's `malloc_trim`).

The loader's batches of rows (Arrow buffers from the system allocator, see `trendconv/__init__.py`) are freed in
an order other than the one they were made in, and glibc keeps the free space between live blocks: a `load` of
100,008 monitor files grew by some 30 MiB over its rows while its live memory (Python's, Arrow's, SQLite's) stayed
flat. Trimming once per ROWS rows (a few calls a second, each well under a millisecond) keeps it flat
(benchmarks/RESULTS-monitor.md, "Memory with the file count"). Elsewhere (no glibc) `trim` does nothing.
"""

from __future__ import annotations

import functools

ROWS = 65536


class Trimmer:
    """`add(rows)` per batch given to the writer; the heap is trimmed each time ROWS more have gone by."""

    def __init__(self, rows: int | None = None) -> None:
        self._every, self._since = rows or ROWS, 0

    def add(self, rows: int) -> None:
        self._since += rows
        if self._since >= self._every:
            self._since = 0
            trim()


def trim() -> None:
    """Give the C library's free heap memory back to the system, if it can."""
    function = _malloc_trim()
    if function is not None:
        function(0)


@functools.cache
def _malloc_trim():
    import ctypes  # only where a load runs: the command's start does not pay for it

    try:
        return ctypes.CDLL(None).malloc_trim  # this process's C library
    except (OSError, AttributeError):
        return None
