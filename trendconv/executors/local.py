"""The local executors: in this process for one worker or little input, a bounded local process pool otherwise.

An executor maps a picklable function over tasks and yields `Outcome`s as tasks finish (not in task
order). The pool itself (trendconv.executors.pool) is imported only when one is wanted: multiprocessing and
concurrent.futures are a cost `trendconv --version` or a small conversion has no use for.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from trendconv.faults import fault_point

MAX_WORKERS = 128
# Input below this many bytes is parsed in the main process, whatever the worker count: a pool's start (a
# forkserver that imports the parser, then the workers) takes longer than parsing this much in one process.
# Tests set it to 0 so that their small inputs still go through the pool.
POOL_MIN_BYTES_ENV = "TRENDCONV_POOL_MIN_BYTES"
POOL_MIN_BYTES = 8 * 1024 * 1024
_SIZE_WALK_ENTRIES = 10_000  # a directory with more entries than this is taken as large, not walked to its end
_SIZE_WALK_DEPTH = 4  # DATA/step/rank/dump.json, DATA/run/file.csv: the formats' files lie this deep or less


@dataclass(frozen=True)
class Outcome:
    task: Any
    value: Any = None
    error: BaseException | None = None


class Executor(Protocol):
    workers: int

    def imap_unordered(self, fn: Callable, tasks: Iterable) -> Iterator[Outcome]: ...


def default_workers(task_count: int) -> int:
    return max(1, min(os.cpu_count() or 1, task_count, MAX_WORKERS))


class InlineExecutor:
    """Runs tasks one by one in this process: no pool start-up, easy to debug and profile."""

    workers = 1

    def imap_unordered(self, fn: Callable, tasks: Iterable) -> Iterator[Outcome]:
        for task in tasks:
            try:
                yield Outcome(task, fn(task))
            except Exception as exc:  # noqa: BLE001 - the caller decides what a failure means
                yield Outcome(task, error=exc)


class ProcessExecutor:
    """A local process pool (trendconv.executors.pool); workers are started with forkserver, safe with pyarrow's
    threads."""

    def __init__(self, workers: int):
        self.workers = workers

    def imap_unordered(self, fn: Callable, tasks: Iterable) -> Iterator[Outcome]:
        from trendconv.executors import pool

        return pool.imap_unordered(self.workers, fn, tasks)


def pool_min_bytes() -> int:
    """POOL_MIN_BYTES, or what TRENDCONV_POOL_MIN_BYTES says (a count of bytes)."""
    value = os.environ.get(POOL_MIN_BYTES_ENV, "")
    return int(value) if value.isdigit() else POOL_MIN_BYTES


def pool_pays(workers: int, planned_bytes: int | None) -> bool:
    """Whether a pool of WORKERS finishes PLANNED_BYTES of input (None: unknown) sooner than this process alone."""
    return workers > 1 and (planned_bytes is None or planned_bytes >= pool_min_bytes())


def local_executor(workers: int, planned_bytes: int | None = None) -> Executor:
    """In this process for one worker or for less input than a pool's start is worth; else a pool of WORKERS.
    Either way the shards, and so the database, are the same."""
    return ProcessExecutor(workers) if pool_pays(workers, planned_bytes) else InlineExecutor()


def prestart(workers: int | None, data: Path | None = None, names: Iterable[str] = ()) -> None:
    """Start the process pool's forkserver now if a pool is likely: WORKERS above one (or None on a machine of
    several cores) and, when DATA is given, at least `pool_min_bytes()` in it. Its import of the parser, about
    half a second, then runs on another core while this process goes on with its own imports and the scan,
    rather than between the scan and the first task. With DATA and the NAMES of the formats to parse (auto among
    them: those found in DATA), the server imports only their parsers: the first worker forks once they are in."""
    likely = (workers or os.cpu_count() or 1) > 1
    if likely and (data is None or _holds_at_least(data, pool_min_bytes())):
        from trendconv.executors import pool

        pool.start_forkserver(_formats_to_parse(data, list(names)))
        fault_point("prestarted")


def _formats_to_parse(data: Path | None, names: list[str]) -> list | None:
    """The formats NAMES (auto: those found in DATA); None (every format) where that is not known: the run itself
    reports what is wrong with DATA or a name."""
    from trendconv import formats
    from trendconv.errors import TrendconvError

    if not names or data is None:
        return None
    try:
        return [fmt for name in names for fmt in formats.chosen(Path(data), name)]
    except TrendconvError:
        return None


def _holds_at_least(data: Path, size: int) -> bool:
    """Whether the files under DATA (a few levels deep) add up to SIZE bytes: a guess at the input, made before the
    scan; the scan's own units decide whether a pool is used (`local_executor`)."""
    total, entries, pending = 0, 0, [(str(data), 0)]
    while pending:
        directory, depth = pending.pop()
        try:
            with os.scandir(directory) as listing:
                for entry in listing:
                    entries += 1
                    if entries > _SIZE_WALK_ENTRIES:
                        return True
                    if entry.is_file(follow_symlinks=False):
                        total += entry.stat(follow_symlinks=False).st_size
                    elif depth < _SIZE_WALK_DEPTH and entry.is_dir(follow_symlinks=False):
                        pending.append((entry.path, depth + 1))
                    if total >= size:
                        return True
        except OSError:  # unreadable or gone: the scan says so, with the path
            continue
    return False


