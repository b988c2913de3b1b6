"""The Python API behind the CLI: parse, load, run and inspect, as plain functions tests can call."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from trendconv import shards, workdir
from trendconv.dump.parse import ParseOptions
from trendconv.errors import DataError, UsageError
from trendconv.executors import Executor, default_workers
from trendconv.faults import fault_point
from trendconv.jsonfile import read_json
from trendconv.load import LoadSummary, TrendDbBuilder, load_shards
from trendconv.parse import ParseSummary, ParseTask, run_parse

__all__ = [
    "ParseOptions",
    "RunSummary",
    "default_work",
    "load",
    "load_mapping",
    "make_executor",
    "parse",
    "read_manifest_shards",
    "run",
]

DEFAULT_WORK = ".trendconv"
MAX_LOCAL_DASK_WORKERS = 128


def make_executor(kind: str, scheduler: str | None, workers: int | None) -> Executor | None:
    """None means the local default (inline for one worker, else a process pool)."""
    if kind == "local":
        if scheduler:
            raise UsageError("--scheduler goes with --executor dask")
        return None
    if kind == "dask":
        from trendconv.executors.dask import DaskExecutor

        return DaskExecutor(scheduler, workers=workers or default_workers(MAX_LOCAL_DASK_WORKERS))
    raise UsageError(f"--executor {kind!r}: expected 'local' or 'dask'")


def load_mapping(path: Path | None) -> tuple[tuple[str, str], ...]:
    """A --mapping file: a JSON object of string → string, applied in file order."""
    if path is None or str(path) == "":
        return ()
    if not path.is_file():
        raise UsageError(f"{path}: mapping file not found")
    try:
        mapping = read_json(path)
    except DataError as exc:
        raise UsageError(str(exc)) from None
    if not isinstance(mapping, dict) or not all(isinstance(v, str) for v in mapping.values()):
        raise UsageError(f'{path}: a mapping must be a JSON object of strings, like {{".TE": "."}}')
    if "" in mapping:
        raise UsageError(f"{path}: a mapping key must not be empty")
    return tuple(mapping.items())


def parse(data: Path, work: Path, options: ParseOptions, *, workers: int | None = None, **kwargs) -> ParseSummary:
    """Parse DATA into shards under WORK (see trendconv.parse.run_parse for the callbacks)."""
    with workdir.locked(work):
        return run_parse(data, work, options, workers=workers, **kwargs)


def read_manifest_shards(work: Path) -> list[shards.Shard]:
    """The complete shard set of WORK, in (step, rank) order, as the last finished parse left it."""
    if not work.is_dir():
        raise UsageError(f"{work}: WORK does not exist")
    path = workdir.manifest_path(work)
    unfinished = "the parse of this WORK did not finish; run `trendconv parse` again"
    names = workdir.read_json_document(path, unfinished).get("shards")
    if not isinstance(names, list):
        raise DataError(f"{path}: unreadable; run `trendconv parse` again")
    found = []
    for name in names:
        shard_file = shards.shard_dir(work) / name
        if not shard_file.is_file():
            raise DataError(f"{shard_file}: shard missing; run `trendconv parse` again to rebuild it")
        found.append(shards.Shard(shard_file, shards.read_meta(shard_file)))
    return sorted(found, key=lambda shard: (shard.step, shard.rank))


def load(
    work: Path,
    out_dir: Path,
    *,
    index: bool = True,
    on_plan: Callable[[list[shards.Shard]], None] | None = None,
    on_shard: Callable[[shards.Shard], None] | None = None,
) -> LoadSummary:
    """Build OUT_DIR/dump_data.trend.db from the shards of WORK alone."""
    with workdir.locked(work):
        shard_list = read_manifest_shards(work)
        if on_plan:
            on_plan(shard_list)
        return load_shards(shard_list, out_dir, index=index, on_shard=on_shard)


@dataclass
class RunSummary:
    parse: ParseSummary
    load: LoadSummary
    work: Path
    seconds: dict[str, float] = field(default_factory=dict)


def default_work(out_dir: Path) -> Path:
    return out_dir / DEFAULT_WORK


class _InOrderLoader:
    """Feeds shards to the builder in plan order as soon as each one and all before it are ready."""

    def __init__(self, builder: TrendDbBuilder, on_loaded: Callable[[shards.Shard], None] | None):
        self.builder = builder
        self.on_loaded = on_loaded
        self.order: list[Path] = []
        self.ready: dict[Path, dict] = {}
        self.next = 0
        self.seconds = 0.0

    def plan(self, tasks: list[ParseTask]) -> None:
        by_position = sorted(tasks, key=lambda task: (task.file_set.step, task.file_set.rank))
        self.order = [task.shard_path for task in by_position]

    def shard_ready(self, task: ParseTask, meta: dict) -> None:
        self.ready[task.shard_path] = meta
        started = time.perf_counter()
        while self.next < len(self.order) and self.order[self.next] in self.ready:
            path = self.order[self.next]
            shard = shards.Shard(path, self.ready.pop(path))
            self.builder.add(shard)
            self.next += 1
            if self.on_loaded:
                self.on_loaded(shard)
        self.seconds += time.perf_counter() - started


def run(
    data: Path,
    out_dir: Path,
    options: ParseOptions,
    *,
    work: Path | None = None,
    workers: int | None = None,
    executor: Executor | None = None,
    index: bool = True,
    on_plan: Callable[[list[ParseTask]], None] | None = None,
    on_parsed: Callable[[ParseTask, dict, bool], None] | None = None,
    on_loaded: Callable[[shards.Shard], None] | None = None,
) -> RunSummary:
    """Parse and load at once: the loader takes each shard, in order, as soon as it is ready."""
    work = work or default_work(out_dir)
    started = time.perf_counter()
    with workdir.locked(work):
        builder = TrendDbBuilder(out_dir, index=index)
        loader = _InOrderLoader(builder, on_loaded)
        try:
            parsed = run_parse(
                data,
                work,
                options,
                workers=workers,
                executor=executor,
                on_plan=_both(loader.plan, on_plan),
                on_shard=_both(lambda task, meta, reused: loader.shard_ready(task, meta), on_parsed),
            )
            parse_done = time.perf_counter()
            fault_point("run-between-stages")
            loaded = builder.finish()
        except BaseException:
            builder.abort()
            raise
    finished = time.perf_counter()
    seconds = {
        "scan": parsed.scan_seconds,
        "parse": parse_done - started - parsed.scan_seconds,
        "load": loader.seconds + builder.seconds["finish"],
        "index": builder.seconds["index"],
        "total": finished - started,
    }
    return RunSummary(parsed, loaded, work, seconds)


def _both(first: Callable, second: Callable | None) -> Callable:
    if second is None:
        return first

    def call(*args):
        first(*args)
        second(*args)

    return call
