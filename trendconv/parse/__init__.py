"""The parse stage: scan DATA, then turn each (step, rank) file set into one shard, in parallel workers.

A shard whose sources and parse options are unchanged is reused, so an interrupted parse resumes where
it stopped. A manifest written last (`WORK/manifest.json`) says the set of shards is complete.
"""

from __future__ import annotations

import gc
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from trendconv import __version__, shards, workdir
from trendconv.dump.parse import ParseOptions, Rows, parse_file_set
from trendconv.errors import DataError, TrendconvError, where
from trendconv.executors import Executor, default_workers, local_executor
from trendconv.faults import fault_point
from trendconv.scan import FileSet, ScanResult, scan

OK, STALE, CORRUPT, MISSING = "ok", "stale", "corrupt", "missing"


@dataclass(frozen=True)
class ParseTask:
    file_set: FileSet
    options: ParseOptions
    work: Path

    @property
    def shard_path(self) -> Path:
        return shards.shard_path(self.work, self.file_set.step, self.file_set.rank)


@dataclass
class ParseSummary:
    files: int = 0
    parsed: int = 0
    reused: int = 0
    rows: int = 0
    skipped: Counter = field(default_factory=Counter)
    warnings: list[str] = field(default_factory=list)
    removed_orphans: int = 0
    scan_seconds: float = 0.0


def source_files(file_set: FileSet, micro_step: bool) -> list[tuple[str, Path]]:
    files = [(file_set.relative("dump.json"), file_set.dump_json)]
    if micro_step:
        files.append((file_set.relative("construct.json"), file_set.construct_json))
    return files


def describe_sources(file_set: FileSet, micro_step: bool) -> list[dict]:
    described = []
    for relative, path in source_files(file_set, micro_step):
        try:
            stat = path.stat()
        except OSError:
            described.append({"path": relative, "size": None, "mtime_ns": None})
            continue
        described.append({"path": relative, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns})
    return described


def shard_meta(task: ParseTask, sources: list[dict], rows: Rows) -> dict:
    return {
        "shard_format": shards.SHARD_FORMAT,
        "trendconv_version": __version__,
        "input_format": "dump",
        "options": task.options.describe(),
        "step": task.file_set.step,
        "rank": task.file_set.rank,
        "item": task.file_set.item,
        "sources": sources,
        "micro_steps": rows.micro_steps,
        "rows": len(rows),
        "rows_per_metric": dict(sorted(rows.metric_counts().items())),
        "skipped": dict(sorted(rows.skipped.items())),
    }


