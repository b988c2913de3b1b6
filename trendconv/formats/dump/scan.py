"""Scan a DATA directory for step*/rank*|proc*/dump.json file sets (docs/dump-format.md §1), deterministically."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from trendconv import int64
from trendconv.errors import DataError
from trendconv.scan.fs import check_data, is_dir, is_file, list_dir
from trendconv.scan.packed import quick_pickle
from trendconv.selection import EVERYTHING, Selection

STEPS_LEFT_OUT, ITEMS_LEFT_OUT = "step directory", "rank/proc directory"


@quick_pickle  # sent to a worker, kept packed while the parse runs (trendconv.scan.packed)
@dataclass(frozen=True, slots=True)
class FileSet:
    """One (step, rank) of dump data: the unit of work of the parse stage."""

    step: int
    rank: int
    item: str  # the rank*/proc* directory name
    step_dir: str
    data: Path

    @property
    def dir(self) -> Path:
        return self.data / self.step_dir / self.item

    @property
    def dump_json(self) -> Path:
        return self.dir / "dump.json"

    @property
    def construct_json(self) -> Path:
        return self.dir / "construct.json"

    def relative(self, name: str) -> str:
        return f"{self.step_dir}/{self.item}/{name}"

    @property
    def identity(self) -> dict:
        """What its shard's meta says of it."""
        return {"step": self.step, "rank": self.rank, "item": self.item}


@dataclass
class ScanResult:
    file_sets: list[FileSet] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    proc_mappings: dict[int, dict[str, int]] = field(default_factory=dict)
    left_out: dict[str, int] = field(default_factory=dict)  # outside the selection: what (a noun) -> count


def scan(data: Path, selection: Selection = EVERYTHING) -> ScanResult:
    """All file sets in processing order: steps ascending, then ranks ascending, then mapped procs.

    Only the SELECTION's step directories are listed, and only its ranks' dump.json files are looked at (a step
    with proc directories looks at, never opens, every dump.json of the step: a proc's rank depends on them)."""
    check_data(data)
    result = ScanResult()
    steps, unselected = _step_dirs(data, selection)
    _left_out(result, STEPS_LEFT_OUT, unselected)
    for step, step_dir in steps:
        _scan_step(data, step, step_dir, result, selection)
    if not result.file_sets:
        raise DataError(_nothing_found(data, bool(steps) or bool(unselected), selection), warnings=result.warnings)
    return result


def _left_out(result: ScanResult, what: str, count: int) -> None:
    if count:
        result.left_out[what] = result.left_out.get(what, 0) + count


def has_steps(data: Path) -> bool:
    """Whether DATA holds at least one step* directory (what `format="auto"` looks for)."""
    return bool(_step_dirs(data)[0])


def _nothing_found(data: Path, any_step: bool, selection: Selection) -> str:
    if not any_step:
        return f"{data}: no dump data: no 'step*' directories (expected names like 'step0')"
    if selection:
        return (
            f"{data}: no dump data in the selection ({selection}): no selected step directory holds a selected "
            "rank*/proc* directory with a dump.json"
        )
    return f"{data}: no dump data: no step directory holds a rank*/proc* directory with a dump.json"


def _scan_step(data: Path, step: int, step_dir: str, result: ScanResult, selection: Selection) -> None:
    path = data / step_dir
    items, skipped = _items_of(path)
    if not items:
        shown = ", ".join(skipped) or "(none — no rank*/proc* entries at all)"
        result.warnings.append(
            f"No valid 'rank*' or 'proc*' directories found in: {path}. Expected directory names like "
            f"'rank0' or 'proc0'. Skipped entries: {shown}"
        )
        return
    if not any(name.startswith("proc") for _, name in items):  # each rank known by its name: look at those selected
        chosen = [item for item in items if selection.rank(item[0])]
        _left_out(result, ITEMS_LEFT_OUT, len(items) - len(chosen))
        items = chosen
    ranked = _map_procs(path, _with_dump_json(path, items, result, selection))
    chosen = [(rank, name) for rank, name in ranked if selection.rank(rank)]
    _left_out(result, ITEMS_LEFT_OUT, len(ranked) - len(chosen))
    procs = {name: rank for rank, name in chosen if name.startswith("proc")}
    if procs:
        result.proc_mappings[step] = procs
    result.file_sets.extend(FileSet(step, rank, name, step_dir, data) for rank, name in chosen)


def _with_dump_json(path: Path, items: list, result: ScanResult, selection: Selection) -> list[tuple[int, str]]:
    """The items holding a dump.json; the others are warned of, unless the selection leaves them out anyway."""
    kept = []
    for number, name in items:
        if is_file(path / name / "dump.json"):
            kept.append((number, name))
        elif selection.ranks is None or name.startswith("rank") and selection.rank(number):
            result.warnings.append(f"No 'dump.json' file found in: {path / name}")
    return kept


def _items_of(step_path: Path) -> tuple[list[tuple[int, str]], list[str]]:
    items, skipped = [], []
    for name in list_dir(step_path):
        if not name.startswith(("rank", "proc")):
            continue
        number = _parse_int(name[4:])
        if number is None or not is_dir(step_path / name):
            skipped.append(name)
        else:
            items.append((_fitting(number, step_path / name), name))
    _refuse_duplicates(step_path, items)
    return items, skipped


def _map_procs(step_path: Path, items: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """docs/dump-format.md §1.4: ranks ascending, then procs ascending renumbered from (largest rank + 1), or 0."""
    ranks = sorted((item for item in items if item[1].startswith("rank")), key=lambda item: item[0])
    procs = sorted((item for item in items if item[1].startswith("proc")), key=lambda item: item[0])
    start = ranks[-1][0] + 1 if ranks else 0
    mapped = [(start + index, name) for index, (_, name) in enumerate(procs)]
    for rank, name in mapped:
        if not int64.fits(rank):
            raise DataError(
                f"{step_path / name}: numbered after {ranks[-1][1]}, this proc directory would be rank {rank}, "
                "which does not fit a 64-bit integer"
            )
    return ranks + mapped


def _step_dirs(parent: Path, selection: Selection = EVERYTHING) -> tuple[list[tuple[int, str]], int]:
    """The selected step directories, sorted, and how many others there are."""
    children, unselected = [], 0
    for name in list_dir(parent):
        if name.startswith("step") and (number := _parse_int(name[4:])) is not None:
            if is_dir(parent / name):
                if selection.step(_fitting(number, parent / name)):
                    children.append((number, name))
                else:
                    unselected += 1
    _refuse_duplicates(parent, children)
    return sorted(children), unselected


def _refuse_duplicates(parent: Path, numbered: list[tuple[int, str]]) -> None:
    by_number: dict[tuple[str, int], str] = {}
    for number, name in numbered:
        twin = by_number.setdefault((name[:4], number), name)
        if twin != name:
            raise DataError(f"{parent}: '{twin}' and '{name}' both mean {name[:4]} {number}; rename one of them")


def _parse_int(text: str) -> int | None:
    """Python int() acceptance, as the reference parses directory numbers (`step01`, `rank-1`)."""
    try:
        return int(text)
    except ValueError:
        return None


def _fitting(number: int, path: Path) -> int:
    if not int64.fits(number):
        raise DataError(f"{path}: the number {number} does not fit a 64-bit integer")
    return number
