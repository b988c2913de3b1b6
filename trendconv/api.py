"""The Python API behind the CLI: parse, load, run and inspect, as plain functions tests can call."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from trendconv import schemas, shards, workdir
from trendconv.dump.parse import ParseOptions
from trendconv.errors import DataError, TrendconvError, UsageError
from trendconv.executors import Executor, default_workers, prestart
from trendconv.faults import fault_point
from trendconv.jsonfile import read_python_json
from trendconv.load import LoadSummary, TrendDbBuilder, publish_all, stage_shards
from trendconv.load.monitor import MonitorDbBuilder, stage_monitor_shards
from trendconv.parse import ParseSummary, ParseTask, run_parse
from trendconv.parse.formats import DUMP, FORMATS, MONITOR
from trendconv.scan import has_dump_data
from trendconv.scan.fs import check_data, is_file
from trendconv.scan.monitor import CsvFile, has_monitor_data

__all__ = [
    "DUMP",
    "MONITOR",
    "ParseOptions",
    "RunSummary",
    "default_work",
    "formats_in_data",
    "formats_in_work",
    "forget_other_formats",
    "load",
    "load_all",
    "load_mapping",
    "make_executor",
    "parse",
    "parse_all",
    "read_manifest_shards",
    "run",
    "run_all",
]
AUTO = "auto"

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
    try:
        if not is_file(path):
            raise UsageError(f"{path}: mapping file not found")
        mapping = read_python_json(path)  # a bare NaN is a float here, so no string
    except DataError as exc:
        raise UsageError(str(exc)) from None
    if not isinstance(mapping, dict) or not all(isinstance(v, str) for v in mapping.values()):
        raise UsageError(f'{path}: a mapping must be a JSON object of strings, like {{".TE": "."}}')
    if "" in mapping:
        raise UsageError(f"{path}: a mapping key must not be empty")
    try:
        "".join(key + value for key, value in mapping.items()).encode()
    except UnicodeEncodeError:  # JSON lets "\\ud800" stand alone; no character is that
        raise UsageError(f"{path}: a mapping string holds a lone surrogate escape (\\ud800 to \\udfff)") from None
    return tuple(mapping.items())


def formats_in_data(data: Path, input_format: str) -> list[str]:
    """The formats to convert: the one asked for, or for `auto` every format found under DATA."""
    if input_format in FORMATS:
        return [input_format]
    if input_format != AUTO:
        raise UsageError(f"--format {input_format!r}: expected 'auto', 'dump' or 'monitor'")
    check_data(data)
    found = [fmt for fmt, present in ((DUMP, has_dump_data(data)), (MONITOR, has_monitor_data(data))) if present]
    if not found:
        raise DataError(
            f"{data}: neither dump data (step*/rank*/dump.json) nor monitor data "
            "(run directories like 'Feb20_16-27-56-rank0-1a2b3c4d' holding <metric>_<a>-<b>.csv files)"
        )
    return found


def formats_in_work(work: Path) -> list[str]:
    """The formats whose last parse into WORK finished (each has its manifest)."""
    workdir.require_work(work)
    found = [fmt.name for fmt in FORMATS.values() if workdir.manifest_path(fmt.work_dir(work)).exists()]
    return found or [DUMP]  # reading the dump manifest then says what is missing


def parse(
    data: Path,
    work: Path,
    options: ParseOptions,
    *,
    workers: int | None = None,
    input_format: str = DUMP,
    **kwargs,
) -> ParseSummary:
    """Parse DATA's INPUT_FORMAT data into shards under WORK (see trendconv.parse.run_parse for the callbacks)."""
    if kwargs.get("executor") is None:
        prestart(workers)
    with workdir.locked(work):
        return run_parse(data, work, options, workers=workers, input_format=input_format, **kwargs)


def parse_all(
    data: Path, work: Path, options: ParseOptions, *, input_format: str = AUTO, **kwargs
) -> list[ParseSummary]:
    """Parse every format asked for (or found, for auto); WORK then holds exactly these formats."""
    formats = formats_in_data(data, input_format)
    forget_other_formats(work, formats)
    return [parse(data, work, options, input_format=fmt, **kwargs) for fmt in formats]


def forget_other_formats(work: Path, formats: list[str]) -> None:
    """WORK is to hold only FORMATS: a later `load` must not load an older parse of another format."""
    with workdir.locked(work):
        for fmt in FORMATS.values():
            if fmt.name not in formats:
                workdir.forget_manifest(fmt.work_dir(work))


