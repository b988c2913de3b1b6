"""Fault points for tests: `TRENDCONV_FAULT=name[@N][,...]` makes the process SIGKILL itself there.

`name@N` fires the N-th time this process passes the point (default: the first). With
`TRENDCONV_FAULT_ONCE=PATH` a fault fires only if it can create PATH, so across all processes (a Dask
worker that is restarted, say) it fires once. Only tests set these; checking costs a dictionary lookup
at a handful of places per shard.
"""

from __future__ import annotations

import os
import signal
from collections import Counter

ENV = "TRENDCONV_FAULT"
ONCE_ENV = "TRENDCONV_FAULT_ONCE"
_passes: Counter = Counter()


def fault_point(name: str) -> None:
    wanted = os.environ.get(ENV)
    if not wanted:
        return
    _passes[name] += 1
    for spec in wanted.split(","):
        point, _, count = spec.partition("@")
        if point == name and _passes[name] == int(count or 1) and _first_time():
            os.kill(os.getpid(), signal.SIGKILL)


def _first_time() -> bool:
    marker = os.environ.get(ONCE_ENV)
    if not marker:
        return True
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True
