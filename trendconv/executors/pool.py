"""The local process pool: bounded submission, workers forked from a forkserver that has imported the parsers.

At most four tasks per worker are submitted at once, so memory stays bounded however many tasks there are. Two
had been too few: `run` loads shards on the thread that submits, and while it loaded, the workers ran out of work
(`run -j2` on 32 x 4 x 16: 2.83 -> 2.67 s, medians of 4 interleaved rounds).
Closing the iterator early stops submission and waits for the tasks already running, so their results (shards)
are complete; after an interruption the workers stop at once instead.

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
from typing import Any

from trendconv import interrupt
from trendconv.executors.local import Outcome, alive


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


def _forkserver_context(parsed: list | None = None) -> multiprocessing.context.BaseContext:
    context = _WorkerContext()
    # Workers fork from a server that has imported the parsers once, not each on its own (numpy hidden first).
    if parsed is None:
        from trendconv.formats import FORMATS

        parsed = list(FORMATS.values())
    parsers = [module for fmt in parsed for module in fmt.parser_modules]
    context.set_forkserver_preload(["trendconv.executors.numpyless", "trendconv.parsing", *parsers])
    return context


def start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker now, with the signals blocked (it sets its own dispositions for
    SIGINT and SIGTERM, not SIGHUP). Started later within `interrupt.blocked`, it would unblock SIGINT and
    SIGTERM in this thread as it returns."""
    with interrupt.blocked():
        multiprocessing.resource_tracker.ensure_running()


def start_forkserver(parsed: list | None = None) -> multiprocessing.context.BaseContext:
    """The pool's context, its forkserver running, which imports the parsers of the formats PARSED (None: every
    format's) for its workers; a server already running keeps what it has."""
    context = _forkserver_context(parsed)
    start_resource_tracker()
    # Started with the signals blocked, which it and every worker forked from it inherit.
    with interrupt.blocked():
        multiprocessing.forkserver.ensure_running()
    return context


_PER_WORKER = 4  # tasks submitted at once, per worker


def imap_unordered(workers: int, fn: Callable, tasks: Iterable) -> Iterator[Outcome]:
    """FN over TASKS in a pool of WORKERS processes (trendconv.executors.ProcessExecutor)."""
    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=start_forkserver(),
        initializer=_worker_started,
        initargs=(os.getpid(),),
    )
    pending: dict[Future, Any] = {}
    try:
        for task in tasks:
            with interrupt.deferred():  # a submit may start a worker, which must not be left half-started
                pending[pool.submit(_run_task, fn, task)] = task
            if len(pending) >= _PER_WORKER * workers:
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
