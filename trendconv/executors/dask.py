"""The parse stage on a Dask cluster: one task per (step, rank), shards written by the workers.

Workers read the dumps and write shards to WORK themselves (shared storage), and send back only the
shard's small metadata. A task whose worker dies is rescheduled by Dask; atomic shard writes make a
second run of a task harmless. Dask is optional: `pip install 'trendconv[dask]'`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from trendconv import interrupt
from trendconv.errors import UsageError
from trendconv.executors import MAX_WORKERS, Outcome, default_workers, start_resource_tracker

INSTALL_HINT = "`executor='dask'` needs Dask: pip install 'trendconv[dask]'"


def _distributed():
    try:
        import distributed
    except ImportError:
        raise UsageError(INSTALL_HINT) from None
    return distributed


def local_workers(workers: int | None) -> int:
    """The worker processes of a local cluster: WORKERS, else one per core."""
    return workers or default_workers(MAX_WORKERS)


class DaskExecutor:
    """Submits to the scheduler at `address`, or to a local cluster of `workers` processes it starts."""

    def __init__(self, address: str | None = None, *, workers: int = 2):
        self._distributed = _distributed()
        self.address = address
        self.workers = workers

    def _connect(self):
        distributed = self._distributed
        if self.address:
            client = distributed.Client(self.address)
            self.workers = max(1, sum(client.nthreads().values()))
            return client, None
        cluster = distributed.LocalCluster(
            n_workers=self.workers, threads_per_worker=1, processes=True, dashboard_address=None
        )
        return distributed.Client(cluster), cluster

    def imap_unordered(self, fn: Callable, tasks: Iterable) -> Iterator[Outcome]:
        client = cluster = None
        pending: dict[Any, Any] = {}
        try:
            # A local cluster's processes (started from threads created now) inherit the blocked signals, and so
            # leave a Ctrl-C at the terminal to this process; a half-started cluster would not close cleanly.
            start_resource_tracker()
            with interrupt.blocked(), interrupt.deferred():
                client, cluster = self._connect()
            completed = self._distributed.as_completed()
            for task in tasks:
                future = client.submit(fn, task, pure=False)
                pending[future] = task
                completed.add(future)
                if len(pending) >= 2 * self.workers:
                    yield _outcome(next(completed), pending)
            while pending:
                yield _outcome(next(completed), pending)
        finally:
            for future in pending:
                future.cancel()
            if client is not None:
                client.close()
            if cluster is not None:
                cluster.close()


def _outcome(future, pending: dict) -> Outcome:
    task = pending.pop(future)
    if future.status == "error":
        return Outcome(task, error=future.exception())
    return Outcome(task, future.result())
