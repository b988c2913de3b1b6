"""Ids both loaders share: a *use* of a target by a metric packed in one int64 (metric << 32 | target), and each
metric's targets in the order of their first use, which decides the tag ids (trendconv.loading.tags)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pyarrow as pa
import pyarrow.compute as pc

_BITS = 32
# Arrow scalars made once: a Python number given to a compute function is converted on every call, and pyarrow
# then tries (and fails) to import pandas and dateutil, a tenth of a millisecond a call
# (benchmarks/RESULTS-scale.md).
_SHIFT = pa.scalar(_BITS, pa.int64())
_MASK = (1 << _BITS) - 1
_LOW = pa.scalar(_MASK, pa.int64())


def uses(metric_ids: pa.Array, targets: pa.Array) -> pa.Array:
    """The use of every row: its metric id and its target (an id, or a number standing for one), packed."""
    return pc.add(pc.shift_left(metric_ids, _SHIFT), targets)


def target_of(use: pa.Array) -> pa.Array:
    """The target part of packed uses."""
    return pc.bit_wise_and(use, _LOW)


def metric_of(use: pa.Array) -> pa.Array:
    """The metric part of packed uses."""
    return pc.shift_right(use, _SHIFT)


class FirstUses:
    """Each metric's targets in order of first use: metric id -> target ids as dict keys."""

    def __init__(self) -> None:
        self.by_metric: dict[int, dict[int, None]] = {}

    def add(self, packed: Iterable[int], target_id: Callable[[int], int] = int) -> None:
        """PACKED uses in order (each may repeat); TARGET_ID turns a use's target part into its id."""
        for use in packed:
            self.by_metric.setdefault(use >> _BITS, {})[target_id(use & _MASK)] = None
