"""Which shards of an earlier parse are still good, and which shards no unit wants any more."""

from __future__ import annotations

import bisect
import contextlib
import functools
import os
from array import array
from collections.abc import Sequence
from pathlib import Path

from trendconv import shards
from trendconv.blocks import JsonList
from trendconv.errors import DataError, cannot_write, plural
from trendconv.formats import Format
from trendconv.parsing.tasks import ParseTask, source_stats
from trendconv.selection import EVERYTHING, Selection

OK, STALE, CORRUPT, MISSING = "ok", "stale", "corrupt", "missing"
STATUSES = (OK, STALE, CORRUPT, MISSING)


def status_of(
    task: ParseTask, options: dict | None = None, chunks: Chunks | None = None, present: set[str] | None = None
) -> tuple[str, dict | None]:
    """ok (reusable), stale (sources, options or shard format changed), corrupt (not a valid shard of the
    task's unit) or missing, and the shard's meta: of the unit's own shard file, or else of its shard in one of
    CHUNKS (a format with `Format.chunked`; the first good one in file-name order).

    OPTIONS stands in for the task's `options.record()` where only that record is known (inspect). PRESENT, the
    names under the shard directory (`present_shards`), spares a look at each absent shard file.
    """
    name = task.format.shard_name(task.unit)
    status, meta = (MISSING, None) if present is not None and name not in present else _own_status(task, options)
    if status == OK or chunks is None:
        return status, meta
    held = chunks.held(name)
    record, sources = options or task.options.record(), source_stats(task) if held else None
    for candidate in held:
        if _same_unit(task, candidate) and candidate["options"] == record and candidate["sources"] == sources:
            return OK, candidate
    if status == MISSING and held:
        return STALE, held[0]
    if status == MISSING and name in chunks.damaged:
        return CORRUPT, None
    return status, meta


def present_shards(part: Path) -> set[str] | None:
    """The shard names (`Format.shard_name`) of every entry under PART's shard directory, or None where a
    directory in it cannot be listed (each shard is then looked at on its own, and such a failure named)."""
    directory, failed = shards.shard_dir(part), []
    if not directory.exists():
        return set()
    names = set()
    for parent, directories, files in os.walk(directory, onerror=failed.append):
        relative = os.path.relpath(parent, directory)
        names.update(name if relative == "." else f"{relative}/{name}" for name in files + directories)
    return None if failed else names


def _own_status(task: ParseTask, options: dict | None) -> tuple[str, dict | None]:
    path = task.shard_path
    if not path.is_file():
        return MISSING, None
    try:
        meta = shards.read_meta(path, task.format)
    except shards.OtherShardFormat:
        return STALE, None
    except DataError:
        return CORRUPT, None
    if not _same_unit(task, meta):
        return CORRUPT, None  # a valid meta of another unit: the file was moved or edited
    fresh = meta["options"] == (options or task.options.record()) and meta["sources"] == source_stats(task)
    return (OK if fresh else STALE), meta


def _same_unit(task: ParseTask, meta: dict) -> bool:
    return all(meta[key] == value for key, value in task.format.identity(task.unit).items())


