"""The parse stage: scan DATA for one format's units, then turn each unit into one shard, in parallel workers.

A shard whose sources and parse options are unchanged is reused, so an interrupted parse resumes where
it stopped. A manifest written last (`WORK/<format>/manifest.json`) says the set of shards is complete.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import os
import time
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import orjson

from trendconv import schemas, shards, workdir
from trendconv.collector import pausing
from trendconv.errors import TrendconvError, internal_error
from trendconv.executors import Executor, InlineExecutor, default_workers, local_executor
from trendconv.formats import Format, Scanned
from trendconv.options import ParseOptions
from trendconv.parsing.manifest import start_parse, write_manifest
from trendconv.parsing.reuse import (
    OK,
    chunks_of,
    foreign_warnings,
    present_shards,
    remove_orphans,
    status_of,
)
from trendconv.parsing.tasks import ChunkJob, ParseTask, Tasks, parse_chunk, parse_together, source_stats
from trendconv.scan.packed import packed
from trendconv.summaries import ParseSummary

CHUNK_BYTES, CHUNK_TASKS = 2 * 1024 * 1024, 64
# A chunked format's units per chunk file: a Parquet file's fixed costs are then small per unit, and a resume
# that re-reads one changed file rewrites only its own small chunk.
CHUNK_UNITS = 256


def plan(data: Path, work: Path, options: ParseOptions, fmt: Format) -> tuple[Scanned, Tasks]:
    """Scan DATA for FMT's units (those OPTIONS select): one task each, in processing order (`Format.order`; a
    scan gives its units in that order, and one that does not has them sorted here)."""
    scanned = fmt.scan(data, options.selection) if options.selection else fmt.scan(data)
    if not _in_order(scanned.units, fmt):
        scanned.units = sorted(scanned.units, key=fmt.order)
    # held packed while the parse runs (trendconv.scan.packed): 100,000 units as objects were ~15 MiB
    scanned.units = packed(scanned.units)
    return scanned, Tasks(scanned.units, options, workdir.part(work, fmt), fmt)


def _in_order(units: list, fmt: Format) -> bool:
    keys = map(fmt.order, units)
    last = next(keys, None)
    for key in keys:
        if key < last:
            return False
        last = key
    return True


@pausing  # many long-lived objects, few cycles: trendconv.collector
def run_parse(
    data: Path,
    work: Path,
    options: ParseOptions,
    fmt: Format,
    *,
    workers: int | None = None,
    executor: Executor | None = None,
    on_shard: Callable[[ParseTask, dict, bool], None] | None = None,
    on_plan: Callable[[Tasks], None] | None = None,
) -> ParseSummary:
    """Parse FMT's data in DATA into WORK (which the caller holds locked).

    `on_plan(tasks)` is called once the scan is done (TASKS in processing order, a task's position its index),
    `on_shard(task, meta, reused)` as each shard is ready (reused shards first, then parsed ones as workers finish
    them).
    """
    started = time.perf_counter()
    scanned, tasks = plan(data, work, options, fmt)
    part = workdir.part(work, fmt)
    summary = ParseSummary(fmt.name, files=len(tasks), warnings=list(scanned.warnings), shard_dir=part / "shards")
    summary.skipped_files = scanned.skipped_files
    summary.selection, summary.left_out = str(options.selection) if options.selection else None, scanned.left_out
    summary.scan_seconds = time.perf_counter() - started
    if on_plan:
        on_plan(tasks)
    workdir.move_old_part(work, fmt)
    start_parse(data, part, options, fmt)
    chunks = chunks_of(part, fmt) if fmt.chunked else None
    present = present_shards(part)
    located: list[str | None] | None = None if chunks is None else [None] * len(tasks)
    take = functools.partial(_taken, summary, located, on_shard=on_shard, reused=True)
    todo, used = _reuse(tasks, chunks, present, take)
    summary.removed_orphans, foreign = remove_orphans(part, tasks.units, fmt, options.selection, chunks, used)
    summary.warnings += foreign_warnings(part, foreign)
    # what the chunk footers said is used now; only the names of the chunk files are needed further on
    held = None if chunks is None else set(chunks.paths)
    del chunks, used
    sizes = array("q", map(_size, todo))  # each file looked at once: thousands of small files a second
    executor = executor or local_executor(_workers_for(workers, len(todo)), sum(sizes))
    # closed at once on any failure, so that the workers stop now rather than when the exception is gone
    with contextlib.closing(_results(executor, todo, sizes, held)) as results:
        for task, meta in results:
            _taken(summary, located, task, meta, on_shard, reused=False)
    del todo, sizes, results  # what the manifest does not need: a run of many files peaks while it is written
    write_manifest(part, options, tasks.units, fmt, located)
    return summary


def _reuse(tasks: Tasks, chunks, present, take) -> tuple[Sequence[ParseTask], set[Path] | None]:
    """TAKE(task, meta) each task whose shard is good as it is found (`status_of`): its meta is not kept here, where
    there may be 100,000 (~2.5 kB a dump file set). The tasks to parse, and the files that hold the good shards of a
    chunked format (CHUNKS). A WORK without shards has none to look at: every task is to parse."""
    todo, used = _Todo(tasks), None if chunks is None else set()
    if present is not None and not present and (chunks is None or not (chunks.paths or chunks.damaged)):
        return tasks, used
    for task in tasks:
        status, meta = status_of(task, chunks=chunks, present=present)
        if status != OK:
            todo.append(task)
            continue
        if used is not None:  # as text: a Path a unit cost more than the rest of its look
            used.add(meta.get("chunk") or task.shard_file)
        take(task, meta)
    return todo, None if used is None else set(map(Path, used))


class _Todo(Sequence):
    """The tasks to parse, of TASKS (the plan's), kept as their positions: every task of a run whose sources or
    options all changed would otherwise be an object here (~250 bytes with its unit) while the parse runs."""

    def __init__(self, tasks: Tasks) -> None:
        self._tasks, self._positions = tasks, array("q")

    def append(self, task: ParseTask) -> None:
        self._positions.append(task.position)

    def __len__(self) -> int:
        return len(self._positions)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self._tasks[position] for position in self._positions[index]]
        return self._tasks[self._positions[index]]

    def __iter__(self) -> Iterator[ParseTask]:
        return map(self._tasks.__getitem__, self._positions)


def _taken(summary: ParseSummary, located: list | None, task: ParseTask, meta: dict, on_shard, *, reused: bool) -> None:
    """A unit's shard is ready: counted, its chunk file (if any) noted for the manifest, and told of."""
    _count(summary, meta, reused=reused)
    if located is not None and "chunk" in meta:
        located[task.position] = meta["chunk"]
    if on_shard:
        on_shard(task, meta, reused)


def _size(task: ParseTask) -> int:
    """The task's input in bytes: with little input to parse, one process is faster than a pool."""
    known = task.format.size(task.unit)
    if known is not None:
        return known
    return sum(source["size"] or 0 for source in source_stats(task))


def _workers_for(workers: int | None, todo: int) -> int:
    return workers if workers is not None else default_workers(todo)


def _results(
    executor: Executor, todo: Sequence[ParseTask], sizes: Sequence[int], held: set[Path] | None
) -> Iterator[tuple[ParseTask, dict]]:
    # The jobs are made as the executor takes them: a task per unit is made only while it is in flight.
    if held is not None:
        outcomes = executor.imap_unordered(parse_together, chunk_jobs(todo, held, sizes))
    else:
        # In-process there is no transfer to save, and one task at a time lets `run` load while parsing.
        most = 1 if isinstance(executor, InlineExecutor) else CHUNK_TASKS
        outcomes = executor.imap_unordered(parse_chunk, chunks(todo, most, sizes))
    try:
        for outcome in outcomes:
            if outcome.error is not None:
                raise _task_failure(outcome.task, outcome.error)
            results = outcome.value
            if held is not None:  # a job's results come without their tasks, in the order of its tasks
                results = [(task, *result) for task, result in zip(outcome.task.tasks, results)]
            for task, meta, error in results:
                if error is not None:
                    raise _task_failure(task, error)
                yield task, meta
    finally:
        outcomes.close()


def chunks(
    tasks: Iterable[ParseTask], most: int = CHUNK_TASKS, sizes: Sequence[int] | None = None
) -> Iterator[tuple[ParseTask, ...]]:
    """Tasks in groups of about CHUNK_BYTES of input (at most MOST tasks): small monitor CSV files then
    travel to a worker many at a time, while a dump file set (megabytes) still goes alone."""
    chunk: list[ParseTask] = []
    size = 0
    for index, task in enumerate(tasks):
        chunk.append(task)
        size += _size(task) if sizes is None else sizes[index]
        if size >= CHUNK_BYTES or len(chunk) >= most:
            yield tuple(chunk)
            chunk, size = [], 0
    if chunk:
        yield tuple(chunk)


def chunk_jobs(todo: Iterable[ParseTask], held: set[Path], sizes: Sequence[int] | None = None) -> Iterator[ChunkJob]:
    """The tasks in chunks (as `chunks` groups them), each with the chunk file its shards go to: named by a digest
    of its units and options, never the name of a file trendconv did not write (see `_free_path`)."""
    taken: set[Path] = set()
    for group in chunks(todo, CHUNK_UNITS, sizes):
        digest = hashlib.sha256(orjson.dumps([group[0].options.record(), *(task.shard_file for task in group)]))
        path = _free_path(group[0], digest.hexdigest()[:24], held, taken)
        taken.add(path)
        yield ChunkJob(group, path)


def _free_path(task: ParseTask, stem: str, held: set[Path], taken: set[Path]) -> Path:
    """A chunk path for new shards: the file there, if any, is a chunk trendconv wrote whose units are all
    being parsed again (a chunk holds the same units only under the same name)."""
    directory = shards.shard_dir(task.part)
    for suffix in itertools.count():
        path = shards.chunk_path(directory, f"{stem}{f'-{suffix}' if suffix else ''}{schemas.SHARD_SUFFIX}")
        if path not in taken and (path in held or not os.path.lexists(path)):
            return path
    raise AssertionError("unreachable")


def _task_failure(task: ParseTask, error: BaseException) -> TrendconvError:
    """What a failed task means: its own error (a TrendconvError, made in the worker: see parse_chunk), or else
    a failure of the workers themselves (a pool that broke, a result that could not travel), which is no
    task's fault: it does not name TASK's files."""
    if isinstance(error, TrendconvError):
        return error
    return internal_error(error, "running the parse workers")


def _count(summary: ParseSummary, meta: dict, *, reused: bool) -> None:
    if reused:
        summary.reused += 1
    else:
        summary.parsed += 1
    summary.rows += meta["rows"]
    if meta["skipped"]:  # mostly empty: a Counter's update of nothing still cost ~4 µs a file
        summary.skipped.update(meta["skipped"])