def read_manifest_shards(work: Path, input_format: str = DUMP) -> list[shards.Shard]:
    """The complete shard set of WORK, in processing order, as the last finished parse left it."""
    workdir.require_work(work)
    work = FORMATS[input_format].work_dir(work)
    unfinished = "the parse of this WORK did not finish; run `trendconv parse` again"
    document = workdir.read_json_document(workdir.manifest_path(work), unfinished, schemas.manifest(input_format))
    directory = shards.shard_dir(work)
    found = []
    for name in document["shards"]:
        if not (directory / name).is_file():
            raise DataError(f"{directory / name}: shard missing; run `trendconv parse` again to rebuild it")
        found.append(shards.read_own(directory, name, input_format))
    return sorted(found, key=_shard_order)


def _shard_order(shard: shards.Shard) -> tuple:
    meta = shard.meta
    if meta.get("input_format") == MONITOR:
        return FORMATS[MONITOR].order(_csv_unit(meta))
    return (shard.step, shard.rank)


def _csv_unit(meta: dict) -> CsvFile:
    return CsvFile(meta["rank"], meta["run_dir"], meta["file"], meta["metric"], Path())


def load(
    work: Path,
    out_dir: Path,
    *,
    index: bool = True,
    on_plan: Callable[[list[shards.Shard]], None] | None = None,
    on_shard: Callable[[shards.Shard], None] | None = None,
    input_format: str = DUMP,
) -> LoadSummary:
    """Build OUT_DIR/dump_data.trend.db (or monitor_data.trend.db) from the shards of WORK alone."""
    return _load_formats(work, out_dir, [input_format], index=index, on_plan=on_plan, on_shard=on_shard)[0]


def load_all(work: Path, out_dir: Path, **kwargs) -> list[LoadSummary]:
    """Load every format whose parse into WORK finished: all their databases are replaced, or none."""
    return _load_formats(work, out_dir, formats_in_work(work), **kwargs)


def _load_formats(
    work: Path, out_dir: Path, formats: list[str], *, index: bool = True, on_plan=None, on_shard=None
) -> list[LoadSummary]:
    """Load each of FORMATS, WORK locked once for all of them; every manifest is read before any build starts."""
    with workdir.locked(work):
        shard_lists = [read_manifest_shards(work, fmt) for fmt in formats]

        def stage(fmt: str, shard_list: list[shards.Shard]) -> Callable[[], tuple]:
            def build():
                if on_plan:
                    on_plan(shard_list)
                builder = (stage_monitor_shards if fmt == MONITOR else stage_shards)(
                    shard_list, out_dir, index=index, on_shard=on_shard
                )
                return builder.summary, builder

            return build

        return all_or_nothing([(fmt, stage(fmt, shard_list)) for fmt, shard_list in zip(formats, shard_lists)])


def all_or_nothing(stages: list[tuple[str, Callable[[], tuple]]]) -> list:
    """Run each (format, stage): a stage builds its database to a temporary file and returns (summary, builder).
    Only when every stage succeeded are the databases moved into place, one right after another; a failure or an
    interruption abandons every build, so that no database is replaced unless all are."""
    staged: list[tuple] = []
    try:
        for _, stage in stages:
            staged.append(stage())
        publish_all([builder for _, builder in staged])
    except BaseException as exc:
        for _, builder in staged:
            builder.abort()
        if isinstance(exc, TrendconvError) and staged and len(staged) < len(stages):
            _note_unreplaced(exc, staged, stages[len(staged)][0])
        raise
    return [summary for summary, _ in staged]


def _note_unreplaced(exc: TrendconvError, staged: list[tuple], failed: str) -> None:
    """The warnings of the formats built before the failure, and that their databases were left as they were."""
    earlier = [warning for summary, _ in staged for warning in _warnings_of(summary)]
    unreplaced = [
        f"{builder.final}: {'left unchanged' if builder.final.exists() else 'not written'}: the {failed} data "
        "failed, and the databases of all formats are replaced together or not at all"
        for _, builder in staged
    ]
    exc.warnings = [*earlier, *exc.warnings, *unreplaced]


def _warnings_of(summary) -> list[str]:
    if isinstance(summary, RunSummary):
        return summary.parse.warnings + summary.load.warnings
    return summary.warnings


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
        self.order = [task.shard_path for task in sorted(tasks, key=lambda task: task.order)]

    def shard_ready(self, task: ParseTask, meta: dict) -> None:
        self.ready[task.shard_path] = meta
        started = time.perf_counter()
        while self.next < len(self.order) and self.order[self.next] in self.ready:
            self._load(self.order[self.next])
            self.next += 1
        self.seconds += time.perf_counter() - started

    def _load(self, path: Path) -> None:
        shard = shards.Shard(path, self.ready.pop(path))
        self.builder.add(shard)
        if self.on_loaded:
            self.on_loaded(shard)

    def finish(self) -> LoadSummary:
        """Complete the database at its temporary path (see `all_or_nothing`)."""
        self.builder.seal()
        return self.builder.summary


