"""Scan a DATA directory for msprobe monitor CSV files (docs/monitor-format.md §3), deterministically.

The reference lists directories in raw file-system order and lets the last listed run of a rank win; here
every listing is sorted, a rank's newest run is used, and everything left out is reported.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from trendconv.errors import DataError, plural, require_utf8
from trendconv.formats.monitor.metrics import METRICS
from trendconv.scan.fs import check_data, file_size, is_dir, is_file, list_dir
from trendconv.scan.packed import PackedUnits, quick_pickle
from trendconv.selection import EVERYTHING, Selection

HOOK_PREFIXES = ("attention_hook", "linear_hook", "moe_router_weight_hook", "moe_router_logit_hook")
RUN_DIR = re.compile(r"([\w-]{0,20})-rank(\d{1,5})-")
_PART = re.compile(r"\w+_\d+-\d+_part_\d+\.csv$")
# No year in the tag: a leap year, so that a run started on 29 February is a date (the reference aborts on it).
_TIME_FORMAT, _YEAR = "%b%d_%H-%M-%S %Y", "2000"


@quick_pickle
@dataclass(frozen=True, slots=True)
class CsvFile:
    """One monitor CSV file: the unit of work of the parse stage. Slotted and without cached values: the main
    process holds one for every file of the run while it parses (100,000 files and more), and what it holds per
    file is what makes its memory grow with the file count."""

    rank: int
    run_dir: str
    name: str
    metric: str
    data: Path
    size: int | None = field(default=None, compare=False, repr=False)  # in bytes, as the scan found it
    # the steps <a>-<b> of the name, as the scan found them (else read from the name when asked for)
    first: int | None = field(default=None, compare=False, repr=False)
    last: int | None = field(default=None, compare=False, repr=False)

    @property
    def path(self) -> Path:
        return Path(self.file)

    @property
    def file(self) -> str:
        """The path as text, as str(DATA / run_dir / name) has it, made without a Path: the parse opens and stats
        every file by it, and two Path joins a file were a sixth of the parse of small files. (A Path of '.' drops
        it: str(Path('.') / 'a') is 'a'.)"""
        data = os.fspath(self.data)
        if data == ".":
            return f"{self.run_dir}/{self.name}"
        return f"{data}{'' if data.endswith('/') else '/'}{self.run_dir}/{self.name}"  # os.path.join, quicker

    @property
    def relative(self) -> str:
        return f"{self.run_dir}/{self.name}"

    @property
    def order(self) -> tuple:
        """Processing order (see `order`); the scan and the load stage sort by it."""
        steps = None if self.first is None else (self.first, self.last)
        return order(self.rank, self.run_dir, self.name, self.metric, steps)

    @property
    def identity(self) -> dict:
        """What its shard's meta says of it."""
        return {"rank": self.rank, "run_dir": self.run_dir, "file": self.name, "metric": self.metric}


def order(rank: int, run_dir: str, name: str, metric: str, steps: tuple[int, int] | None = None) -> tuple:
    """Processing order: rank, run, then each metric's files by step range (live `.csv` before `.csv.bak`); STEPS,
    the name's `<a>-<b>` where already known."""
    start, end = steps or step_range(name, metric)
    return (rank, run_dir, metric, start, end, name)


@dataclass
class MonitorScan:
    files: PackedUnits = field(default_factory=PackedUnits)  # in processing order
    warnings: list[str] = field(default_factory=list)
    skipped_files: Counter = field(default_factory=Counter)
    left_out: Counter = field(default_factory=Counter)  # outside the selection: what (a noun) -> count
    partly: int = 0  # files whose steps are only partly selected
    first_partly: CsvFile | None = None  # the first of them in processing order
    odd: int = 0  # files taken whose names go on after '.csv' (`<metric>_<a>-<b>.csv.bak`)
    first_odd: CsvFile | None = None  # the first of them in processing order


@dataclass(frozen=True)
class RunDir:
    name: str
    rank_text: str
    started: datetime

    @property
    def rank(self) -> int:
        return int(self.rank_text)


