"""Fault points for tests: `TRENDCONV_FAULT=name[,name...]` makes the process SIGKILL itself there.

Only tests set the variable; checking it costs a dictionary lookup at a handful of places per run.
"""

from __future__ import annotations

import os
import signal

ENV = "TRENDCONV_FAULT"


def fault_point(name: str) -> None:
    if name in os.environ.get(ENV, "").split(","):
        os.kill(os.getpid(), signal.SIGKILL)
