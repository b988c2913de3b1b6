"""Executors: where parse tasks run. In this process, or in a local process pool (trendconv.executors.local, the
pool itself in trendconv.executors.pool, imported only when one starts), or on a Dask cluster
(trendconv.executors.dask, imported only when asked for)."""

from trendconv.executors.local import (
    MAX_WORKERS,
    POOL_MIN_BYTES_ENV,
    Executor,
    InlineExecutor,
    Outcome,
    ProcessExecutor,
    alive,
    as_command,
    default_workers,
    is_command,
    local_executor,
    pool_pays,
    prestart,
    release_forkserver,
    start_resource_tracker,
    stop_helpers,
)

__all__ = [
    "MAX_WORKERS",
    "POOL_MIN_BYTES_ENV",
    "Executor",
    "InlineExecutor",
    "Outcome",
    "ProcessExecutor",
    "alive",
    "as_command",
    "default_workers",
    "is_command",
    "local_executor",
    "pool_pays",
    "prestart",
    "release_forkserver",
    "start_resource_tracker",
    "stop_helpers",
]
