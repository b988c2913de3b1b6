"""The load stage, format-blind: a format's builder fed its shards in processing order."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path

from trendconv import shards
from trendconv.formats import Builder, Format
from trendconv.summaries import LoadSummary


def load_shards(
    fmt: Format,
    shard_list: list[shards.Shard],
    out_dir: Path,
    *,
    index: bool = True,
    on_shard: Callable[[shards.Shard], None] | None = None,
) -> LoadSummary:
    """OUT_DIR/<fmt.db_name> from SHARD_LIST (in processing order), replacing the database in place only when
    complete."""
    builder = fmt.builder(out_dir, index=index)
    try:
        if not fmt.streams:
            builder.plan([shard.meta for shard in shard_list])
        _add(builder, shard_list, on_shard)
        return builder.finish()
    except BaseException:
        builder.abort()
        raise


def _add(builder: Builder, shard_list: Iterable[shards.Shard], on_shard) -> None:
    for shard in shard_list:
        builder.add(shard)
        if on_shard:
            on_shard(shard)


class Feeder:
    """Feeds a builder the shards of a running parse, which come ready in any order, in processing order: a
    streaming format's shard as soon as it and all before it are ready, any other format's once all are.
    `seconds`: the time spent feeding."""

    def __init__(self, fmt: Format, builder: Builder, on_loaded: Callable[[shards.Shard], None] | None):
        self.fmt, self.builder, self.on_loaded = fmt, builder, on_loaded
        self.order: list[Path] = []
        self.ready: dict[Path, dict] = {}
        self.next = 0
        self.seconds = 0.0

    def plan(self, tasks: list) -> None:
        """TASKS: the parse tasks (trendconv.parse.ParseTask), each of which will be ready once."""
        self.order = [task.shard_path for task in sorted(tasks, key=lambda task: task.order)]

    def shard_ready(self, task, meta: dict) -> None:
        self.ready[task.shard_path] = meta
        if self.fmt.streams:
            self._feed()

    def finish(self) -> LoadSummary:
        if not self.fmt.streams:
            started = time.perf_counter()
            self.builder.plan([self.ready[path] for path in self.order])
            self.seconds += time.perf_counter() - started
        self._feed()
        return self.builder.finish()

    def _feed(self) -> None:
        started = time.perf_counter()
        while self.next < len(self.order) and self.order[self.next] in self.ready:
            path = self.order[self.next]
            _add(self.builder, [shards.Shard(path, self.ready.pop(path))], self.on_loaded)
            self.next += 1
        self.seconds += time.perf_counter() - started
