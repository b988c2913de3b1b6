"""Stopping a command: Ctrl-C (SIGINT), SIGTERM and SIGHUP all do the same, and the exit status is 130.

The `trendconv` command calls `install` before it imports anything else. Inside a command (`armed`, see
trendconv.cli) the first of these signals raises KeyboardInterrupt in the main thread, so every `finally` on
the way out runs: the pool's workers are stopped, an unfinished database is removed. A later signal is only
noted, so that this cleanup is not itself cut short. Outside a command (while Python imports the command
line or parses its options, while the process exits) a signal is only noted. Either way `received()` stays
true, and the command line exits 130 whatever else happened: an interruption wins over the errors it causes
and over a success it came too late to stop.

Worker processes leave these signals to the main process (trendconv.executors).
"""

from __future__ import annotations

import signal
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported by the command before anything else: only what routing the signals needs
    from collections.abc import Iterator
    from pathlib import Path

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_received: int | None = None
_armed = False
_deferred = 0
_owed = False  # a KeyboardInterrupt held back by `deferred`
_honoured = False  # the signal asked a command to stop, and it stopped cleanly (`honour`)
_unfinished: set[Path] = set()


def install() -> None:
    for signum in SIGNALS:
        signal.signal(signum, _handle)


def ignore() -> None:
    """From now on SIGNALS are ignored (a handler would be reset to the default during Python's teardown)."""
    for signum in SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


def _handle(signum: int, frame) -> None:
    global _received, _owed
    if _received is not None:
        return
    _received = signum
    if _armed and _deferred:
        _owed = True
    elif _armed:
        raise KeyboardInterrupt


def received() -> bool:
    """True once one of SIGNALS came, with `install`ed handlers (never in a program that only uses the API)."""
    return _received is not None and not _honoured


def honour() -> None:
    """The signal that came asked the command to stop, and it did so cleanly (a follower between batches,
    trendconv.following): its exit status is its own, not 130. Later signals are still only noted."""
    global _honoured
    _honoured = _received is not None


def check() -> None:
    """Raise KeyboardInterrupt if a signal came: before a step that cannot be undone, in case the first
    KeyboardInterrupt was lost (Python drops one raised in a finalizer, for one)."""
    if received():
        raise KeyboardInterrupt


@contextmanager
def armed() -> Iterator[None]:
    """A command runs: a signal now raises KeyboardInterrupt (one noted before raises it at once)."""
    global _armed
    _armed = True
    try:
        check()
        yield
    finally:
        _armed = False


@contextmanager
def deferred() -> Iterator[None]:
    """A step a KeyboardInterrupt must not cut in two (starting a worker process): one raised meanwhile comes at
    the end."""
    global _deferred, _owed
    _deferred += 1
    try:
        yield
    finally:
        _deferred -= 1
    if _owed and not _deferred:
        _owed = False
        raise KeyboardInterrupt


@contextmanager
def blocked() -> Iterator[None]:
    """SIGNALS blocked in this thread; a process started meanwhile inherits the block, and so ignores a Ctrl-C
    meant for the main process until it unblocks them itself."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def unfinished(path: Path) -> Path:
    """PATH is about to be written as a temporary file: `remove_unfinished` removes it unless `finished` first.
    A last resort for an interruption that comes between creating a file and the `try` that removes it."""
    _unfinished.add(path)
    return path


def finished(path: Path) -> None:
    _unfinished.discard(path)


def remove_unfinished() -> None:
    while _unfinished:
        _unfinished.pop().unlink(missing_ok=True)
