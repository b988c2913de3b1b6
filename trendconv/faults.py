"""Fault points for tests: `TRENDCONV_FAULT=name[@N][,...]` makes the process SIGKILL itself there.

`name@N` fires the N-th time this process passes the point (default: the first). Only tests set the
variable; checking it costs a dictionary lookup at a handful of places per shard.
"""

from __future__ import annotations

import os
import signal
from collections import Counter

ENV = "TRENDCONV_FAULT"
_passes: Counter = Counter()


def fault_point(name: str) -> None:
    wanted = os.environ.get(ENV)
    if not wanted:
        return
    _passes[name] += 1
    for spec in wanted.split(","):
        point, _, count = spec.partition("@")
        if point == name and _passes[name] == int(count or 1):
            os.kill(os.getpid(), signal.SIGKILL)
