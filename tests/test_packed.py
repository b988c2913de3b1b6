"""trendconv.scan.packed: units kept packed while the parse runs, and quick to pickle."""

from __future__ import annotations

import pickle
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow  # noqa: F401 - imported before the memory is traced: PackedUnits imports it at its first block
import pytest

from trendconv.formats.dump.scan import FileSet
from trendconv.formats.monitor.scan import CsvFile
from trendconv.scan.packed import PackedUnits, packed, quick_pickle

DATA = Path("/data/monitor")


def csv_files(count: int) -> list[CsvFile]:
    return [
        CsvFile(
            index % 4,
            f"Feb20_16-27-56-rank{index % 4}-ab",
            f"actv_{index}-{index}.csv",
            "actv",
            DATA,
            900 + index,
            index,
            index,
        )
        for index in range(count)
    ]


def test_units_come_back_equal_in_order_by_index_slice_and_iteration(monkeypatch):
    monkeypatch.setattr(PackedUnits, "BLOCK", 3)
    units = csv_files(8)
    kept = PackedUnits(units)
    assert len(kept) == 8 and bool(kept) and not PackedUnits()
    assert list(kept) == units
    assert [kept[index] for index in range(8)] == units
    assert [kept[-1], kept[-8]] == [units[-1], units[0]]
    assert kept[2:7:2] == units[2:7:2]
    assert [(unit.size, unit.first, unit.last) for unit in kept] == [(900 + n, n, n) for n in range(8)]
    with pytest.raises(IndexError):
        kept[8]
    with pytest.raises(IndexError):
        kept[-9]


def test_appended_units_are_packed_a_block_at_a_time_and_the_rest_at_close(monkeypatch):
    monkeypatch.setattr(PackedUnits, "BLOCK", 3)
    kept = PackedUnits()
    for unit in csv_files(4):
        kept.append(unit)
    assert (len(kept._blocks), len(kept._tail), len(kept)) == (1, 1, 4)
    assert kept[3] == csv_files(4)[3]  # a unit not yet in a block
    assert packed(kept) is kept
    assert (len(kept._blocks), len(kept._tail), list(kept)) == (2, 0, csv_files(4))
    assert isinstance(packed(csv_files(2)), PackedUnits)


def test_packed_units_cost_a_few_bytes_each_where_objects_cost_a_hundred_and_more():
    units = csv_files(20_000)
    tracemalloc.start()
    try:
        kept = PackedUnits(iter(units))
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert list(kept) == units
    assert held / len(units) < 40  # a CsvFile object alone is 96 bytes, its name some 60 more


@quick_pickle
@dataclass(frozen=True, slots=True)
class Point:
    x: int
    name: str
    where: Path | None = field(default=None, compare=False)


def test_quick_pickle_remakes_every_field_compared_or_not():
    for unit in (Point(1, "a", Path("/p")), csv_files(1)[0], FileSet(3, 1, "rank1", "step3", Path("d"))):
        again = pickle.loads(pickle.dumps(unit))
        assert type(again) is type(unit) and again == unit
        assert [getattr(again, name) for name in unit.__slots__] == [getattr(unit, name) for name in unit.__slots__]
    with pytest.raises(AttributeError):
        again.step = 4  # still frozen