class Chunks:
    """The chunk files of a format's part of WORK (trendconv.shards) and the units' shards they hold.

    Kept small, as an earlier parse may have left 100,000 units in chunks (their metas as dicts were 300 MiB): a
    chunk's metas wait compressed in an unnamed file beside the chunks (trendconv.blocks) and are read back a chunk
    at a time, and per unit only the hash of its shard name and its chunk's number are in memory, sorted, to find
    the chunks that may hold a unit (a hash shared by two names only costs a look at one more chunk). With SPILL
    None, the compressed metas stay in memory."""

    _RECENT = 4  # chunks whose metas are kept decoded: a chunk's units come one after another

    def __init__(self, spill: Path | None, fmt: Format) -> None:
        self.format = fmt
        self.paths: list[Path] = []  # the good chunks, in file-name order: a chunk's number is its index here
        self.foreign: list[Path] = []  # under the chunk directory, not a chunk trendconv wrote
        self.broken: list[Path] = []  # a chunk whose footer names it, but is not valid: removed
        self.damaged: set[str] = set()  # units a foreign file's footer names: their status is corrupt
        self._metas = _ChunkMetas(spill=spill, prefix=".trendconv-chunks-")  # by chunk number
        self._hashes, self._numbers = array("q"), array("q")
        self._recent: dict[int, dict[str, list[dict]]] = {}

    def add(self, path: Path, metas: list[dict]) -> None:
        number = len(self.paths)
        self.paths.append(path)
        self._metas.append(metas)
        for meta in metas:
            self._hashes.append(_key(self.format.meta_shard_name(meta)))
            self._numbers.append(number)

    def close(self) -> None:
        """Every chunk is added: the units' hashes are sorted (stably: a hash's chunks stay in file-name order)."""
        order = sorted(range(len(self._hashes)), key=self._hashes.__getitem__)
        self._hashes = array("q", map(self._hashes.__getitem__, order))
        self._numbers = array("q", map(self._numbers.__getitem__, order))

    def held(self, name: str) -> list[dict]:
        """The metas of the unit whose shard name is NAME in every chunk that holds it, in file-name order."""
        found, key = [], _key(name)
        position, last = bisect.bisect_left(self._hashes, key), None
        while position < len(self._hashes) and self._hashes[position] == key:
            number = self._numbers[position]
            if number != last:
                found += self._by_name(number).get(name, [])
            position, last = position + 1, number
        return found

    def metas(self, number: int) -> list[dict]:
        """The metas of the units of chunk NUMBER (`paths[number]`)."""
        return self._metas[number]

    def _by_name(self, number: int) -> dict[str, list[dict]]:
        """Chunk NUMBER's metas by their units' shard names, kept for the next units (the last few chunks')."""
        by_name = self._recent.get(number)
        if by_name is None:
            by_name = self._recent[number] = {}
            for meta in self.metas(number):
                by_name.setdefault(self.format.meta_shard_name(meta), []).append(meta)
            if len(self._recent) > self._RECENT:
                del self._recent[next(iter(self._recent))]
        return by_name


class _ChunkMetas(JsonList):
    BLOCK = 1  # a block a chunk: its metas are read back together


_key = hash  # of a shard name: this process's own (salted), which is all the index needs


def _document(path: Path) -> object:
    try:
        return shards.footer_document(path)
    except DataError:
        return None


def _named_units(document: object, fmt: Format) -> set[str]:
    """The units a damaged chunk's footer seems to name, as far as it can be read."""
    try:
        return {fmt.meta_shard_name(unit) for unit in document["units"]}
    except (KeyError, TypeError, ValueError, AttributeError, IndexError):
        return set()


def chunks_of(part: Path, fmt: Format, *, spill: bool = True) -> Chunks:
    """Every chunk file of PART, its footer checked (trendconv.shards.read_chunk). Without SPILL the chunks' metas
    are kept (compressed) in memory, not in the shard directory: a look at WORK that writes nothing (`inspect`)."""
    directory = shards.shard_dir(part)
    found = Chunks(directory if spill else None, fmt)
    for path in shards.list_shards(part):
        if not shards.is_chunk(path, directory):
            continue
        try:
            metas = None if path.is_symlink() else shards.read_chunk(path, fmt)
        except DataError:
            metas = None
        if metas is None:
            document = _document(path)
            found.damaged.update(_named_units(document, fmt))
            names_it = type(document) is dict and document.get("chunk") == path.relative_to(directory).as_posix()
            (found.broken if names_it and not path.is_symlink() else found.foreign).append(path)
            continue
        found.add(path, metas)
    found.close()
    return found


