"""A scan's units kept small: the main process holds the plan's units for as long as it parses, and with 100,000
monitor files and more, a Python object a unit (a hundred bytes and more, with its strings) made its memory grow
with the file count (benchmarks/RESULTS-monitor.md).

`PackedUnits` keeps units in order as LZ4-compressed pickled blocks (some 17 bytes a monitor file: the units of a
block share most of their text) and gives them back as new objects, one block decoded at a time. A unit class whose
pickling is quick (trendconv.formats.monitor.scan.CsvFile) makes a pass over the units cost about 2 µs a unit.
"""

from __future__ import annotations

import operator
import pickle
from collections.abc import Sequence

from trendconv.blocks import CompressedList


class PackedUnits(CompressedList):
    """Units in order (trendconv.blocks.CompressedList), blocks of 1,024 pickled; indexing and iteration give them
    back equal, not the same objects."""

    BLOCK = 1024

    def _encode(self, units: list) -> bytes:
        return pickle.dumps(units, protocol=pickle.HIGHEST_PROTOCOL)

    _decode = staticmethod(pickle.loads)


def packed(units: Sequence) -> Sequence:
    """UNITS as a closed PackedUnits (UNITS itself if it is one)."""
    if isinstance(units, PackedUnits):
        units.close()
        return units
    return PackedUnits(units)


def quick_pickle(cls: type) -> type:
    """Class decorator for a frozen, slotted dataclass of units: pickled as its field values and remade by setting
    its slots, 1 µs where the dataclass's own way (its __setstate__, a frozen __setattr__ a field) took 6. The main
    process pickles every unit it sends a worker, and a PackedUnits unpickles every unit of each pass."""
    names = [slot for slot in cls.__slots__ if not slot.startswith("__")]
    _SETTERS[cls] = tuple(getattr(cls, name).__set__ for name in names)
    values = operator.attrgetter(*names)
    cls.__reduce__ = lambda unit: (_remade, (cls, *values(unit)))
    return cls


_SETTERS: dict[type, tuple] = {}


def _remade(cls: type, *values):
    unit = object.__new__(cls)
    for setter, value in zip(_SETTERS[cls], values):
        setter(unit, value)
    return unit
