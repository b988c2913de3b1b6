"""Executors: where parse tasks run. In this process, or in a local process pool (trendconv.executors.local), or on
a Dask cluster (trendconv.executors.dask, imported only when asked for)."""

from trendconv.executors.local import (
    MAX_WORKERS,
    Executor,
    InlineExecutor,
    Outcome,
    ProcessExecutor,
    alive,
    default_workers,
    local_executor,
    prestart,
    start_resource_tracker,
    stop_forkserver,
)

__all__ = [
    "MAX_WORKERS",
    "Executor",
    "InlineExecutor",
    "Outcome",
    "ProcessExecutor",
    "alive",
    "default_workers",
    "local_executor",
    "prestart",
    "start_resource_tracker",
    "stop_forkserver",
]
