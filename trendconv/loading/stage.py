"""The load stage, format-blind: a format's shards, in processing order, into its database, or into the several
databases of a split output (trendconv.loading.split), complete at their temporary paths. `publish_all`
(trendconv.loading.build) then moves every database of every format into place, and `OutputSet.published`
removes what the previous output left that the new one does not have (trendconv.loading.outputs)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from trendconv import shards
from trendconv.collector import pausing
from trendconv.executors import Executor, default_workers
from trendconv.formats import Builder, Format
from trendconv.loading.build import add_shards, stage_shards
from trendconv.loading.outputs import replace_set
from trendconv.loading.parts import build_parts, check_size, combined, jobs_of
from trendconv.loading.records import Metas, Packed, ShardList, packed, unpacked
from trendconv.loading.split import Census, Part, Partitioner, Split, db_stem, partition
from trendconv.summaries import LoadSummary

UNSPLIT = Split()


class OutputSet:
    """One format's output, sealed: one database, or those of a split. `builders` are what `publish_all` moves
    into place (and `abort` drops); `summary` is complete once `published` ran."""

    def __init__(self, fmt: Format, out_dir: Path, split: Split, builders: list):
        self.fmt, self.out_dir, self.split, self.builders = fmt, out_dir, split, builders
        self.summary: LoadSummary = builders[0].summary if len(builders) == 1 else combined(builders)

    @property
    def output(self) -> Path:
        """The unsplit database's path, which names the output (trendconv.loading.outputs.writing)."""
        return self.out_dir / db_stem(self.fmt, self.split)

    def abort(self) -> None:
        for builder in self.builders:
            builder.abort()

    def published(self) -> None:
        """The databases are in place: sizes, and the previous output's files that are not the new ones."""
        if self.summary.parts:
            self.summary.size = sum(part.size for part in self.summary.parts)
        names = [builder.final.name for builder in self.builders]
        self.summary.warnings.extend(replace_set(self.out_dir, self.output.name, names))


@pausing  # many long-lived objects, few cycles: trendconv.collector
def stage_output(
    fmt: Format,
    shard_list: list[shards.Shard],
    out_dir: Path,
    split: Split = UNSPLIT,
    *,
    index: bool = True,
    on_shard: Callable[[shards.Shard], None] | None = None,
    executor: Executor | None = None,
    census: Census | None = None,
) -> OutputSet:
    """SHARD_LIST (in processing order) into one database, or into the databases of a split, built by
    `split.load_workers` loader processes (or on EXECUTOR); CENSUS: of SHARD_LIST, where it was counted already."""
    parts = partition(fmt, shard_list, split, census)
    if len(parts) == 1:
        builder = stage_shards(fmt, shard_list, out_dir, index=index, on_shard=on_shard, name=parts[0].name)
        return OutputSet(fmt, out_dir, split, [_checked(builder, split)])
    return OutputSet(fmt, out_dir, split, _build(fmt, parts, shard_list, out_dir, split, index, on_shard, executor))


def _checked(builder: Builder, split: Split) -> Builder:
    try:
        check_size(builder.tmp, builder.final, split.max_size)
    except BaseException:
        builder.abort()
        raise
    return builder


def _build(fmt, parts: list[Part], shard_list, out_dir, split, index, on_shard, executor) -> list:
    """The databases of PARTS, at the same time; their global steps from every shard (`Format.carry`)."""
    carry = fmt.carry(Metas(shard_list))
    jobs = jobs_of(fmt, parts, carry, out_dir, index=index, max_size=split.max_size)

    def built(part) -> None:
        for _ in range(part.summary.shards):
            if on_shard:
                on_shard(None)

    workers = split.load_workers or default_workers(len(jobs))
    return build_parts(jobs, workers=workers, executor=executor, on_part=built)


