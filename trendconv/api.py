"""The stages wired together per format: parse, load and run (both at once), under WORK's lock.

The public API (trendconv.library) and the tests call these. Format-blind: `parse`, `load` and `run` work on the
format named by `input_format` (trendconv.formats); the `_all` variants on every format asked for, or found, and
replace their databases all together or not at all.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from trendconv import formats, interrupt, workdir
from trendconv.errors import DataError, TrendconvError, UsageError, make_directory
from trendconv.executors import Executor, prestart, release_forkserver
from trendconv.faults import fault_point
from trendconv.formats import Format
from trendconv.jsonfile import read_python_json
from trendconv.loading.build import publish_all
from trendconv.loading.outputs import writing
from trendconv.loading.records import in_order
from trendconv.loading.split import Split, db_stem
from trendconv.loading.stage import UNSPLIT, Feeder, OutputSet, stage_output
from trendconv.options import ParseOptions
from trendconv.parsing import manifest_shards, run_parse
from trendconv.progress import Progress
from trendconv.scan import is_file
from trendconv.summaries import ConvertSummary, LoadSummary, ParseSummary

__all__ = [
    "ParseOptions",
    "default_work",
    "formats_in_data",
    "formats_in_work",
    "forget_other_formats",
    "load",
    "load_all",
    "load_mapping",
    "parse",
    "parse_all",
    "run",
    "run_all",
]

DEFAULT_WORK = ".trendconv"
_SILENT = Progress()


def load_mapping(path: Path | None) -> tuple[tuple[str, str], ...]:
    """A mapping file: a JSON object of string → string, applied in file order."""
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


def default_work(out_dir: Path) -> Path:
    return out_dir / DEFAULT_WORK


def check_output(out_dir: Path) -> None:
    """OUT_DIR, where the databases go, is a directory or is to be made: a file there is a usage error said before
    any work, not a failure to write the WORK directory inside it (or, with another WORK, the database at the end)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"{out_dir}: not a directory: the databases go into a directory, which is made if missing")


def formats_in_data(data: Path, input_format: str) -> list[Format]:
    """The formats to convert: the one asked for, or for `auto` every format found under DATA."""
    return formats.chosen(data, input_format)


def formats_in_work(work: Path) -> list[Format]:
    """The formats whose last parse into WORK finished (each has its manifest); else those whose parse started,
    or else the first format: loading it then reports the missing manifest."""
    workdir.require_work(work)
    parts = {fmt: workdir.found_part(work, fmt) for fmt in formats.FORMATS.values()}
    finished = [fmt for fmt, part in parts.items() if workdir.manifest_path(part).exists()]
    started = [fmt for fmt, part in parts.items() if workdir.work_json_path(part).exists()]
    return finished or started or list(parts)[:1]


def forget_other_formats(work: Path, chosen: list[Format]) -> None:
    """WORK is to hold only the CHOSEN formats: a later `load` must not load an older parse of another format."""
    with workdir.locked(work):
        for fmt in formats.FORMATS.values():
            if fmt not in chosen:
                workdir.forget_manifest(workdir.found_part(work, fmt))


# ---- parse


def parse(
    data: Path,
    work: Path,
    options: ParseOptions,
    *,
    input_format: str,
    workers: int | None = None,
    executor: Executor | None = None,
    progress: Progress = _SILENT,
) -> ParseSummary:
    """Parse DATA's INPUT_FORMAT data into shards under WORK."""
    if executor is None:
        prestart(workers, data, [input_format])
    fmt = formats.get(input_format)
    with workdir.locked(work):
        return run_parse(
            data,
            work,
            options,
            fmt,
            workers=workers,
            executor=executor,
            on_plan=lambda tasks: progress.planned(fmt.name, len(tasks)),
            on_shard=lambda task, meta, reused: progress.parsed(fmt.name, reused=reused),
        )


