"""A scan's units kept small: the main process holds the plan's units for as long as it parses, and with 100,000
monitor files and more, a Python object a unit (a hundred bytes and more, with its strings) made its memory grow
with the file count (benchmarks/RESULTS-monitor.md).

`PackedUnits` keeps units in order as LZ4-compressed pickled blocks (some 17 bytes a monitor file: the units of a
block share most of their text) and gives them back as new objects, one block decoded at a time. A unit class whose
pickling is quick (trendconv.formats.monitor.scan.CsvFile) makes a pass over the units cost about 2 µs a unit.
"""

from __future__ import annotations

import bisect
import operator
import pickle
from collections.abc import Iterable, Iterator, Sequence

_CODEC = "lz4"  # as trendconv.loading.records: quick both ways, and the blocks are alike


class PackedUnits(Sequence):
    """Units in order, kept as compressed blocks of up to BLOCK units: `append` and `extend` take them, indexing and
    iteration give them back (equal, not the same objects). A list that will not grow soon is `close`d (its last
    units compressed too)."""

    BLOCK = 1024

    def __init__(self, units: Iterable = ()) -> None:
        self._blocks: list[bytes] = []
        self._sizes: list[int] = []  # of each block's pickle
        self._ends: list[int] = []  # the number of units up to the end of each block
        self._tail: list = []  # not in a block yet
        self._decoded: tuple[int, list] = (-1, [])
        self.extend(units)

    def append(self, unit) -> None:
        self._tail.append(unit)
        if len(self._tail) == self.BLOCK:
            self._pack()

    def extend(self, units: Iterable) -> None:
        for unit in units:
            self.append(unit)
        self.close()

    def close(self) -> None:
        if self._tail:
            self._pack()

    def _pack(self) -> None:
        import pyarrow as pa  # the parse has it imported; `trendconv --version` has not

        document = pickle.dumps(self._tail, protocol=pickle.HIGHEST_PROTOCOL)
        self._blocks.append(pa.compress(document, codec=_CODEC, asbytes=True))
        self._sizes.append(len(document))
        self._ends.append(len(self))
        self._tail = []

    def __len__(self) -> int:
        return (self._ends[-1] if self._ends else 0) + len(self._tail)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[number] for number in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        block = bisect.bisect_right(self._ends, index)
        start = self._ends[block - 1] if block else 0
        return self._block(block)[index - start]

    def __iter__(self) -> Iterator:
        for block in range(len(self._blocks) + 1):
            yield from self._block(block)

    def _block(self, number: int) -> list:
        if number == len(self._blocks):
            return self._tail
        if self._decoded[0] != number:
            import pyarrow as pa

            document = pa.decompress(self._blocks[number], self._sizes[number], codec=_CODEC, asbytes=True)
            self._decoded = (number, pickle.loads(document))
        return self._decoded[1]


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
