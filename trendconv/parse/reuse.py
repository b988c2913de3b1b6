"""Which shards of an earlier parse are still good, and which shards no unit wants any more."""

from __future__ import annotations

from pathlib import Path

from trendconv import shards
from trendconv.errors import DataError, cannot_write
from trendconv.parse.tasks import ParseTask, source_stats

OK, STALE, CORRUPT, MISSING = "ok", "stale", "corrupt", "missing"
STATUSES = (OK, STALE, CORRUPT, MISSING)


def status_of(task: ParseTask, options: dict | None = None) -> tuple[str, dict | None]:
    """ok (reusable), stale (sources or options changed), corrupt (unreadable) or missing, and the shard's meta.

    OPTIONS stands in for the task's `options.record()` where only that record is known (inspect).
    """
    path = task.shard_path
    if not path.is_file():
        return MISSING, None
    try:
        meta = shards.read_meta(path)
    except DataError:
        return CORRUPT, None
    fresh = (
        meta.get("shard_format") == shards.SHARD_FORMAT
        and meta.get("input_format") == task.format.name
        and meta.get("options") == (options or task.options.record())
        and meta.get("sources") == source_stats(task)
    )
    return (OK if fresh else STALE), meta


def remove_orphans(part: Path, tasks: list[ParseTask]) -> int:
    """Shards of units that are no longer in DATA would otherwise be loaded as if they were."""
    wanted = {task.shard_path for task in tasks}
    orphans = [path for path in shards.list_shards(part) if path not in wanted]
    for path in orphans:
        try:
            path.unlink()
        except OSError as exc:
            raise cannot_write(path, exc) from None
    return len(orphans)