def parse_all(data: Path, work: Path, options: ParseOptions, *, input_format: str, **kwargs) -> list[ParseSummary]:
    """Parse every format asked for (or found, for auto); WORK then holds exactly these formats."""
    chosen = formats_in_data(data, input_format)
    forget_other_formats(work, chosen)
    return [parse(data, work, options, input_format=fmt.name, **kwargs) for fmt in chosen]


# ---- load


def load(work: Path, out_dir: Path, *, input_format: str, **kwargs) -> LoadSummary:
    """Build the INPUT_FORMAT database in OUT_DIR from the shards of WORK alone (see `load_all`)."""
    check_output(out_dir)
    return _load_formats(work, out_dir, [formats.get(input_format)], **kwargs)[0]


def load_all(work: Path, out_dir: Path, **kwargs) -> list[LoadSummary]:
    """Load every format whose parse into WORK finished: all their databases are replaced, or none."""
    check_output(out_dir)
    return _load_formats(work, out_dir, formats_in_work(work), **kwargs)


def _load_formats(
    work: Path,
    out_dir: Path,
    chosen: list[Format],
    *,
    index: bool = True,
    split: Split = UNSPLIT,
    executor: Executor | None = None,
    progress: Progress = _SILENT,
) -> list[LoadSummary]:
    """Load each of CHOSEN, WORK locked once for all of them; every manifest is read before any build starts."""
    workdir.require_work(work)
    with workdir.locked(work):
        shard_lists = [in_order(manifest_shards(work, fmt), fmt.meta_order) for fmt in chosen]
        stages = [
            (fmt, functools.partial(_stage_load, fmt, shard_list, out_dir, index, split, executor, progress))
            for fmt, shard_list in zip(chosen, shard_lists)
        ]
        return all_or_nothing(stages, [out_dir / db_stem(fmt, split) for fmt in chosen])


def _stage_load(fmt: Format, shard_list: list, out_dir: Path, index: bool, split: Split, executor, progress) -> tuple:
    """One format's databases from its shards, complete at their temporary paths: (summary, output set)."""
    progress.planned(fmt.name, len(shard_list))

    def loaded(shard) -> None:
        progress.loaded(fmt.name)

    output = stage_output(fmt, shard_list, out_dir, split, index=index, on_shard=loaded, executor=executor)
    return output.summary, output


def all_or_nothing(stages: list[tuple[Format, Callable[[], tuple]]], outputs: list[Path]) -> list:
    """Run each (format, stage): a stage builds its databases to temporary files and returns (summary, output
    set). Only when every stage succeeded are the databases moved into place, one right after another, and then
    the previous outputs' files that the new ones do not have removed; a failure or an interruption abandons every
    build, so that no database is replaced unless all are. OUTPUTS (each output's unsplit database path) are
    this process's from the start, so that one a follower writes is refused before any work."""
    staged: list[tuple] = []
    for directory in {output.parent for output in outputs}:
        with contextlib.suppress(OSError):  # else no database can be made there either: its build says why
            make_directory(directory)
    with writing(outputs):
        try:
            for _, stage in stages:
                staged.append(stage())
            publish_all([builder for _, output in staged for builder in output.builders])
        except BaseException as exc:
            for _, output in staged:
                output.abort()
            if isinstance(exc, TrendconvError) and staged and len(staged) < len(stages):
                _note_unreplaced(exc, staged, stages[len(staged)][0])
            raise
        with interrupt.deferred():
            for _, output in staged:
                output.published()
    return [summary for summary, _ in staged]


def _note_unreplaced(exc: TrendconvError, staged: list[tuple], failed: Format) -> None:
    """The warnings of the formats built before the failure, and that their databases were left as they were."""
    earlier = [warning for summary, _ in staged for warning in summary.warnings]
    unreplaced = [
        f"{builder.final}: {'left unchanged' if builder.final.exists() else 'not written'}: the {failed.name} data "
        "failed, and the databases of all formats are replaced together or not at all"
        for _, output in staged
        for builder in output.builders
    ]
    exc.warnings = [*earlier, *exc.warnings, *unreplaced]


