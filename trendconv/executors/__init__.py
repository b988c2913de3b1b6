"""Executors: where parse tasks run. Inline for one worker, a bounded local process pool otherwise.

An executor maps a picklable function over tasks and yields `Outcome`s as tasks finish (not in task
order). At most `max_in_flight` tasks are submitted at once, so memory stays bounded however many tasks
there are. Closing the iterator early stops submission and waits for the tasks already running, so
their results (shards) are complete.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import os
import signal
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Protocol

MAX_WORKERS = 128


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


def _forkserver_context() -> multiprocessing.context.BaseContext:
    context = multiprocessing.get_context("forkserver")
    # Workers fork from a server that has imported the parser once, not each on its own.
    context.set_forkserver_preload(["trendconv.parse"])
    return context


def prestart(workers: int | None) -> None:
    """Start the process pool's forkserver now if a pool is likely (WORKERS above one, or None on a machine
    of several cores). Its import of the parser, about half a second, then runs on another core while this
    process goes on with its own imports and the scan, rather than between the scan and the first task.
    """
    if (workers or os.cpu_count() or 1) > 1:
        _forkserver_context()
        multiprocessing.forkserver.ensure_running()


def stop_forkserver() -> None:
    """Stop the forkserver, if this process started one; only once no pool runs. multiprocessing keeps it for
    the life of the interpreter, and after that it takes up to its own start-up time to notice."""
    server = multiprocessing.forkserver._forkserver
    if server._forkserver_pid is not None:
        os.kill(server._forkserver_pid, signal.SIGKILL)  # idle, or still importing: nothing to finish
        server._stop()  # closes its pipe, waits for it, removes its socket


class ProcessExecutor:
    """A local process pool; workers are started with forkserver, safe with pyarrow's threads."""

    def __init__(self, workers: int):
        self.workers = workers

    def imap_unordered(self, fn: Callable, tasks: Iterable) -> Iterator[Outcome]:
        pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=_forkserver_context())
        pending: dict[Future, Any] = {}
        try:
            for task in tasks:
                pending[pool.submit(fn, task)] = task
                if len(pending) >= 2 * self.workers:
                    yield from _drain(pending, FIRST_COMPLETED)
            while pending:
                yield from _drain(pending, FIRST_COMPLETED)
        finally:
            for future in pending:
                future.cancel()
            pool.shutdown(wait=True, cancel_futures=True)


def _drain(pending: dict[Future, Any], return_when) -> Iterator[Outcome]:
    done, _ = wait(pending, return_when=return_when)
    for future in done:
        task = pending.pop(future)
        error = future.exception()
        yield Outcome(task, error=error) if error else Outcome(task, future.result())


def local_executor(workers: int) -> Executor:
    return InlineExecutor() if workers == 1 else ProcessExecutor(workers)