class Feeder:
    """Feeds the load stage the shards of a running parse, which come ready in any order, in processing order.

    A streaming format's shards go to a builder in this process as soon as they and all before them are ready,
    one group (`Format.meta_steps`) at a time, since the split decides by whole groups: while the output is one
    database, `run` loads as it parses. Once a split starts a second database, that first one is completed, and the
    rest wait for the end of the parse, to be built at the same time by the loader processes. With `--split-steps`,
    or for a format that needs every shard's meta first, everything waits for the end of the parse.
    `seconds`: the time spent loading in this process before the end of the parse."""

    def __init__(self, fmt: Format, out_dir: Path, split: Split, *, index: bool, on_loaded, executor=None):
        self.fmt, self.out_dir, self.split, self.index = fmt, out_dir, split, index
        self.on_loaded, self.executor = on_loaded, executor
        self.count = 0  # of the plan's tasks, whose positions (`ParseTask.position`) are their processing order
        # parsed, not yet taken (a shard before it is not ready, or the load is behind), by position: packed meanwhile
        self.ready: dict[int, Packed] = {}
        self.next = 0
        self.seconds = 0.0
        self.done = ShardList()  # every shard, in processing order, as it was taken (trendconv.loading.records)
        self.census = Census()  # of `done`
        self.partitioner = Partitioner(fmt, split)
        self.group: tuple[tuple[int, int], list[shards.Shard]] | None = None
        self.streaming = fmt.streams and split.steps is None
        self.builder: Builder | None = None  # the first database, loaded while parsing

    def plan(self, tasks) -> None:
        """TASKS: the parse tasks (trendconv.parsing.Tasks, in processing order), each of which will be ready once."""
        self.count = len(tasks)
        # what is taken waits on disk, beside the shards, until the parse ends (trendconv.loading.records)
        self.done = ShardList(spill=shards.shard_dir(tasks.part))

    def shard_ready(self, task, meta: dict) -> None:
        shard = shards.Shard(task.shard_file, meta)
        # The next in order is taken at once (a chunk's units come in order); the others wait packed.
        self.ready[task.position] = shard if self._next_is(task.position) else packed(shard)
        # For a format that is not streamed too: the shards then wait in `done`, in compressed blocks, rather than
        # each packed on its own (~700 bytes a monitor file).
        self._take()

    def _next_is(self, position: int) -> bool:
        return position == self.next < self.count

    def abort(self) -> None:
        if self.builder is not None:
            self.builder.abort()

    def finish(self) -> OutputSet:
        """Take the rest, and complete every database at its temporary path."""
        self._take()
        self._close_group()
        if not self.fmt.streams or self.builder is None:
            return stage_output(
                self.fmt,
                self.done,
                self.out_dir,
                self.split,
                index=self.index,
                on_shard=self.on_loaded,
                executor=self.executor,
                census=self.census,
            )
        parts = self.partitioner.named()
        if self.streaming:
            self._seal_first()
        first = self.builder
        first.final = self.out_dir / parts[0].name
        if len(parts) == 1:
            return OutputSet(self.fmt, self.out_dir, self.split, [first])
        try:
            rest = _build(
                self.fmt, parts[1:], self.done, self.out_dir, self.split, self.index, self.on_loaded, self.executor
            )
        except BaseException:
            first.abort()
            raise
        return OutputSet(self.fmt, self.out_dir, self.split, [first, *rest])

    def _take(self) -> None:
        started = time.perf_counter()
        while self.next < self.count and self.next in self.ready:
            shard = unpacked(self.ready.pop(self.next))
            self.done.append(shard)
            steps = self.census.add(self.fmt, shard.meta)
            self.next += 1
            if self.fmt.streams:
                self._group_of(shard, steps)
        if self.fmt.streams:  # loading; otherwise keeping the parse's shards in order
            self.seconds += time.perf_counter() - started

    def _group_of(self, shard: shards.Shard, steps: tuple[int, int]) -> None:
        if self.group is not None and self.group[0] != steps:
            self._close_group()
        if self.group is None:
            self.group = (steps, [])
        self.group[1].append(shard)

    def _close_group(self) -> None:
        """A whole group is ready: it goes to the first database while the output is one, else it waits."""
        if self.group is None:
            return
        steps, members = self.group
        self.group = None
        starts = self.partitioner.add(steps, members)
        if not self.streaming:
            return
        if starts and self.builder is not None:  # a second database: the first is complete, indexed meanwhile
            self.streaming = False
            self._seal_first()
            return
        if self.builder is None:
            self.builder = self.fmt.builder(self.out_dir, index=self.index, name=db_stem(self.fmt, self.split))
        add_shards(self.builder, members, self.on_loaded)

    def _seal_first(self) -> None:
        """The first database, loaded while parsing, is complete (its name is decided with the others'). Its time
        counts as that of the `_take` it is sealed in, or as the load's after the parse (`finish`): not twice."""
        try:
            self.builder.seal()
        except BaseException:
            self.builder.abort()
            raise
        _checked(self.builder, self.split)