# ---- run: parse and load at once


def run(data: Path, out_dir: Path, options: ParseOptions, *, input_format: str, **kwargs) -> ConvertSummary:
    """Parse and load the INPUT_FORMAT data of DATA (see `run_all`)."""
    check_output(out_dir)
    work, workers, executor = kwargs.pop("work", None), kwargs.pop("workers", None), kwargs.pop("executor", None)
    chosen = [formats.get(input_format)]
    return _run_formats(data, out_dir, options, chosen, work, workers, executor, kwargs)[0]


def run_all(data: Path, out_dir: Path, options: ParseOptions, *, input_format: str, **kwargs) -> list[ConvertSummary]:
    """Convert every format asked for (or found, for auto), each into its own database in OUT_DIR: all of them
    are replaced, or none (see `all_or_nothing`). KWARGS: work, workers, executor, index, progress."""
    check_output(out_dir)
    chosen = formats_in_data(data, input_format)
    work, workers, executor = kwargs.pop("work", None), kwargs.pop("workers", None), kwargs.pop("executor", None)
    forget_other_formats(work or default_work(out_dir), chosen)
    return _run_formats(data, out_dir, options, chosen, work, workers, executor, kwargs)


def _run_formats(
    data: Path,
    out_dir: Path,
    options: ParseOptions,
    chosen: list[Format],
    work: Path | None,
    workers: int | None,
    executor: Executor | None,
    kwargs: dict,
) -> list[ConvertSummary]:
    """Run each of CHOSEN (KWARGS: `index` and `progress` of `_stage_run`), WORK locked once for all of them."""
    work = work or default_work(out_dir)
    if executor is None:
        prestart(workers, data, [fmt.name for fmt in chosen])
    with workdir.locked(work):
        stages = [
            (
                fmt,
                functools.partial(
                    _stage_run, data, out_dir, options, work, workers, executor, fmt, last=fmt is chosen[-1], **kwargs
                ),
            )
            for fmt in chosen
        ]
        split = kwargs.get("split", UNSPLIT)
        return all_or_nothing(stages, [out_dir / db_stem(fmt, split) for fmt in chosen])


def _stage_run(
    data: Path,
    out_dir: Path,
    options: ParseOptions,
    work: Path,
    workers: int | None,
    executor: Executor | None,
    fmt: Format,
    *,
    index: bool = True,
    split: Split = UNSPLIT,
    progress: Progress = _SILENT,
    last: bool = True,
) -> tuple[ConvertSummary, OutputSet]:
    """One format's parse and load, its databases complete at their temporary paths (WORK is locked). A streaming
    format's first database takes each shard, in order, as soon as it is ready (trendconv.loading.stage.Feeder).
    LAST: no other format's parse comes after this one."""
    started = time.perf_counter()
    feeder = Feeder(
        fmt, out_dir, split, index=index, on_loaded=lambda shard: progress.loaded(fmt.name), executor=executor
    )

    def planned(tasks: Sequence) -> None:
        feeder.plan(tasks)
        progress.planned(fmt.name, len(tasks))

    def ready(task, meta: dict, reused: bool) -> None:
        progress.parsed(fmt.name, reused=reused)
        feeder.shard_ready(task, meta)

    try:
        parsed = run_parse(
            data, work, options, fmt, workers=workers, executor=executor, on_plan=planned, on_shard=ready
        )
        parse_done = time.perf_counter()
        if last and split.steps is None:  # no pool to come (but the loaders of a split by size, which start another)
            release_forkserver()
        fault_point("run-between-stages")
        output = feeder.finish()
    except BaseException:
        feeder.abort()
        raise
    seconds = {
        "scan": parsed.scan_seconds,
        "parse": parse_done - started - parsed.scan_seconds,
        "load": feeder.seconds + time.perf_counter() - parse_done,
        "index": sum(builder.seconds["index"] for builder in output.builders),
        "total": time.perf_counter() - started,
    }
    return ConvertSummary(parsed, output.summary, work, seconds), output
