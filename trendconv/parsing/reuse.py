"""Which shards of an earlier parse are still good, and which shards no unit wants any more."""

from __future__ import annotations

import contextlib
from pathlib import Path

from trendconv import shards
from trendconv.errors import DataError, cannot_write, plural
from trendconv.formats import Format
from trendconv.parsing.tasks import ParseTask, source_stats
from trendconv.selection import EVERYTHING, Selection

OK, STALE, CORRUPT, MISSING = "ok", "stale", "corrupt", "missing"
STATUSES = (OK, STALE, CORRUPT, MISSING)


def status_of(task: ParseTask, options: dict | None = None) -> tuple[str, dict | None]:
    """ok (reusable), stale (sources, options or shard format changed), corrupt (not a valid shard of the
    task's unit) or missing, and the shard's meta.

    OPTIONS stands in for the task's `options.record()` where only that record is known (inspect).
    """
    path = task.shard_path
    if not path.is_file():
        return MISSING, None
    try:
        meta = shards.read_meta(path, task.format)
    except shards.OtherShardFormat:
        return STALE, None
    except DataError:
        return CORRUPT, None
    if any(meta[key] != value for key, value in task.format.identity(task.unit).items()):
        return CORRUPT, None  # a valid meta of another unit: the file was moved or edited
    fresh = meta["options"] == (options or task.options.record()) and meta["sources"] == source_stats(task)
    return (OK if fresh else STALE), meta


def remove_orphans(
    part: Path, tasks: list[ParseTask], fmt: Format, selection: Selection = EVERYTHING
) -> tuple[int, list[Path]]:
    """Shards of units that are no longer in DATA would otherwise be loaded as if they were: they are removed.

    Only trendconv's own: a regular file under the shard directory whose valid meta names it (shards.read_own).
    Anything else named *.parquet there (a user's file, a link, a damaged file) is left in place and returned.
    Shards of units outside SELECTION stay, unloaded, for a later parse that selects them.
    """
    wanted = {task.shard_path for task in tasks}
    directory = shards.shard_dir(part)
    removed, foreign = 0, []
    for path in shards.list_shards(part):
        if path in wanted:
            continue
        meta = _own_meta(directory, path, fmt)
        if meta is not None and not fmt.meta_selected(meta, selection):
            continue
        if meta is not None:
            try:
                path.unlink()
            except OSError as exc:
                raise cannot_write(path, exc) from None
            removed += 1
            if path.parent != directory:  # a sub-directory of shards: gone too once empty (rmdir keeps a full one)
                with contextlib.suppress(OSError):
                    path.parent.rmdir()
        else:
            foreign.append(path)
    return removed, foreign


def _own_meta(directory: Path, path: Path, fmt: Format) -> dict | None:
    """The meta of a shard trendconv wrote, or None for any other file."""
    if path.is_symlink():
        return None
    try:
        return shards.read_own(directory, path.relative_to(directory).as_posix(), fmt).meta
    except DataError:
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