class _AfterParseLoader(_InOrderLoader):
    """Monitor data: a step's slots depend on every file (docs/monitor-format.md §7), so rows are loaded once all
    shards are ready."""

    def shard_ready(self, task: ParseTask, meta: dict) -> None:
        self.ready[task.shard_path] = meta

    def finish(self) -> LoadSummary:
        started = time.perf_counter()
        shard_list = [shards.Shard(path, self.ready.pop(path)) for path in self.order]
        self.builder.plan([shard.meta for shard in shard_list])
        self.builder.add_all(shard_list, self.on_loaded)
        self.seconds += time.perf_counter() - started
        self.builder.seal()
        return self.builder.summary


def run(
    data: Path,
    out_dir: Path,
    options: ParseOptions,
    *,
    work: Path | None = None,
    workers: int | None = None,
    executor: Executor | None = None,
    index: bool = True,
    input_format: str = DUMP,
    on_plan: Callable[[list[ParseTask]], None] | None = None,
    on_parsed: Callable[[ParseTask, dict, bool], None] | None = None,
    on_loaded: Callable[[shards.Shard], None] | None = None,
) -> RunSummary:
    """Parse and load at once: for dump data the loader takes each shard, in order, as soon as it is ready."""
    rest = {"index": index, "on_plan": on_plan, "on_parsed": on_parsed, "on_loaded": on_loaded}
    return _run_formats(data, out_dir, options, [input_format], work, workers, executor, rest)[0]


def run_all(
    data: Path, out_dir: Path, options: ParseOptions, *, input_format: str = AUTO, **kwargs
) -> list[RunSummary]:
    """Convert every format asked for (or found, for auto), each into its own database in OUT_DIR: all of them
    are replaced, or none (see `all_or_nothing`)."""
    formats = formats_in_data(data, input_format)
    work, workers, executor = kwargs.pop("work", None), kwargs.pop("workers", None), kwargs.pop("executor", None)
    forget_other_formats(work or default_work(out_dir), formats)
    return _run_formats(data, out_dir, options, formats, work, workers, executor, kwargs)


def _run_formats(
    data: Path,
    out_dir: Path,
    options: ParseOptions,
    formats: list[str],
    work: Path | None,
    workers: int | None,
    executor: Executor | None,
    kwargs: dict,
) -> list[RunSummary]:
    """Run each of FORMATS (KWARGS: `index` and the callbacks of `run`), WORK locked once for all of them."""
    work = work or default_work(out_dir)
    if executor is None:
        prestart(workers)
    with workdir.locked(work):
        stages = [
            (fmt, functools.partial(_stage_run, data, out_dir, options, work, workers, executor, fmt, **kwargs))
            for fmt in formats
        ]
        return all_or_nothing(stages)


def _stage_run(
    data: Path,
    out_dir: Path,
    options: ParseOptions,
    work: Path,
    workers: int | None,
    executor: Executor | None,
    input_format: str,
    *,
    index: bool = True,
    on_plan: Callable[[list[ParseTask]], None] | None = None,
    on_parsed: Callable[[ParseTask, dict, bool], None] | None = None,
    on_loaded: Callable[[shards.Shard], None] | None = None,
) -> tuple[RunSummary, TrendDbBuilder | MonitorDbBuilder]:
    """One format's parse and load, its database complete at its temporary path (WORK is locked)."""
    started = time.perf_counter()
    if input_format == MONITOR:
        loader = _AfterParseLoader(MonitorDbBuilder(out_dir, index=index), on_loaded)
    else:
        loader = _InOrderLoader(TrendDbBuilder(out_dir, index=index), on_loaded)
    try:
        parsed = run_parse(
            data,
            work,
            options,
            workers=workers,
            executor=executor,
            input_format=input_format,
            on_plan=_both(loader.plan, on_plan),
            on_shard=_both(lambda task, meta, reused: loader.shard_ready(task, meta), on_parsed),
        )
        parse_done = time.perf_counter()
        fault_point("run-between-stages")
        loaded = loader.finish()
    except BaseException:
        loader.builder.abort()
        raise
    finished = time.perf_counter()
    seconds = {
        "scan": parsed.scan_seconds,
        "parse": parse_done - started - parsed.scan_seconds,
        "load": loader.seconds + loader.builder.seconds["finish"],
        "index": loader.builder.seconds["index"],
        "total": finished - started,
    }
    return RunSummary(parsed, loaded, work, seconds), loader.builder


def _both(first: Callable, second: Callable | None) -> Callable:
    if second is None:
        return first

    def call(*args):
        first(*args)
        second(*args)

    return call
