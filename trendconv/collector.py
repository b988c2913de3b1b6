"""Python's cyclic garbage collector, paused while a stage makes many objects that hold no cycles.

A full collection looks at every live container. A run of 100,000 monitor files keeps about a million long-lived
ones (units, tasks, paths) while the parse's results and the load's batches come and go, and the collections this
set off took half of the command's CPU (benchmarks/RESULTS-monitor.md, "The garbage collector"). With the
collector off for a whole such run, what is left in cycles at the end is what a run of 1,800 files leaves (about
600 objects, most of them made by imports); the collector frees them once it runs again. The parse workers pause
it per task for the same reason (a parsed dump.json is millions of young containers).
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    """The collector off inside; on again after, if it was on."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def pausing(function: Callable) -> Callable:
    """FUNCTION, run with the collector paused."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        with paused():
            return function(*args, **kwargs)

    return wrapper