def remove_orphans(
    part: Path,
    units: Sequence,
    fmt: Format,
    selection: Selection = EVERYTHING,
    chunks: Chunks | None = None,
    used: set[Path] | None = None,
) -> tuple[int, list[Path]]:
    """Shards of units that are no longer in DATA would otherwise be loaded as if they were: they are removed.

    Only trendconv's own: a regular file under the shard directory whose valid meta names it (shards.read_own),
    or a chunk whose valid footer names it. Anything else named *.parquet there (a user's file, a link, a damaged
    file) is left in place and returned. Shards of units outside SELECTION stay, unloaded, for a later parse that
    selects them. UNITS: the plan's. With CHUNKS (a chunked format), USED says which files hold good shards: a
    unit's own shard that is not one of them is replaced by one in a chunk, and a chunk none of whose units is
    used goes.
    """
    directory = shards.shard_dir(part)
    names = _UnitNames(units, fmt, directory)
    wanted = names if chunks is None else (used or set())
    removed, foreign = 0, list(chunks.foreign) if chunks else []
    for path in shards.list_shards(part):
        if path in wanted or (chunks is not None and shards.is_chunk(path, directory)):
            continue
        meta = _own_meta(directory, path, fmt)
        if meta is not None and not _selected(fmt, meta, selection):
            continue
        if meta is not None:
            removed += _remove(path, directory)
        else:
            foreign.append(path)
    if chunks is not None:
        removed += _remove_chunks(chunks, wanted, names, fmt, selection, directory)
    return removed, sorted(foreign)


class _UnitNames:
    """The shard names of UNITS (the plan's), made at the first question only: a WORK without shard files (a first
    parse) asks none. `in` takes a path under DIRECTORY, the shard directory."""

    def __init__(self, units: Sequence, fmt: Format, directory: Path):
        self._units, self._fmt, self._directory = units, fmt, directory

    @functools.cached_property
    def names(self) -> set[str]:
        return set(map(self._fmt.shard_name, self._units))

    def __contains__(self, path: Path) -> bool:
        return path.relative_to(self._directory).as_posix() in self.names


def _remove_chunks(
    chunks: Chunks, used: set[Path], units: _UnitNames, fmt: Format, selection: Selection, directory: Path
) -> int:
    """Remove the chunks none of whose units' shards is used; how many of their units are no longer in DATA."""
    gone = 0
    for path in chunks.broken:
        _remove(path, directory)
    for number, path in enumerate(chunks.paths):
        if path in used:
            continue
        metas = chunks.metas(number)
        if all(_selected(fmt, meta, selection) for meta in metas):
            _remove(path, directory)
            gone += sum(fmt.meta_shard_name(meta) not in units.names for meta in metas)
    return gone


def _selected(fmt: Format, meta: dict, selection: Selection) -> bool:
    try:
        return fmt.meta_selected(meta, selection)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError):  # a footer of an older trendconv
        return True


def _remove(path: Path, directory: Path) -> int:
    try:
        path.unlink()
    except OSError as exc:
        raise cannot_write(path, exc) from None
    if path.parent != directory:  # a sub-directory of shards: gone too once empty (rmdir keeps a full one)
        with contextlib.suppress(OSError):
            path.parent.rmdir()
    return 1


def _own_meta(directory: Path, path: Path, fmt: Format) -> dict | None:
    """The meta of a unit's shard trendconv wrote, or None for any other file. A shard of another shard format
    is trendconv's too when its footer names it (an older trendconv wrote it)."""
    if path.is_symlink():
        return None
    name = path.relative_to(directory).as_posix()
    try:
        return shards.read_own(directory, name, fmt).meta
    except shards.OtherShardFormat:
        return _older_own(path, name, fmt)
    except DataError:
        return None


def _older_own(path: Path, name: str, fmt: Format) -> dict | None:
    try:
        document = shards.footer_document(path)
        return document if fmt.meta_shard_name(document) == name else None
    except (DataError, KeyError, TypeError, ValueError, AttributeError, IndexError):
        return None


def foreign_warnings(part: Path, foreign: list[Path]) -> list[str]:
    """What the user is told of files under the shard directory that trendconv left in place."""
    if not foreign:
        return []
    directory = shards.shard_dir(part)
    return [
        f"{directory}: left {plural(len(foreign), 'file')} named *.parquet in place, as trendconv did not write "
        f"them (first: {foreign[0].relative_to(directory)}); they are not loaded"
    ]
