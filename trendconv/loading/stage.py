"""The load stage, format-blind: a format's builder fed its shards in processing order, the database complete at
its temporary path (`Builder.publish` moves it into place, trendconv.loading.build.publish_all several at once)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path

from trendconv import shards
from trendconv.formats import Builder, Format
from trendconv.summaries import LoadSummary


def stage_shards(
    fmt: Format,
    shard_list: list[shards.Shard],
    out_dir: Path,
    *,
    index: bool = True,
    on_shard: Callable[[shards.Shard], None] | None = None,
) -> Builder:
    """The builder of OUT_DIR/<fmt.db_name> fed SHARD_LIST (in processing order), sealed: the database is complete
    at its temporary path; `publish` moves it into place, `abort` drops it."""
    builder = fmt.builder(out_dir, index=index)
    try:
        if not fmt.streams:
            builder.plan([shard.meta for shard in shard_list])
        _add(builder, shard_list, on_shard)
        builder.seal()
    except BaseException:
        builder.abort()
        raise
    return builder


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
        """TASKS: the parse tasks (trendconv.parsing.ParseTask), each of which will be ready once."""
        self.order = [task.shard_path for task in sorted(tasks, key=lambda task: task.order)]

    def shard_ready(self, task, meta: dict) -> None:
        self.ready[task.shard_path] = meta
        if self.fmt.streams:
            self._feed()

    def finish(self) -> LoadSummary:
        """Feed the rest and seal the builder: the database is complete at its temporary path."""
        if not self.fmt.streams:
            started = time.perf_counter()
            self.builder.plan([self.ready[path] for path in self.order])
            self.seconds += time.perf_counter() - started
        self._feed()
        self.builder.seal()
        return self.builder.summary

    def _feed(self) -> None:
        started = time.perf_counter()
        while self.next < len(self.order) and self.order[self.next] in self.ready:
            path = self.order[self.next]
            _add(self.builder, [shards.Shard(path, self.ready.pop(path))], self.on_loaded)
            self.next += 1
        self.seconds += time.perf_counter() - started
