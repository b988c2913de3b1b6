"""Following DATA until told to stop: every format's follower looks once per poll; WORK stays locked throughout.

A stop is clean: Ctrl-C (or SIGTERM, SIGHUP) during the wait between looks stops at once; during a batch it stops
once the batch is in the database (docs/live.md §3). `stop_after_idle` stops once nothing in DATA changed for that
many seconds and every unit in it is in the database (or does not parse).
"""

from __future__ import annotations

import time
from pathlib import Path

from trendconv import formats, interrupt, workdir
from trendconv.errors import DataError, UsageError
from trendconv.following.follower import Follower
from trendconv.following.summary import FollowSummary
from trendconv.formats import Format
from trendconv.loading.outputs import OutputInUse
from trendconv.options import ParseOptions
from trendconv.scan import check_data, is_dir


def follow(
    data: Path,
    out_dir: Path,
    work: Path,
    options: ParseOptions,
    *,
    input_format: str,
    poll: float,
    stop_after_idle: float | None = None,
    **kwargs,
) -> list[FollowSummary]:
    """Follow DATA into OUT_DIR's databases until stopped; KWARGS go to each Follower (index, workers, executor,
    on_batch, on_warning). One summary per format followed, in registry order."""
    check_data(data)
    followers: dict[Format, Follower] = {}
    refused: set[Format] = set()  # found later, while another process writes its output
    gone = [False]  # DATA is gone, and the warning said so
    warn = kwargs.get("on_warning") or (lambda warning: None)

    def looked() -> bool:
        """One look for every format; whether anything happened."""
        if not is_dir(data):
            if not gone[0]:
                warn(f"{data}: DATA is gone; the databases stay as they are, and the follower waits for it")
            gone[0] = True
            return False
        gone[0] = False
        busy = False
        for fmt in _formats(data, input_format, followers):
            if fmt in refused:
                continue
            if fmt not in followers:
                follower = _started(Follower(fmt, data, out_dir, work, options, settle=poll, **kwargs), followers)
                if follower is None:
                    refused.add(fmt)
                    continue
                followers[fmt] = follower
                busy = True
            busy |= followers[fmt].poll()
        return busy

    with workdir.locked(work):
        try:
            _watch(looked, poll, stop_after_idle)
        except KeyboardInterrupt:
            interrupt.honour()  # a stop asked for, and done: the databases hold whole batches
        finally:
            for follower in followers.values():
                follower.close()
    order = formats.names()
    return [followers[fmt].summary for fmt in sorted(followers, key=lambda fmt: order.index(fmt.name))]


def _started(follower: Follower, followers: dict[Format, Follower]) -> Follower | None:
    """FOLLOWER started; or, when another process writes its output and FOLLOWERS already follow other formats,
    None, and a warning says so (with none yet, the command is refused)."""
    try:
        follower.start()
    except OutputInUse as exc:
        follower.close()
        if not followers:
            raise
        follower.on_warning(f"{exc}; its {follower.fmt.name} data is not followed")
        return None
    except BaseException:
        follower.close()
        raise
    return follower


def _watch(looked, poll: float, stop_after_idle: float | None) -> None:
    idle_since = time.monotonic()
    while True:
        with interrupt.deferred():  # a signal during a batch stops the loop once the batch is in
            busy = looked()
        now = time.monotonic()
        if busy:
            idle_since = now
        elif stop_after_idle is not None and now - idle_since >= stop_after_idle:
            return
        time.sleep(poll)


def _formats(data: Path, input_format: str, following) -> list[Format]:
    """The formats to follow: the one asked for, or for auto those found so far and those FOLLOWING already (DATA
    may still be empty, or be emptied or gone meanwhile: their followers say so)."""
    if input_format != formats.AUTO:
        return [formats.get(input_format)]
    try:
        found = formats.detect(data)
    except (DataError, UsageError):  # UsageError: DATA is gone (it was there at the start)
        found = []
    return [fmt for fmt in formats.FORMATS.values() if fmt in found or fmt in following]
