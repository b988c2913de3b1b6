"""The local executors: in this process for one worker, a bounded local process pool otherwise.

An executor maps a picklable function over tasks and yields `Outcome`s as tasks finish (not in task
order). At most `max_in_flight` tasks are submitted at once, so memory stays bounded however many tasks
there are. Closing the iterator early stops submission and waits for the tasks already running, so
their results (shards) are complete; after an interruption the workers stop at once instead.

Signals (see trendconv.interrupt): the pool's forkserver and its workers leave Ctrl-C and SIGHUP, which a
terminal sends to the whole process group, to the main process. A worker stops on SIGTERM (the main process
sends it when interrupted), unwinding the task it runs so that its temporary file is removed, and stops by
itself when the main process is gone, however it ended.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import os
import select
import signal
import sys
import threading
import time
import types
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Protocol

from trendconv import interrupt
from trendconv.faults import fault_point

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


class _WorkerProcess(multiprocessing.context.ForkServerProcess):
    """A pool worker that does not run the main script again.

    multiprocessing has each new process import the main module (as `__mp_main__`), so that functions defined
    there can be unpickled. A worker runs only trendconv's own functions, and a script without an `if __name__ ==
    "__main__":` guard would convert again, inside each worker, at every start. The main module is hidden while the
    process is started, so the preparation it is sent names none."""

    @staticmethod
    def _Popen(process_obj):
        with _main_hidden():
            return multiprocessing.context.ForkServerProcess._Popen(process_obj)


class _WorkerContext(multiprocessing.context.ForkServerContext):
    Process = _WorkerProcess


@contextlib.contextmanager
def _main_hidden():
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")  # no __file__, no __spec__: nothing to import
    try:
        yield
    finally:
        sys.modules["__main__"] = main


def _forkserver_context() -> multiprocessing.context.BaseContext:
    context = _WorkerContext()
    # Workers fork from a server that has imported the parsers once, not each on its own.
    context.set_forkserver_preload(["trendconv.parsing", *_parser_modules()])
    return context


def _parser_modules() -> list[str]:
    from trendconv.formats import FORMATS

    return [module for fmt in FORMATS.values() for module in fmt.parser_modules]


def start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker now, with the signals blocked (it sets its own dispositions for
    SIGINT and SIGTERM, not SIGHUP). Started later within `interrupt.blocked`, it would unblock SIGINT and
    SIGTERM in this thread as it returns."""
    with interrupt.blocked():
        multiprocessing.resource_tracker.ensure_running()


def _start_forkserver() -> multiprocessing.context.BaseContext:
    context = _forkserver_context()
    start_resource_tracker()
    # Started with the signals blocked, which it and every worker forked from it inherit.
    with interrupt.blocked():
        multiprocessing.forkserver.ensure_running()
    return context


def prestart(workers: int | None) -> None:
    """Start the process pool's forkserver now if a pool is likely (WORKERS above one, or None on a machine
    of several cores). Its import of the parser, about half a second, then runs on another core while this
    process goes on with its own imports and the scan, rather than between the scan and the first task.
    """
    if (workers or os.cpu_count() or 1) > 1:
        _start_forkserver()
        fault_point("prestarted")


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
        pool = ProcessPoolExecutor(
            max_workers=self.workers,
            mp_context=_start_forkserver(),
            initializer=_worker_started,
            initargs=(os.getpid(),),
        )
        pending: dict[Future, Any] = {}
        try:
            for task in tasks:
                with interrupt.deferred():  # a submit may start a worker, which must not be left half-started
                    pending[pool.submit(_run_task, fn, task)] = task
                if len(pending) >= 2 * self.workers:
                    yield from _drain(pending, FIRST_COMPLETED)
            while pending:
                yield from _drain(pending, FIRST_COMPLETED)
        except BaseException as exc:
            if not isinstance(exc, GeneratorExit) or interrupt.received():
                _stop_workers(pool)
            raise
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


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    for process in list((pool._processes or {}).values()):
        process.terminate()


# In a worker: whether it runs a task, which a stop then unwinds, rather than waits for one.
_in_task = False
_STOP_GRACE = 5.0  # seconds a task has to unwind once the main process is gone


def _worker_started(parent: int) -> None:
    """Pool initializer, run with the signals blocked (inherited from the forkserver)."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, _stop)
    except OSError:  # "ignored due to race condition": a signal came while this worker started; it is not needed
        os._exit(128 + signal.SIGTERM)
    # The watcher inherits the block, so a SIGTERM reaches the main thread, whose task it unwinds.
    threading.Thread(target=_watch, args=(parent,), name="trendconv-parent-watch", daemon=True).start()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, interrupt.SIGNALS)


def _stop(signum: int, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: the unwinding is not itself interrupted
    if _in_task:
        raise SystemExit(128 + signum)
    os._exit(128 + signum)


def _run_task(fn: Callable, task: Any) -> Any:
    global _in_task
    try:
        try:
            _in_task = True
            return fn(task)
        finally:
            _in_task = False
    except SystemExit as exc:  # stopped: the task has unwound, and the main process expects no result
        os._exit(exc.code)


def _watch(parent: int) -> None:
    """Stop this worker once PARENT (the main process) has ended: nothing else would, were it killed."""
    _wait_for_end(parent)
    signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)
    time.sleep(_STOP_GRACE)  # a C call the task is in finishes before it unwinds
    os._exit(128 + signal.SIGTERM)


def _wait_for_end(pid: int) -> None:
    try:
        handle = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except (AttributeError, OSError):  # no pidfd (not Linux, or before 5.3): ask every half second
        while alive(pid):
            time.sleep(0.5)
        return
    poll = select.poll()
    poll.register(handle, select.POLLIN)
    poll.poll()  # readable once the process has ended


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def local_executor(workers: int) -> Executor:
    return InlineExecutor() if workers == 1 else ProcessExecutor(workers)
