"""Fault points for tests: `TRENDCONV_FAULT=name[@N][:pause][,...]` makes the process SIGKILL itself there, or
with `:pause` wait there (for a signal the test sends).

`name@N` fires the N-th time this process passes the point (default: the first). With
`TRENDCONV_FAULT_ONCE=PATH` a fault fires only if it can create PATH, so across all processes (a Dask
worker that is restarted, say) it fires once. A pause first appends its process id to the file
`TRENDCONV_FAULT_MARKER` names, so that the test knows when to act, then waits up to a minute, or until a
signal stops the process or (in the main process) is noted by trendconv.interrupt. Only tests set these;
checking costs a dictionary lookup at a handful of places per shard.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter

from trendconv import interrupt

ENV = "TRENDCONV_FAULT"
ONCE_ENV = "TRENDCONV_FAULT_ONCE"
MARKER_ENV = "TRENDCONV_FAULT_MARKER"
PAUSE_SECONDS = 60
_passes: Counter = Counter()


def fault_point(name: str) -> None:
    wanted = os.environ.get(ENV)
    if not wanted:
        return
    _passes[name] += 1
    for spec in wanted.split(","):
        spec, _, action = spec.partition(":")
        point, _, count = spec.partition("@")
        if point == name and _passes[name] == int(count or 1) and _first_time():
            _pause() if action == "pause" else os.kill(os.getpid(), signal.SIGKILL)


def _first_time() -> bool:
    marker = os.environ.get(ONCE_ENV)
    if not marker:
        return True
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def _pause() -> None:
    with open(os.environ[MARKER_ENV], "a") as marker:
        marker.write(f"{os.getpid()}\n")
    deadline = time.monotonic() + PAUSE_SECONDS
    while time.monotonic() < deadline and not interrupt.received():
        time.sleep(0.02)
