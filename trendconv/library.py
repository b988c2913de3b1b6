"""The Python API, as `import trendconv` offers it: convert, parse, load, inspect and diff.

Paths are str or os.PathLike, every option is keyword-only, and each function returns summaries
(trendconv.summaries) or raises one of trendconv's errors (trendconv.errors), whose messages name these
parameters. The CLI (trendconv.cli) is a thin layer over these functions. docs/python-api.md has examples.

Cheap to import: what the functions need is imported when they are called.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from trendconv.errors import DataError, UsageError, require_utf8
from trendconv.formats import AUTO
from trendconv.progress import Progress

if TYPE_CHECKING:
    from trendconv.comparison import DiffReport
    from trendconv.executors import Executor
    from trendconv.following import Batch, FollowSummary
    from trendconv.options import ParseOptions
    from trendconv.summaries import ConvertSummary, LoadSummary, ParseSummary

PathLike = str | os.PathLike
MappingArgument = Mapping[str, str] | PathLike | None


def convert(
    data: PathLike,
    out: PathLike,
    *,
    format: str = AUTO,
    work: PathLike | None = None,
    workers: int | None = None,
    micro_step: bool = True,
    mapping: MappingArgument = None,
    index: bool = True,
    executor: str | Executor | None = None,
    progress: Progress | None = None,
    split_steps: int | None = None,
    max_db_size: int | str | None = None,
    load_workers: int | None = None,
    name: str | None = None,
    steps: str | None = None,
    ranks: str | None = None,
) -> list[ConvertSummary]:
    """Convert the msprobe output in DATA into trend databases in OUT: one per format (`format="auto"`: every
    format found in DATA), all replaced together or none. The shards are kept in WORK (default OUT/.trendconv),
    so that converting again reuses those of unchanged files. One summary per format, in registry order.
    SPLIT_STEPS, MAX_DB_SIZE (bytes, or text like "500M"; default the Trend Analyzer's 5 GiB), LOAD_WORKERS and
    NAME divide each format's output into databases by steps (see `load`).
    STEPS and RANKS (like "0-9,12") convert only those steps and ranks (docs/user-guide.md)."""
    from trendconv import api

    chosen = _executor(executor, _workers(workers))
    split = _split(split_steps, max_db_size, load_workers if load_workers is not None else workers, name)
    return api.run_all(
        _path(data),
        _path(out),
        _options(micro_step, mapping, steps, ranks),
        input_format=format,
        work=None if work is None else _path(work),
        workers=_workers(workers),
        executor=chosen,
        index=index,
        split=split,
        progress=progress or Progress(),
    )


def follow(
    data: PathLike,
    out: PathLike,
    *,
    format: str = AUTO,
    work: PathLike | None = None,
    workers: int | None = None,
    micro_step: bool = True,
    mapping: MappingArgument = None,
    index: bool = True,
    executor: str | Executor | None = None,
    poll: float = 2.0,
    stop_after_idle: float | None = None,
    on_batch: Callable[[Batch], None] | None = None,
    on_warning: Callable[[str], None] | None = None,
    split_steps: int | None = None,
    max_db_size: int | str | None = None,
    name: str | None = None,
    steps: str | None = None,
    ranks: str | None = None,
) -> list[FollowSummary]:
    """Convert DATA as a training run writes it: each unit once its files are unchanged for POLL seconds, appended
    to OUT's databases in place, one transaction per database (docs/live.md). Runs until Ctrl-C
    (KeyboardInterrupt), which stops it once the batch in hand is in, or until nothing changed in DATA for
    STOP_AFTER_IDLE seconds. ON_BATCH is called after each transaction (or rename, or removal of a database of a
    split), ON_WARNING with each warning as it arises (a summary's `warnings` has them all). SPLIT_STEPS,
    MAX_DB_SIZE and NAME as in `convert`: the databases are those `convert` makes of the units complete so far;
    STEPS and RANKS follow only those. One summary per format followed."""
    from trendconv import api
    from trendconv.following import follow as follow_data

    for keyword, value in (("poll", poll), ("stop_after_idle", stop_after_idle)):
        if value is not None and (type(value) not in (int, float) or not 0 < value < 1e9):
            raise UsageError(f"{keyword} must be a number of seconds above 0, not {value!r}")
    split = _split(split_steps, max_db_size, None, name)
    api.check_output(_path(out))
    return follow_data(
        _path(data),
        _path(out),
        api.default_work(_path(out)) if work is None else _path(work),
        _options(micro_step, mapping, steps, ranks),
        input_format=format,
        poll=float(poll),
        stop_after_idle=stop_after_idle,
        on_batch=on_batch,
        on_warning=on_warning,
        index=index,
        split=split,
        workers=_workers(workers),
        executor=_executor(executor, workers),
    )


def parse(
    data: PathLike,
    work: PathLike,
    *,
    format: str = AUTO,
    workers: int | None = None,
    micro_step: bool = True,
    mapping: MappingArgument = None,
    executor: str | Executor | None = None,
    progress: Progress | None = None,
    steps: str | None = None,
    ranks: str | None = None,
) -> list[ParseSummary]:
    """Parse the msprobe output in DATA into shards in WORK (one per unit: a dump file set, a monitor CSV file),
    reusing those whose sources and options are unchanged. One summary per format. STEPS and RANKS as in
    `convert`: a later `load` loads the units they selected."""
    from trendconv import api

    return api.parse_all(
        _path(data),
        _path(work),
        _options(micro_step, mapping, steps, ranks),
        input_format=format,
        workers=_workers(workers),
        executor=_executor(executor, workers),
        progress=progress or Progress(),
    )


def load(
    work: PathLike,
    out: PathLike,
    *,
    index: bool = True,
    progress: Progress | None = None,
    split_steps: int | None = None,
    max_db_size: int | str | None = None,
    load_workers: int | None = None,
    name: str | None = None,
    executor: str | Executor | None = None,
) -> list[LoadSummary]:
    """Build the databases of every format whose parse into WORK finished, into OUT, from the shards alone: all
    replaced together or none. One summary per format.

    A format's output is one database unless it would exceed MAX_DB_SIZE (bytes, or text like "500M"; default the
    Trend Analyzer's 5 GiB) or SPLIT_STEPS is given: then one database per range of steps (at most SPLIT_STEPS
    step directories each), built by LOAD_WORKERS processes at the same time (default: one per core) or on
    EXECUTOR; the summary's `parts` has each one's. NAME goes before every file name (`NAME.dump_data.trend.db`),
    so that several runs' databases share a directory."""
    from trendconv import api

    split = _split(split_steps, max_db_size, load_workers, name)
    return api.load_all(
        _path(work),
        _path(out),
        index=index,
        split=split,
        executor=_executor(executor, load_workers),
        progress=progress or Progress(),
    )


def inspect(work: PathLike, *, format: str | None = None) -> dict:
    """What WORK holds for FORMAT (default: the first format whose parse was started there), shard by shard: the
    document `trendconv inspect --json` prints (docs/user-guide.md)."""
    from trendconv import formats, inspection

    if format is not None:
        formats.get(format)
    return inspection.inspect_work(_path(work), format)


def diff(
    a: PathLike | list[PathLike] | tuple[PathLike, ...],
    b: PathLike | list[PathLike] | tuple[PathLike, ...],
    *,
    limit: int = 5,
    ids: bool = False,
) -> DiffReport:
    """Compare two trend databases by names (ids too with IDS); `equal` says whether they are logically the
    same, `format()` words the differences, at most LIMIT examples per table and side. A or B may be a set of
    databases (a split output): a list of paths, a directory of one run's files or a glob pattern."""
    from trendconv import comparison

    sides = [[_path(p) for p in side] if isinstance(side, (list, tuple)) else _path(side) for side in (a, b)]
    try:
        return comparison.diff_databases(*sides, limit=limit, ids=ids)
    except comparison.DiffUsageError as exc:
        raise UsageError(str(exc)) from None
    except comparison.DiffError as exc:
        raise DataError(str(exc)) from None


def _path(value: PathLike) -> Path:
    """A path argument: trendconv records it as text and hands it to Arrow and SQLite, which take UTF-8 only."""
    path = Path(value)
    require_utf8(path, UsageError)
    return path


def _workers(workers: int | None) -> int | None:
    from trendconv.executors import MAX_WORKERS

    if workers is not None and (type(workers) is not int or not 1 <= workers <= MAX_WORKERS):
        raise UsageError(f"workers must be an integer from 1 to {MAX_WORKERS}, not {workers!r}")
    return workers


def _split(steps: int | None, max_size: int | str | None, load_workers: int | None, name: str | None):
    from trendconv.executors import MAX_WORKERS
    from trendconv.loading.split import Split, check_name, parse_size

    if steps is not None and (type(steps) is not int or steps < 1):
        raise UsageError(f"split_steps must be a positive integer, not {steps!r}")
    if load_workers is not None and (type(load_workers) is not int or not 1 <= load_workers <= MAX_WORKERS):
        raise UsageError(f"load_workers must be an integer from 1 to {MAX_WORKERS}, not {load_workers!r}")
    if name is not None and type(name) is not str:
        raise UsageError(f"name must be a string, not {name!r}")
    check_name(name)
    if max_size is None:
        return Split(steps, name=name, load_workers=load_workers)
    if type(max_size) is int:
        max_size = str(max_size)
    if type(max_size) is not str:
        raise UsageError(f"max_db_size must be a number of bytes or a size like '500M', not {max_size!r}")
    return Split(steps, parse_size(max_size), name, load_workers)


def _options(
    micro_step: bool, mapping: MappingArgument, steps: str | None = None, ranks: str | None = None
) -> ParseOptions:
    from trendconv.options import ParseOptions
    from trendconv.selection import Selection

    if type(micro_step) is not bool:
        raise UsageError(f"micro_step must be True or False, not {micro_step!r}")
    selection = Selection(_spec("steps", steps), _spec("ranks", ranks))
    return ParseOptions(micro_step=micro_step, mapping=_mapping(mapping), selection=selection)


def _spec(name: str, spec: str | None):
    """STEPS or RANKS as `selection.Numbers` (None: all)."""
    from trendconv.selection import EXAMPLE, SpecError, parse_spec

    if spec is None:
        return None
    if type(spec) is not str:
        raise UsageError(f"{name} must be a string like {EXAMPLE!r}, not {spec!r:.60}")
    try:
        return parse_spec(spec)
    except SpecError as exc:
        raise UsageError(f"{name}={spec!r}: {exc}") from None


def _mapping(mapping: MappingArgument) -> tuple[tuple[str, str], ...]:
    """A mapping given as a dict (applied in its order) or as the path of a JSON file of one."""
    if mapping is None:
        return ()
    if isinstance(mapping, (str, os.PathLike)):
        from trendconv import api

        return api.load_mapping(Path(mapping))
    if not isinstance(mapping, Mapping) or not all(type(k) is str and type(v) is str for k, v in mapping.items()):
        raise UsageError(f'mapping must map strings to strings, like {{".TE": "."}}, not {mapping!r:.60}')
    if "" in mapping:
        raise UsageError("mapping: a key must not be empty")
    return tuple(mapping.items())


def _executor(executor: str | Executor | None, workers: int | None) -> Executor | None:
    """None for the local default (in this process for one worker, else a process pool), a Dask cluster for
    "dask" (a local one of WORKERS processes), or an executor of one's own (trendconv.executors.Executor)."""
    if executor is None or executor == "local":
        return None
    if executor == "dask":
        from trendconv.executors.dask import DaskExecutor, local_workers

        return DaskExecutor(None, workers=local_workers(workers))
    if callable(getattr(executor, "imap_unordered", None)):
        return executor
    raise UsageError(f"executor {executor!r}: expected 'local', 'dask' or an Executor (trendconv.executors)")
