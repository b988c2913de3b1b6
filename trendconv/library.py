"""The Python API, as `import trendconv` offers it: convert, parse, load, inspect and diff.

Paths are str or os.PathLike, every option is keyword-only, and each function returns summaries
(trendconv.summaries) or raises one of trendconv's errors (trendconv.errors), whose messages name these
parameters. The CLI (trendconv.cli) is a thin layer over these functions. docs/python-api.md has examples.

Cheap to import: what the functions need is imported when they are called.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from trendconv.errors import DataError, UsageError, require_utf8
from trendconv.formats import AUTO
from trendconv.progress import Progress

if TYPE_CHECKING:
    from trendconv.comparison import DiffReport
    from trendconv.executors import Executor
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
    steps: str | None = None,
    ranks: str | None = None,
) -> list[ConvertSummary]:
    """Convert the msprobe output in DATA into trend databases in OUT: one per format (`format="auto"`: every
    format found in DATA), all replaced together or none. The shards are kept in WORK (default OUT/.trendconv),
    so that converting again reuses those of unchanged files. One summary per format, in registry order.
    STEPS and RANKS (like "0-9,12") convert only those steps and ranks (docs/user-guide.md)."""
    from trendconv import api

    chosen = _executor(executor, workers)
    return api.run_all(
        _path(data),
        _path(out),
        _options(micro_step, mapping, steps, ranks),
        input_format=format,
        work=None if work is None else _path(work),
        workers=_workers(workers),
        executor=chosen,
        index=index,
        progress=progress or Progress(),
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


def load(work: PathLike, out: PathLike, *, index: bool = True, progress: Progress | None = None) -> list[LoadSummary]:
    """Build the databases of every format whose parse into WORK finished, into OUT, from the shards alone: all
    replaced together or none. One summary per format."""
    from trendconv import api

    return api.load_all(_path(work), _path(out), index=index, progress=progress or Progress())


def inspect(work: PathLike, *, format: str | None = None) -> dict:
    """What WORK holds for FORMAT (default: the first format whose parse was started there), shard by shard: the
    document `trendconv inspect --json` prints (docs/user-guide.md)."""
    from trendconv import formats, inspection

    if format is not None:
        formats.get(format)
    return inspection.inspect_work(_path(work), format)


def diff(a: PathLike, b: PathLike, *, limit: int = 5, ids: bool = False) -> DiffReport:
    """Compare two trend databases by names (ids too with IDS); `equal` says whether they are logically the
    same, `format()` words the differences, at most LIMIT examples per table and side."""
    from trendconv import comparison

    try:
        return comparison.diff_databases(Path(a), Path(b), limit=limit, ids=ids)
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


def _options(micro_step: bool, mapping: MappingArgument, steps: str | None, ranks: str | None) -> ParseOptions:
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
