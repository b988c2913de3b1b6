"""The databases of one format's follower: each file it wrote, what it holds, and which file becomes which
database of the split of everything complete (trendconv.loading.split, docs/live.md §7).

The follower always holds the split a batch `trendconv run` with the same options makes of the units complete so
far. After each batch it divides them anew (`partition`), and pairs each database of that division with a file it
already has, so that a file grows in place, or is rebuilt in place, rather than replaced: by name first, then by
its first group of steps, then the files left over in name order. A file is renamed (the same inode, which an
open reader keeps) when its steps' range changed its name.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trendconv import shards
from trendconv.formats import Format
from trendconv.formats.contract import Appender
from trendconv.loading.split import Part


@dataclass
class Held:
    """A database the follower wrote: its path, its mark, the shards it took in order (name -> sources), the
    carry it was built with, and the appender that continues it."""

    path: Path
    mark: int
    taken: dict[str, list]
    carry: Any
    appender: Appender | None = None

    def close(self) -> None:
        if self.appender is not None:
            self.appender.close()
            self.appender = None


def first_group(fmt: Format, shard_list: list[shards.Shard]) -> tuple[int, int]:
    """The steps of the first group of SHARD_LIST: what names a database of a split."""
    return min((fmt.meta_steps(shard.meta) or (0, 0) for shard in shard_list), default=(0, 0))


def pair(fmt: Format, parts: list[Part], held: dict[str, Held], by_name: dict[str, shards.Shard]) -> list:
    """Each of PARTS with the file of HELD it becomes (or None: a new file), then the files that become none
    (held, None). BY_NAME: every shard HELD's files hold."""
    free = dict(sorted(held.items()))
    firsts = {name: first_group(fmt, [by_name[shard] for shard in one.taken]) for name, one in free.items()}
    chosen: dict[int, Held] = {}
    _choose(chosen, parts, free, lambda part, name: part.name == name)
    _choose(chosen, parts, free, lambda part, name: firsts[name] == first_group(fmt, part.shards))
    _choose(chosen, parts, free, lambda part, name: True)  # a file rebuilt in place rather than one removed
    return [(part, chosen.get(number)) for number, part in enumerate(parts)] + [(None, one) for one in free.values()]


def _choose(chosen: dict[int, Held], parts: list[Part], free: dict[str, Held], fits) -> None:
    """Each part without a file yet takes the first free file that FITS it."""
    for number, part in enumerate(parts):
        if number not in chosen:
            name = next((name for name in free if fits(part, name)), None)
            if name is not None:
                chosen[number] = free.pop(name)