def has_run_dirs(data: Path) -> bool:
    """Whether DATA holds at least one run directory (what `format="auto"` looks for)."""
    return any(RUN_DIR.match(name) and is_dir(data / name) for name in list_dir(data))


def scan_monitor(data: Path, selection: Selection = EVERYTHING) -> MonitorScan:
    """Every accepted CSV file of DATA's run directories, in processing order; with a SELECTION, only the run
    directories of its ranks are listed, and only the files whose every step (by the name's `<a>-<b>`) it selects
    are taken (docs/user-guide.md, "Converting a subset")."""
    check_data(data)
    result = MonitorScan()
    runs = _run_dirs(data, result, selection)
    if not runs and not result.left_out:
        raise DataError(
            f"{data}: no monitor data: no run directories (expected names like 'Feb20_16-27-56-rank0-1a2b3c4d')"
        )
    # A run's files are sorted and packed before the next run is listed: only one run's files are objects at a time.
    for run in sorted(_newest_per_rank(data, runs, result), key=lambda run: (run.rank, run.name)):
        result.files.extend(sorted(_csv_files(data, run, result, selection), key=_order_of))
    _warn_partly(result, selection)
    if not result.files:
        raise DataError(_nothing_found(data, selection), warnings=result.warnings)
    _warn_unusual(result)
    return result


def _order_of(csv_file: CsvFile) -> tuple:
    return csv_file.order


def _earlier(first: CsvFile | None, csv_file: CsvFile) -> CsvFile:
    """The first in processing order of FIRST (None: none yet) and CSV_FILE."""
    return csv_file if first is None else min(first, csv_file, key=_order_of)


def _nothing_found(data: Path, selection: Selection) -> str:
    if selection:
        return (
            f"{data}: no monitor data in the selection ({selection}): no selected run directory holds a metric "
            "CSV file whose steps are all selected"
        )
    return f"{data}: no monitor data: the run directories hold no metric CSV files"


def _run_dirs(data: Path, result: MonitorScan, selection: Selection) -> list[RunDir]:
    runs = []
    for name in list_dir(data):
        match = RUN_DIR.match(name)
        if match and is_dir(data / name):
            if not selection.rank(int(match[2])):
                result.left_out["run directory"] += 1
                continue
            require_utf8(data / name)
            runs.append(RunDir(name, match[2], _started(data / name, match[1])))
    return runs


def _started(path: Path, tag: str) -> datetime:
    try:
        return datetime.strptime(f"{tag} {_YEAR}", _TIME_FORMAT)
    except ValueError:
        raise DataError(
            f"{path}: named like a monitor run directory, but {tag!r} is not a time tag like 'Feb20_16-27-56'; "
            "rename or move it"
        ) from None


def _newest_per_rank(data: Path, runs: list[RunDir], result: MonitorScan) -> list[RunDir]:
    """One run per rank string, as the reference; here the newest by its time tag, and the others are named."""
    by_rank: dict[str, list[RunDir]] = {}
    for run in runs:
        by_rank.setdefault(run.rank_text, []).append(run)
    chosen = []
    for rank_text, candidates in sorted(by_rank.items(), key=lambda item: (int(item[0]), item[0])):
        newest = max(candidates, key=lambda run: (run.started, run.name))
        chosen.append(newest)
        for run in sorted(candidates, key=lambda run: run.name):
            if run is not newest:
                result.warnings.append(
                    f"{data / run.name}: another run of rank{rank_text}; using the newer {newest.name} only, "
                    f"{_files_of(data / run.name)} of this run left out (msprobe data2db also keeps one run per rank)"
                )
    return chosen


