"""What a parse worker does: one task is one unit of a format, turned into one shard."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from trendconv import __version__, shards
from trendconv.collector import paused, pausing
from trendconv.errors import TrendconvError, internal_error
from trendconv.faults import fault_point
from trendconv.formats import Format
from trendconv.options import ParseOptions


@dataclass(frozen=True, slots=True)
class ParseTask:
    """Slotted, its shard's path made when asked for: the main process holds a task for every unit of the run while
    it parses (100,000 monitor files and more)."""

    unit: object  # the format's unit (a dump file set, a monitor CSV file, ...)
    options: ParseOptions
    part: Path  # the format's part of WORK (trendconv.workdir)
    format: Format
    # the task's place in the plan (`Tasks`, in processing order): the main process keys what it keeps of a task
    # by this number rather than by its shard's path, which is ten times the size
    position: int = 0

    @property
    def shard_path(self) -> Path:
        return _shard_dir(self.part) / self.format.shard_name(self.unit)

    @property
    def shard_file(self) -> str:
        """`shard_path` as text, made without a Path."""
        return f"{_shard_dir_text(self.part)}/{self.format.shard_name(self.unit)}"


class Tasks(Sequence):
    """The plan's tasks, one per unit of UNITS (the scan's, in processing order), each made when it is asked for:
    a task is a hundred bytes, and the main process held one for every unit while it parsed (100,000 monitor files
    and more). A task's position is its index."""

    def __init__(self, units: Sequence, options: ParseOptions, part: Path, fmt: Format):
        self.units, self.options, self.part, self.format = units, options, part, fmt

    def __len__(self) -> int:
        return len(self.units)

    def __getitem__(self, position):
        if isinstance(position, slice):
            return [self[index] for index in range(*position.indices(len(self)))]
        if position < 0:
            position += len(self)
        return ParseTask(self.units[position], self.options, self.part, self.format, position)

    def __iter__(self) -> Iterator[ParseTask]:
        for position, unit in enumerate(self.units):
            yield ParseTask(unit, self.options, self.part, self.format, position)


_shard_dir = functools.lru_cache(maxsize=8)(shards.shard_dir)  # one part of WORK for thousands of tasks


@functools.lru_cache(maxsize=8)
def _shard_dir_text(part: Path) -> str:
    return str(_shard_dir(part))


def source_stats(task: ParseTask) -> list[dict]:
    """Each source file of the task's unit with its size and modification time (None when it cannot be read):
    a shard is reused only while these are unchanged."""
    stats = []
    for relative, path in task.format.sources(task.unit, task.options):
        try:
            stat = os.stat(path)
        except OSError:
            stats.append({"path": relative, "size": None, "mtime_ns": None})
            continue
        stats.append({"path": relative, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns})
    return stats


def parse_chunk(chunk: tuple[ParseTask, ...]) -> list[tuple[ParseTask, dict | None, BaseException | None]]:
    """Worker entry point: parse the tasks of a chunk in order; the first failure ends the chunk."""
    results = []
    for task in chunk:
        try:
            results.append((task, parse_task(task), None))
        except TrendconvError as exc:
            results.append((task, None, exc))
            break
        except Exception as exc:  # noqa: BLE001 - a bug: said so here, where its traceback is
            results.append((task, None, internal_error(exc, f"parsing {task.format.place(task.unit)}")))
            break
    return results


@pausing
def parse_task(task: ParseTask) -> dict:
    """Parse one unit, write its shard, return its (small) meta.

    The cyclic garbage collector is paused meanwhile (trendconv.collector): a parsed dump.json is millions of
    young containers that hold no cycles, and collecting them as they are made cost about a sixth of the parse time.
    """
    return _parse_task(task)


def _parse_task(task: ParseTask) -> dict:
    rows, meta = _rows_of(task)
    fault_point("parse-before-write")
    shards.write_shard(task.shard_path, task.format.table([rows]), meta)
    fault_point("parse-shard")
    return meta


def _rows_of(task: ParseTask) -> tuple[object, dict]:
    """The unit's rows (as its format's `parse` gives them) and the whole meta of its shard."""
    sources = source_stats(task)
    rows, meta_of_rows = task.format.parse(task.unit, task.options)
    meta = {
        "shard_format": shards.SHARD_FORMAT,
        "trendconv_version": __version__,
        "input_format": task.format.name,
        "options": task.options.record(),
        "sources": sources,
        **meta_of_rows,
    }
    return rows, meta


@dataclass(frozen=True)
class ChunkJob:
    """Tasks whose shards go into one chunk file (a format with `Format.chunked`)."""

    tasks: tuple[ParseTask, ...]
    path: Path  # the chunk file to write


def parse_together(job: ChunkJob) -> list[tuple[dict | None, BaseException | None]]:
    """Worker entry point: parse the tasks of JOB in order and write the shards of those parsed into one chunk
    file, so that the Parquet write and read are paid once per chunk; the first failure ends the job (the tasks
    before it are still written). A (meta, None) per task written, then (None, error) for a failure: the tasks
    themselves do not travel back, the caller has them (`job.tasks`, in the same order)."""
    with paused():  # as in parse_task
        parsed, failure = _parse_all(job.tasks)
        results = []
        if parsed:
            fault_point("parse-before-write")
            table = job.tasks[0].format.table([rows for rows, _ in parsed])
            metas = shards.write_chunk(job.path, table, [meta for _, meta in parsed])
            fault_point("parse-shard")
            results = [(meta, None) for meta in metas]
        return results + ([(None, failure)] if failure else [])


def _parse_all(tasks: tuple[ParseTask, ...]) -> tuple[list, BaseException | None]:
    parsed = []
    for task in tasks:
        try:
            parsed.append(_rows_of(task))
        except TrendconvError as exc:
            return parsed, exc
        except Exception as exc:  # noqa: BLE001 - a bug: said so here, where its traceback is
            return parsed, internal_error(exc, f"parsing {task.format.place(task.unit)}")
    return parsed, None
