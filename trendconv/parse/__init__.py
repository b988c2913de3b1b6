"""The parse stage: scan DATA, then turn each unit of input into one shard, in parallel workers.

A unit is a (step, rank) file set of dump data or one monitor CSV file (see trendconv.parse.formats).

A shard whose sources and parse options are unchanged is reused, so an interrupted parse resumes where
it stopped. A manifest written last (`WORK/manifest.json`) says the set of shards is complete.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from trendconv import __version__, shards, workdir
from trendconv.dump.parse import ParseOptions
from trendconv.errors import DataError, TrendconvError, cannot_write, internal_error, plural
from trendconv.executors import Executor, InlineExecutor, default_workers, local_executor
from trendconv.faults import fault_point
from trendconv.parse.formats import DUMP, FORMATS, Scanned
from trendconv.scan import FileSet
from trendconv.scan.monitor import CsvFile

OK, STALE, CORRUPT, MISSING = "ok", "stale", "corrupt", "missing"
CHUNK_BYTES, CHUNK_TASKS = 2 * 1024 * 1024, 64


@dataclass(frozen=True)
class ParseTask:
    unit: FileSet | CsvFile  # a dump file set or a monitor CSV file
    options: ParseOptions
    work: Path  # the format's part of WORK
    input_format: str = DUMP

    @property
    def format(self):
        return FORMATS[self.input_format]

    @property
    def shard_path(self) -> Path:
        return self.format.shard_path(self.work, self.unit)

    @property
    def order(self) -> tuple:
        return self.format.order(self.unit)


@dataclass
class ParseSummary:
    input_format: str = DUMP
    files: int = 0
    parsed: int = 0
    reused: int = 0
    rows: int = 0
    skipped: Counter = field(default_factory=Counter)
    skipped_files: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    removed_orphans: int = 0
    scan_seconds: float = 0.0


def describe_sources(task: ParseTask) -> list[dict]:
    described = []
    for relative, path in task.format.sources(task.unit, task.options.micro_step):
        try:
            stat = path.stat()
        except OSError:
            described.append({"path": relative, "size": None, "mtime_ns": None})
            continue
        described.append({"path": relative, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns})
    return described


def parse_task(task: ParseTask) -> dict:
    """Worker entry point: parse one unit, write its shard, return its (small) metadata.

    The cyclic garbage collector is paused meanwhile: a parsed dump.json is millions of young containers
    that hold no cycles, and collecting them as they are made cost about a sixth of the parse time.
    """
    paused = gc.isenabled()
    gc.disable()
    try:
        return _parse_task(task)
    finally:
        if paused:
            gc.enable()


def _parse_task(task: ParseTask) -> dict:
    sources = describe_sources(task)
    table, described = task.format.parse(task.unit, task.options)
    meta = {
        "shard_format": shards.SHARD_FORMAT,
        "trendconv_version": __version__,
        "input_format": task.input_format,
        "options": task.options.describe(),
        "sources": sources,
        **described,
    }
    fault_point("parse-before-write")
    shards.write_shard(task.shard_path, table, meta)
    fault_point("parse-shard")
    return meta


def status_of(task: ParseTask, described: dict | None = None) -> tuple[str, dict | None]:
    """ok (reusable), stale (sources, options or shard format changed), corrupt (not a valid shard of the
    task's unit) or missing.

    DESCRIBED stands in for the task's `options.describe()` where only that document is known (inspect).
    """
    path = task.shard_path
    if not path.is_file():
        return MISSING, None
    try:
        meta = shards.read_meta(path, task.input_format)
    except shards.OtherShardFormat:
        return STALE, None
    except DataError:
        return CORRUPT, None
    if any(meta[key] != value for key, value in task.format.identity(task.unit).items()):
        return CORRUPT, None  # a valid footer of another unit: the file was moved or edited
    fresh = meta["options"] == (described or task.options.describe()) and meta["sources"] == describe_sources(task)
    return (OK if fresh else STALE), meta


def plan(data: Path, work: Path, options: ParseOptions, input_format: str = DUMP) -> tuple[Scanned, list[ParseTask]]:
    fmt = FORMATS[input_format]
    scanned = fmt.scan(data)
    tasks = [ParseTask(unit, options, fmt.work_dir(work), input_format) for unit in scanned.units]
    return scanned, tasks


def run_parse(
    data: Path,
    work: Path,
    options: ParseOptions,
    *,
    workers: int | None = None,
    executor: Executor | None = None,
    on_shard: Callable[[ParseTask, dict, bool], None] | None = None,
    on_plan: Callable[[list[ParseTask]], None] | None = None,
    input_format: str = DUMP,
) -> ParseSummary:
    """Parse the INPUT_FORMAT data of DATA into WORK.

    `on_plan(tasks)` is called once the scan is done, `on_shard(task, meta, reused)` as each shard is
    ready (reused shards first, then parsed ones as workers finish them).
    """
    started = time.perf_counter()
    scanned, tasks = plan(data, work, options, input_format)
    summary = ParseSummary(input_format, files=len(tasks), warnings=list(scanned.warnings))
    summary.skipped_files = scanned.skipped_files
    work = FORMATS[input_format].work_dir(work)
    summary.scan_seconds = time.perf_counter() - started
    if on_plan:
        on_plan(tasks)
    _start_work(data, work, options, input_format)
    summary.removed_orphans, foreign = _remove_orphans(work, tasks, input_format)
    summary.warnings += _foreign_warnings(work, foreign)
    todo = []
    for task in tasks:
        status, meta = status_of(task)
        if status == OK:
            _count(summary, meta, reused=True)
            if on_shard:
                on_shard(task, meta, True)
        else:
            todo.append(task)
    executor = executor or local_executor(_workers_for(workers, len(todo)))
    # closed at once on any failure, so that the workers stop now rather than when the exception is gone
    with contextlib.closing(_results(executor, todo)) as results:
        for task, meta in results:
            _count(summary, meta, reused=False)
            if on_shard:
                on_shard(task, meta, False)
    write_manifest(work, options, tasks, input_format)
    return summary


def _workers_for(workers: int | None, todo: int) -> int:
    return workers if workers is not None else default_workers(todo)


def _results(executor: Executor, todo: list[ParseTask]) -> Iterator[tuple[ParseTask, dict]]:
    # In-process there is no transfer to save, and one task at a time lets `run` load while parsing.
    most = 1 if isinstance(executor, InlineExecutor) else CHUNK_TASKS
    outcomes = executor.imap_unordered(parse_chunk, list(chunks(todo, most)))
    try:
        for outcome in outcomes:
            if outcome.error is not None:
                raise _task_failure(outcome.task[0], outcome.error)
            for task, meta, error in outcome.value:
                if error is not None:
                    raise _task_failure(task, error)
                yield task, meta
    finally:
        outcomes.close()


def chunks(tasks: list[ParseTask], most: int = CHUNK_TASKS) -> Iterator[tuple[ParseTask, ...]]:
    """Tasks in groups of about CHUNK_BYTES of input (at most MOST tasks): small monitor CSV files then
    travel to a worker many at a time, while a dump file set (megabytes) still goes alone."""
    chunk: list[ParseTask] = []
    size = 0
    for task in tasks:
        chunk.append(task)
        size += sum(source["size"] or 0 for source in describe_sources(task))
        if size >= CHUNK_BYTES or len(chunk) >= most:
            yield tuple(chunk)
            chunk, size = [], 0
    if chunk:
        yield tuple(chunk)


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
    summary.skipped.update(meta["skipped"])


def _remove_orphans(work: Path, tasks: list[ParseTask], input_format: str) -> tuple[int, list[Path]]:
    """Shards of units that are no longer in DATA would otherwise be loaded as if they were: they are removed.

    Only trendconv's own: a regular file under the shard directory whose valid footer names it (shards.read_own).
    Anything else named *.parquet there (a user's file, a link, a damaged file) is left in place and returned.
    """
    wanted = {task.shard_path for task in tasks}
    directory = shards.shard_dir(work)
    removed, foreign = 0, []
    for path in shards.list_shards(work):
        if path in wanted:
            continue
        if _is_own(directory, path, input_format):
            try:
                path.unlink()
            except OSError as exc:
                raise cannot_write(path, exc) from None
            removed += 1
            if path.parent != directory:  # a monitor run directory: gone too once empty (rmdir keeps a full one)
                with contextlib.suppress(OSError):
                    path.parent.rmdir()
        else:
            foreign.append(path)
    return removed, foreign


def _is_own(directory: Path, path: Path, input_format: str) -> bool:
    if path.is_symlink():
        return False
    try:
        shards.read_own(directory, path.relative_to(directory).as_posix(), input_format)
    except DataError:
        return False
    return True


def _foreign_warnings(work: Path, foreign: list[Path]) -> list[str]:
    if not foreign:
        return []
    directory = shards.shard_dir(work)
    return [
        f"{directory}: left {plural(len(foreign), 'file')} named *.parquet in place, as trendconv did not write "
        f"them (first: {foreign[0].relative_to(directory)}); they are not loaded"
    ]


def write_manifest(work: Path, options: ParseOptions, tasks: list[ParseTask], input_format: str = DUMP) -> None:
    directory = shards.shard_dir(work)
    document = {
        "shard_format": shards.SHARD_FORMAT,
        "input_format": input_format,
        "options": options.describe(),
        "shards": [task.shard_path.relative_to(directory).as_posix() for task in tasks],
    }
    workdir.write_json_atomic(workdir.manifest_path(work), document)


def _start_work(data: Path, work: Path, options: ParseOptions, input_format: str) -> None:
    """Forget the old manifest (the shard set is about to change) and say what this parse does."""
    workdir.make_work_dir(work)
    workdir.forget_manifest(work)
    document = {"data": str(data.resolve()), "input_format": input_format, "options": options.describe()}
    workdir.write_json_atomic(workdir.work_json_path(work), document)