def _csv_files(data: Path, run: RunDir, result: MonitorScan, selection: Selection) -> list[CsvFile]:
    """The run's accepted files. Per file only text is handled (a run may hold 100,000 files): its Path is made
    when something asks for it."""
    files = []
    run_path = data / run.name
    for name in list_dir(run_path):
        size = file_size(os.path.join(run_path, name))
        if size is None:
            continue
        named = _named(name)
        if named is None:
            result.skipped_files[_skip_reason(name)] += 1
            continue
        if not name.isascii():  # the run directory's name was checked
            require_utf8(run_path / name)
        metric, first, last = named
        csv_file = CsvFile(run.rank, run.name, name, metric, data, size, first, last)
        if selection.step_range(first, last):
            files.append(csv_file)
            if not name.endswith(".csv"):
                result.odd += 1
                result.first_odd = _earlier(result.first_odd, csv_file)
        else:
            result.left_out["monitor CSV file"] += 1
            if selection.steps.meets(first, last):
                result.partly += 1
                result.first_partly = _earlier(result.first_partly, csv_file)
    return files


def _warn_partly(result: MonitorScan, selection: Selection) -> None:
    """A file is taken whole or not at all: say which files the selected steps only cut into."""
    if result.partly:
        result.warnings.append(
            f"{plural(result.partly, 'monitor CSV file')} only partly inside the selected steps left out "
            f"(first: {result.first_partly.relative}): a file is taken only when its name's steps <a>-<b> are all "
            f"selected ({selection}); select all of its steps to take it"
        )


def _files_of(run_path: Path) -> str:
    """How many CSV files a run left out holds, in words; its being unreadable does not matter, as it is not read."""
    try:
        names = [name for name in list_dir(run_path) if metric_of(name) and is_file(run_path / name)]
    except DataError:
        return "the CSV files (the directory cannot be read)"
    return plural(len(names), "CSV file")


def metric_of(name: str) -> str | None:
    """docs/monitor-format.md §3.2: the metric a file name is accepted for; the name need only start with
    `<metric>_<a>-<b>.csv`."""
    named = _named(name)
    return named and named[0]


def _named(name: str) -> tuple[str, int, int] | None:
    """The metric and the steps `<a>-<b>` of an accepted file name (see `metric_of`)."""
    metric = _METRICS.get(name.rpartition("_")[0])  # the one string of each metric, not one per file
    steps = step_range(name, metric) if metric else None
    return steps and (metric, *steps)


_METRICS = {metric: metric for metric in METRICS}
# Compiled once: the scan and the load ask for every file's steps, and there may be 100,000 files.
_STEPS = {metric: re.compile(rf"{metric}_(\d+)-(\d+)\.csv") for metric in METRICS}


def step_range(name: str, metric: str) -> tuple[int, int] | None:
    """The `<a>-<b>` of the name: the reference never uses it; here it orders a metric's files, and a split
    output puts the files of one range in one database."""
    match = (_STEPS.get(metric) or re.compile(rf"{metric}_(\d+)-(\d+)\.csv")).match(name)
    return (int(match[1]), int(match[2])) if match else None


def _skip_reason(name: str) -> str:
    if _PART.match(name):
        return "split file (<metric>_<a>-<b>_part_<i>.csv)"
    if name.startswith(HOOK_PREFIXES):
        return "L2 feature file (*_hook_*.csv)"
    if name == "stack_info.csv":
        return "stack_info.csv (call stacks, no statistics)"
    return "not a metric CSV file"


def _warn_unusual(result: MonitorScan) -> None:
    """Where msprobe data2db loses or adds data without a word, say so with counts."""
    parts = result.skipped_files.get("split file (<metric>_<a>-<b>_part_<i>.csv)", 0)
    if parts:
        result.warnings.append(
            f"{plural(parts, 'split CSV file')} (<metric>_<a>-<b>_part_<i>.csv) left out: msprobe data2db does not "
            "read them either, so their rows are not in the database"
        )
    hooks = result.skipped_files.get("L2 feature file (*_hook_*.csv)", 0)
    if hooks:
        result.warnings.append(
            f"{plural(hooks, 'L2 feature CSV file')} (*_hook_*.csv) left out, as msprobe data2db does"
        )
    if result.odd:
        result.warnings.append(
            f"{plural(result.odd, 'file')} with a name that goes on after '.csv' converted, as msprobe data2db does "
            f"(e.g. {result.first_odd.relative}); where such a file repeats a row of the live file, the live row is "
            "kept"
        )