def parse_task(task: ParseTask) -> dict:
    """Worker entry point: parse one file set, write its shard, return its (small) metadata.

    The cyclic garbage collector is paused meanwhile: the parsed JSON is millions of young containers
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
    sources = describe_sources(task.file_set, task.options.micro_step)
    rows = parse_file_set(task.file_set, task.options)
    meta = shard_meta(task, sources, rows)
    fault_point("parse-before-write")
    shards.write_shard(task.shard_path, _table_of(task.file_set, rows), meta)
    fault_point("parse-shard")
    return meta


def _table_of(file_set: FileSet, rows: Rows):
    constants = {"step": file_set.step, "rank": file_set.rank, "vpp_stage": 0}
    return shards.build_table(rows.columns(), constants, len(rows))


def shard_status(task: ParseTask) -> tuple[str, dict | None]:
    return status_of(task.shard_path, task.file_set, task.options.describe())


def status_of(path: Path, file_set: FileSet, options: dict) -> tuple[str, dict | None]:
    """ok (reusable), stale (sources or options changed), corrupt (unreadable) or missing."""
    if not path.is_file():
        return MISSING, None
    try:
        meta = shards.read_meta(path)
    except DataError:
        return CORRUPT, None
    fresh = (
        meta.get("shard_format") == shards.SHARD_FORMAT
        and meta.get("options") == options
        and meta.get("sources") == describe_sources(file_set, options["micro_step"])
    )
    return (OK if fresh else STALE), meta


def plan(data: Path, work: Path, options: ParseOptions) -> tuple[ScanResult, list[ParseTask]]:
    result = scan(data)
    return result, [ParseTask(file_set, options, work) for file_set in result.file_sets]


def run_parse(
    data: Path,
    work: Path,
    options: ParseOptions,
    *,
    workers: int | None = None,
    executor: Executor | None = None,
    on_shard: Callable[[ParseTask, dict, bool], None] | None = None,
    on_plan: Callable[[list[ParseTask]], None] | None = None,
) -> ParseSummary:
    """Parse DATA into WORK.

    `on_plan(tasks)` is called once the scan is done, `on_shard(task, meta, reused)` as each shard is
    ready (reused shards first, then parsed ones as workers finish them).
    """
    started = time.perf_counter()
    scanned, tasks = plan(data, work, options)
    summary = ParseSummary(files=len(tasks), warnings=list(scanned.warnings))
    summary.scan_seconds = time.perf_counter() - started
    if on_plan:
        on_plan(tasks)
    _start_work(data, work, options)
    summary.removed_orphans = _remove_orphans(work, tasks)
    todo = []
    for task in tasks:
        status, meta = shard_status(task)
        if status == OK:
            _count(summary, meta, reused=True)
            if on_shard:
                on_shard(task, meta, True)
        else:
            todo.append(task)
    executor = executor or local_executor(_workers_for(workers, len(todo)))
    for task, meta in _results(executor, todo):
        _count(summary, meta, reused=False)
        if on_shard:
            on_shard(task, meta, False)
    write_manifest(work, options, tasks)
    return summary


def _workers_for(workers: int | None, todo: int) -> int:
    return workers if workers is not None else default_workers(todo)


def _results(executor: Executor, todo: list[ParseTask]) -> Iterator[tuple[ParseTask, dict]]:
    outcomes = executor.imap_unordered(parse_task, todo)
    try:
        for outcome in outcomes:
            if outcome.error is not None:
                raise _task_failure(outcome.task, outcome.error)
            yield outcome.task, outcome.value
    finally:
        outcomes.close()


def _task_failure(task: ParseTask, error: BaseException) -> TrendconvError:
    if isinstance(error, TrendconvError):
        return error
    file_set = task.file_set
    place = where(file_set.dump_json, step=file_set.step, rank=file_set.rank)
    return DataError(f"{place}: parse failed: {type(error).__name__}: {error}")


def _count(summary: ParseSummary, meta: dict, *, reused: bool) -> None:
    if reused:
        summary.reused += 1
    else:
        summary.parsed += 1
    summary.rows += meta["rows"]
    summary.skipped.update(meta["skipped"])


def _remove_orphans(work: Path, tasks: list[ParseTask]) -> int:
    """Shards of file sets that are no longer in DATA would otherwise be loaded as if they were."""
    wanted = {task.shard_path for task in tasks}
    orphans = [path for path in shards.list_shards(work) if path not in wanted]
    for path in orphans:
        path.unlink()
    return len(orphans)


def write_manifest(work: Path, options: ParseOptions, tasks: list[ParseTask]) -> None:
    document = {
        "shard_format": shards.SHARD_FORMAT,
        "input_format": "dump",
        "options": options.describe(),
        "shards": [task.shard_path.name for task in tasks],
    }
    workdir.write_json_atomic(workdir.manifest_path(work), document)


def _start_work(data: Path, work: Path, options: ParseOptions) -> None:
    """Forget the old manifest (the shard set is about to change) and say what this parse does."""
    work.mkdir(parents=True, exist_ok=True)
    workdir.manifest_path(work).unlink(missing_ok=True)
    document = {"data": str(data.resolve()), "input_format": "dump", "options": options.describe()}
    workdir.write_json_atomic(workdir.work_json_path(work), document)
