"""A monitor shard: the rows of one CSV file, and what its meta says of them; and the rows of many files as the
table of one chunk file (docs/architecture.md, "Chunk files")."""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from trendconv.formats.monitor.arrays import constant
from trendconv.formats.monitor.parse import MonitorRows, mapped, parse_general, read_raw, slots
from trendconv.formats.monitor.regular import Buffers, regular_buffers, typed
from trendconv.formats.monitor.scan import CsvFile
from trendconv.options import ParseOptions
from trendconv.shards import DICT_STRING

KEY_FIELDS = [
    ("rank", pa.int64()),
    ("metric", DICT_STRING),
    ("target_name", DICT_STRING),
    ("vpp_stage", pa.int64()),
    ("step", pa.int64()),
    ("micro_step", pa.int64()),
]


def schema(stats: list[str]) -> pa.Schema:
    """The columns of a shard whose file has STATS (the stat columns of its header, in canonical order)."""
    return _schema(tuple(stats))


@functools.lru_cache(maxsize=64)  # a few stat sets, thousands of shards
def _schema(stats: tuple[str, ...]) -> pa.Schema:
    return pa.schema([*KEY_FIELDS, *[(stat, pa.float64()) for stat in stats]])


@functools.lru_cache(maxsize=64)  # a few stat sets, asked for by every file; by the stats, as hashing a schema is slow
def _types(stats: tuple[str, ...]) -> tuple[tuple[str, pa.DataType], ...]:
    return tuple((field.name, field.type) for field in _schema(stats))


@functools.lru_cache(maxsize=16)  # one per metric
def _dictionary(metric: str) -> pa.Array:
    """The metric column's dictionary: the one value every row of the file has."""
    return pa.array([metric], pa.string())


@dataclass(frozen=True)
class Regular:
    """The rows of a regular file (trendconv.formats.monitor.regular) before they are a table: the files of a chunk
    become one table together (`table_of`), as an Arrow table per small file cost more than its parse."""

    rank: int
    metric: str
    stats: tuple[str, ...]
    buffers: Buffers
    names: pa.Array  # the target names, mapped


def rows_of(unit: CsvFile, options: ParseOptions) -> tuple[Regular | pa.Table, dict]:
    """The shard rows of a CSV file (for `table_of`), and its part of the shard's meta."""
    raw = read_raw(unit)
    found = regular_buffers(raw)
    if found is None:
        return _general(unit, parse_general(raw, unit, options))
    stats = tuple(found.values)
    rows = Regular(unit.rank, unit.metric, stats, found, mapped(found.names, options.mapping))
    has_micro_step = "micro_step" in found.header
    steps, micro_steps = (memoryview(found.keys[key]).cast("q") for key in ("step", "micro_step"))
    return rows, _meta(unit, list(stats), has_micro_step, slots(steps, micro_steps, has_micro_step), found.count, {})


def _general(unit: CsvFile, rows: MonitorRows) -> tuple[pa.Table, dict]:
    """Any other file: its table at once."""
    columns = dict(rows.columns)
    count = len(rows)
    columns["rank"] = constant(unit.rank, pa.int64(), count)
    columns["metric"] = pa.DictionaryArray.from_arrays(constant(0, pa.int32(), count), _dictionary(unit.metric))
    columns["target_name"] = columns["target_name"].dictionary_encode()
    stats = tuple(rows.stats)
    arrays = [_as_type(columns[name], kind) for name, kind in _types(stats)]
    table = pa.Table.from_arrays(arrays, schema=_schema(stats))
    meta = _meta(unit, rows.stats, rows.has_micro_step, rows.micro_steps_per_step(), count, rows.skipped)
    return table, meta


def _meta(unit: CsvFile, stats: list[str], has_micro_step: bool, slots: list, count: int, skipped) -> dict:
    return {
        **unit.identity,
        "stats": stats,
        "has_micro_step": has_micro_step,
        "micro_steps_per_step": slots,
        "rows": count,
        "rows_per_metric": {unit.metric: count} if count else {},
        "skipped": dict(sorted(skipped.items())),
    }


def _as_type(column: pa.Array, kind: pa.DataType) -> pa.Array:
    return column if column.type == kind else column.cast(kind)


def table_of(parts: list[Regular | pa.Table]) -> pa.Table:
    """The rows of PARTS (`rows_of`, in order) as one table: each run of regular files with the same stats is
    joined column by column, one Arrow array per column and run. Files differ in their stats: a stat a file
    lacks is null in its rows."""
    tables = []
    for kind, run in itertools.groupby(parts, key=lambda part: part.stats if isinstance(part, Regular) else None):
        if kind is None:
            tables.extend(run)
        else:
            tables.append(_joined(list(run)))
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="default")


def _joined(run: list[Regular]) -> pa.Table:
    stats = run[0].stats
    count = sum(part.buffers.count for part in run)
    ends = list(itertools.accumulate(part.buffers.count for part in run))
    metrics = list(dict.fromkeys(part.metric for part in run))
    columns = {
        "rank": _repeated([part.rank for part in run], ends, pa.int64()),
        "metric": pa.DictionaryArray.from_arrays(
            _repeated([metrics.index(part.metric) for part in run], ends, pa.int32()), pa.array(metrics, pa.string())
        ),
        "target_name": pa.concat_arrays([part.names for part in run]).dictionary_encode(),
        **typed(_concatenated(run, "keys"), pa.int64(), count),
        **typed(_concatenated(run, "values"), pa.float64(), count),
    }
    return pa.Table.from_arrays([columns[name] for name, _ in _types(stats)], schema=_schema(stats))


def _repeated(values: list[int], ends: list[int], kind: pa.DataType) -> pa.Array:
    """values[i] for the rows up to ends[i]."""
    if len(values) == 1:
        return constant(values[0], kind, ends[0])
    encoded = pa.RunEndEncodedArray.from_arrays(pa.array(ends, pa.int32()), pa.array(values, kind))
    return pc.run_end_decode(encoded)


def _concatenated(run: list[Regular], field: str) -> dict[str, bytes]:
    names = getattr(run[0].buffers, field)
    return {name: b"".join(getattr(part.buffers, field)[name] for part in run) for name in names}
