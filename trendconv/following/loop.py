"""Following DATA until told to stop: every format's follower looks once per poll; WORK stays locked throughout.

A stop is clean: Ctrl-C (or SIGTERM, SIGHUP) during the wait between looks stops at once; during a batch it stops
once the batch is in the database (docs/live.md §3). `stop_after_idle` stops after that many seconds in which
nothing in DATA changed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from trendconv import formats, interrupt, workdir
from trendconv.errors import DataError
from trendconv.following.follower import Follower
from trendconv.following.summary import Batch, FollowSummary
from trendconv.formats import Format
from trendconv.options import ParseOptions
from trendconv.scan import check_data


def follow(
    data: Path,
    out_dir: Path,
    work: Path,
    options: ParseOptions,
    *,
    input_format: str,
    poll: float,
    stop_after_idle: float | None = None,
    on_batch: Callable[[Batch], None] | None = None,
    **kwargs,
) -> list[FollowSummary]:
    """Follow DATA into OUT_DIR's databases until stopped; KWARGS: index, workers, executor. One summary per
    format followed, in registry order."""
    check_data(data)
    followers: dict[Format, Follower] = {}
    with workdir.locked(work):
        try:
            _watch(data, out_dir, work, options, input_format, poll, stop_after_idle, on_batch, followers, kwargs)
        except KeyboardInterrupt:
            interrupt.honour()  # a stop asked for, and done: the databases hold whole batches
        finally:
            for follower in followers.values():
                follower.close()
    return [followers[fmt].summary for fmt in sorted(followers, key=lambda fmt: formats.names().index(fmt.name))]


def _watch(data, out_dir, work, options, input_format, poll, stop_after_idle, on_batch, followers, kwargs) -> None:
    idle_since = time.monotonic()
    while True:
        with interrupt.deferred():  # a signal during a batch stops the loop once the batch is done
            changed = False
            for fmt in _formats(data, input_format):
                if fmt not in followers:
                    followers[fmt] = Follower(
                        fmt, data, out_dir, work, options, settle=poll, on_batch=on_batch, **kwargs
                    )
                    followers[fmt].start()
                    changed = True
                changed |= followers[fmt].poll()
        now = time.monotonic()
        if changed:
            idle_since = now
        elif stop_after_idle is not None and now - idle_since >= stop_after_idle:
            return
        time.sleep(poll)


def _formats(data: Path, input_format: str) -> list[Format]:
    """The formats to follow: the one asked for, or for auto those found so far (DATA may still be empty)."""
    try:
        return formats.chosen(data, input_format)
    except DataError:
        return []
