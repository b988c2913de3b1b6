"""Shards remembered by the load stage between reading their footers and loading their rows, kept small.

A split output is decided from every shard's footer before a database is built, and `run` keeps the shards it has
taken until the parse ends: with 100,000 tiny file sets, the footers as Python objects were most of the main
process's memory (about 2 kB each; benchmarks/RESULTS-scale.md). A `Packed` shard holds its meta as the JSON bytes
it came from (a quarter of that) and decodes it on each use; a builder gets the shard back whole (`unpacked`), one at
a time.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson

from trendconv import shards


@dataclass(frozen=True, slots=True)
class Packed:
    """A shard whose meta is kept as JSON bytes: `meta` is a fresh dict on each use, so read it once."""

    path: Path
    packed: bytes

    @property
    def meta(self) -> dict:
        return orjson.loads(self.packed)


def packed(shard: shards.Shard | Packed) -> Packed:
    if isinstance(shard, Packed):
        return shard
    # copied to a bytes object of its own size: orjson's own keeps the 4 kB it was written into
    return Packed(shard.path, bytes(memoryview(orjson.dumps(shard.meta))))


def unpacked(shard: shards.Shard | Packed) -> shards.Shard:
    if isinstance(shard, Packed):
        return shards.Shard(shard.path, shard.meta)
    return shard


def unpacked_all(shard_list: Iterable[shards.Shard | Packed]) -> Iterator[shards.Shard]:
    """Each shard whole, one at a time: only the one being loaded holds its meta as a dict."""
    return (unpacked(shard) for shard in shard_list)


class Metas(Sequence):
    """The metas of a list of shards, each decoded when asked for: what `Format.carry` and `Builder.plan` read
    without every meta being a dict at once."""

    def __init__(self, shard_list: Sequence[shards.Shard | Packed]):
        self._shards = shard_list

    def __len__(self) -> int:
        return len(self._shards)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [shard.meta for shard in self._shards[index]]
        return self._shards[index].meta
