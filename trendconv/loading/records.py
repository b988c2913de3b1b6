"""Shards remembered by the load stage between reading their footers and loading their rows, kept small.

A split output is decided from every shard's footer before a database is built, and `run` keeps the shards it has
taken until the parse ends: with 100,000 tiny file sets, the footers as Python objects were most of the main
process's memory (about 2 kB each; benchmarks/RESULTS-scale.md). A `ShardList` keeps shards in order as compressed
blocks of their paths and metas (some 40 bytes a tiny shard, as the metas of a run are much alike) and gives them
back whole one block at a time; a `Packed` shard holds its meta as JSON bytes (a quarter of the dict).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson

from trendconv import shards
from trendconv.blocks import JsonList


@dataclass(frozen=True, slots=True)
class Packed:
    """A shard whose meta is kept as JSON bytes and its path as text (a Path object is some 400 bytes): `path` and
    `meta` are new objects on each use, so read them once."""

    where: str
    packed: bytes

    @property
    def path(self) -> Path:
        return Path(self.where)

    @property
    def text(self) -> str:
        return self.where

    @property
    def meta(self) -> dict:
        return orjson.loads(self.packed)


def packed(shard: shards.Shard | Packed) -> Packed:
    if isinstance(shard, Packed):
        return shard
    # copied to a bytes object of its own size: orjson's own keeps the 4 kB it was written into
    return Packed(shard.text, bytes(memoryview(orjson.dumps(shard.meta))))


def unpacked(shard: shards.Shard | Packed) -> shards.Shard:
    if isinstance(shard, Packed):
        return shards.Shard(shard.where, shard.meta)
    return shard


def in_order(shard_list: Iterable[shards.Shard], key: Callable[[dict], tuple]) -> Sequence:
    """SHARD_LIST in processing order (KEY of a meta), kept small: a ShardList while the shards come in that order,
    as a manifest lists them; else each packed, then sorted (stably, as `sorted` would sort them whole)."""
    kept, last = ShardList(), None
    shard_iterator = iter(shard_list)
    for shard in shard_iterator:
        order = key(shard.meta)
        if last is not None and order < last:
            rest = [*map(packed, kept), packed(shard), *map(packed, shard_iterator)]
            return sorted(rest, key=lambda item: key(item.meta))
        kept.append(shard)
        last = order
    kept.close()
    return kept


class Metas(Sequence):
    """The metas of a list of shards, each decoded when asked for: what `Format.carry` reads without every meta
    being a dict at once."""

    def __init__(self, shard_list: Sequence[shards.Shard | Packed]):
        self._shards = shard_list

    def __len__(self) -> int:
        return len(self._shards)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [shard.meta for shard in self._shards[index]]
        return self._shards[index].meta

    def __iter__(self) -> Iterator[dict]:
        return metas_of(self._shards)


def metas_of(shard_list: Iterable) -> Iterator[dict]:
    """The metas of SHARD_LIST in order, each decoded once; of a ShardList without making each shard's Path."""
    if isinstance(shard_list, ShardList):
        return shard_list.metas()
    return (shard.meta for shard in shard_list)


class ShardList(JsonList):
    """Shards in order (trendconv.blocks.JsonList): `append` and `extend` take shards (whole or packed),
    indexing and iteration give them whole (a new Shard each time). Blocks of 256 paths and metas as JSON (some 45
    bytes a tiny shard, the metas of a run being much alike).

    With SPILL (a directory), the blocks wait in an unnamed file there: `run` keeps every shard it has taken until
    the parse ends, and even compressed, 48 bytes a monitor file were the most the main process held per file."""

    def __init__(self, shard_list: Iterable = (), *, spill: Path | None = None) -> None:
        super().__init__(shard_list, spill=spill, prefix=".trendconv-taken-")

    def _stored(self, shard: shards.Shard | Packed) -> tuple[str, dict]:
        # the path's bytes as latin-1 text: any byte a file name may hold survives the JSON
        return (os.fsencode(shard.text).decode("latin-1"), shard.meta)

    def _item(self, stored: list) -> shards.Shard:
        return _whole(stored)

    def metas(self) -> Iterator[dict]:
        """The shards' metas alone, in order: a pass that needs no path makes none (a Path per shard costs more
        than the pass)."""
        for block in range(len(self._blocks) + 1):
            for _, meta in self._block(block):
                yield meta


def _whole(item) -> shards.Shard:
    path, meta = item
    return shards.Shard(os.fsdecode(path.encode("latin-1")), meta)
