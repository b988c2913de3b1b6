"""Blocks of bytes kept in an unnamed temporary file rather than in memory: what the main process would otherwise
hold per input file while the parse runs (the metas of the shards `run` has taken, those of an earlier parse's
chunks), so that its memory does not grow with the file count (benchmarks/RESULTS-monitor.md).

The file is made in a directory of WORK (the user's disk, where the shards go; a temporary directory may be memory)
and has no name there (O_TMPFILE, or made and unlinked at once): it goes with the process, however that ends.
"""

from __future__ import annotations

import os
import tempfile
from array import array
from collections.abc import Iterator
from pathlib import Path

from trendconv.errors import cannot_write


class SpilledBlocks:
    """A list of bytes blocks that `append` writes to an unnamed temporary file in DIRECTORY (made at the first
    block); only where each block ends is in memory. Indexing reads a block back."""

    def __init__(self, directory: Path, prefix: str = ".trendconv-") -> None:
        self._directory, self._prefix = directory, prefix
        self._file = None
        self._ends = array("q")

    def append(self, block: bytes) -> None:
        try:
            if self._file is None:
                self._file = tempfile.TemporaryFile(buffering=0, prefix=self._prefix, dir=self._directory)
            self._file.seek(0, os.SEEK_END)
            self._file.write(block)
            self._ends.append(self._file.tell())
        except OSError as exc:  # named by the directory: the file's own name, if it has one, is a random one
            raise cannot_write(self._directory, OSError(exc.errno, exc.strerror)) from None

    def __len__(self) -> int:
        return len(self._ends)

    def __getitem__(self, number: int) -> bytes:
        start = self._ends[number - 1] if number else 0
        self._file.seek(start)
        return self._file.read(self._ends[number] - start)

    def __iter__(self) -> Iterator[bytes]:
        return map(self.__getitem__, range(len(self)))
