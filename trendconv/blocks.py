"""Sequences the main process keeps for every input file while the parse runs, kept small: items in order as
LZ4-compressed blocks (`CompressedList`), the blocks in memory or, spilled, in an unnamed temporary file
(`SpilledBlocks`). With 100,000 monitor files and more, a Python object a file (a unit, a shard's meta) made the main
process's memory grow with the file count (benchmarks/RESULTS-monitor.md).

A spilled list's file is made in a directory of WORK (the user's disk, where the shards go; a temporary directory
may be memory) and has no name there (O_TMPFILE, or made and unlinked at once): it goes with the process, however
that ends.
"""

from __future__ import annotations

import bisect
import os
import tempfile
from array import array
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import orjson

from trendconv.errors import cannot_write

# LZ4: 100,000 files' metas are some 70 MB of JSON, kept at 1/16 of that; zlib (at level 1) kept 1/22, but took
# 7% of the main process's time in `run` on 18,000 monitor files (sampled), six times what LZ4 takes.
CODEC = "lz4"


class CompressedList(Sequence):
    """Items in order, kept as compressed blocks of up to BLOCK items: `append` and `extend` take items, indexing
    and iteration give them back (equal, new objects), a block decoded once for a pass in order. `close` compresses
    the items not yet in a block (a list that will not grow soon). With SPILL (a directory), the blocks go to an
    unnamed file there (`SpilledBlocks`, named PREFIX while it has a name). Pickled with its blocks in memory.

    A subclass says how a block of items is stored: `_encode` and `_decode` (a list of stored items to bytes and
    back), `_stored` and `_item` (an item as it is stored, and as it is given back)."""

    BLOCK = 256

    def __init__(self, items: Iterable = (), *, spill: Path | None = None, prefix: str = ".trendconv-") -> None:
        self._blocks: list[bytes] | SpilledBlocks = [] if spill is None else SpilledBlocks(spill, prefix)
        self._sizes: list[int] = []  # of each block before compression
        self._ends: list[int] = []  # the number of items up to the end of each block
        self._tail: list = []  # stored items not in a block yet
        self._decoded: tuple[int, list] = (-1, [])
        self.extend(items)

    def _encode(self, stored: list) -> bytes:
        raise NotImplementedError

    def _decode(self, document: bytes) -> list:
        raise NotImplementedError

    def _stored(self, item):
        return item

    def _item(self, stored):
        return stored

    def append(self, item) -> None:
        self._tail.append(self._stored(item))
        if len(self._tail) == self.BLOCK:
            self.close()

    def extend(self, items: Iterable) -> None:
        for item in items:
            self.append(item)
        self.close()

    def close(self) -> None:
        if self._tail:
            import pyarrow as pa  # the parse and the load have it imported; `trendconv --version` has not

            end = len(self)
            document = self._encode(self._tail)
            self._blocks.append(pa.compress(document, codec=CODEC, asbytes=True))
            self._sizes.append(len(document))
            self._ends.append(end)
            self._tail = []

    def __len__(self) -> int:
        return (self._ends[-1] if self._ends else 0) + len(self._tail)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[number] for number in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        block = bisect.bisect_right(self._ends, index)
        start = self._ends[block - 1] if block else 0
        return self._item(self._block(block)[index - start])

    def __iter__(self) -> Iterator:
        for block in range(len(self._blocks) + 1):
            yield from map(self._item, self._block(block))

    def _block(self, number: int) -> list:
        """Block NUMBER's stored items (the items not yet in a block after the last one)."""
        if number == len(self._blocks):
            return self._tail
        if self._decoded[0] != number:
            import pyarrow as pa

            document = pa.decompress(self._blocks[number], self._sizes[number], codec=CODEC, asbytes=True)
            self._decoded = (number, self._decode(document))
        return self._decoded[1]

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_blocks": list(self._blocks), "_decoded": (-1, [])}


class JsonList(CompressedList):
    """A CompressedList of JSON values, each block one JSON array (orjson)."""

    _encode = staticmethod(orjson.dumps)
    _decode = staticmethod(orjson.loads)


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