def start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker now, with the signals blocked (see trendconv.executors.pool)."""
    from trendconv.executors import pool

    pool.start_resource_tracker()


def stop_helpers() -> None:
    """Stop the processes multiprocessing keeps for the life of the interpreter, if this process started any: the
    forkserver (only once no pool runs), then the resource tracker, waited for, so that none of them outlives the
    command, not even as a zombie of an init that does not reap."""
    forkserver = sys.modules.get("multiprocessing.forkserver")
    if forkserver is not None:
        _stop_forkserver(forkserver._forkserver)
    tracker = sys.modules.get("multiprocessing.resource_tracker")
    if tracker is not None:
        _stop_tracker(tracker._resource_tracker)


_command = False  # set by `as_command`


def as_command() -> None:
    """This process is a trendconv command's own, not a program's that calls the library: numpy may be hidden from
    it (trendconv.executors.numpyless), and `release_forkserver` may stop the pools' forkserver early."""
    global _command
    _command = True


def is_command() -> bool:
    """Whether `as_command` was said of this process."""
    return _command


def release_forkserver() -> None:
    """The command's pools are done: their forkserver, which keeps the parsers' imports (some 35 MiB), goes now
    rather than at exit, before the index build that is a run's peak of memory. A later pool starts another. In a
    program that calls the library, the forkserver is the program's too, and stays."""
    forkserver = sys.modules.get("multiprocessing.forkserver")
    if _command and forkserver is not None:
        _stop_forkserver(forkserver._forkserver)


def _stop_forkserver(server) -> None:
    if server._forkserver_pid is not None:
        os.kill(server._forkserver_pid, signal.SIGKILL)  # idle, or still importing, it has nothing to finish
        server._stop()  # closes its pipe, waits for it, removes its socket


_TRACKER_WAIT = 1.0  # seconds


def _stop_tracker(tracker) -> None:
    """Close the tracker's pipe, which it takes as the signal to end, and wait a moment for it. Not longer: a
    process still holding the pipe (a Dask worker shutting down, say) keeps it alive, and it ends with that one."""
    if tracker._fd is None:
        return
    pid = tracker._pid
    os.close(tracker._fd)
    tracker._fd = tracker._pid = None
    deadline = time.monotonic() + _TRACKER_WAIT
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0]:
                return
        except ChildProcessError:
            return
        time.sleep(0.005)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
