"""A monitor shard: the rows of one CSV file, and what its meta says of them."""

from __future__ import annotations

import functools

import pyarrow as pa

from trendconv.formats.monitor.arrays import constant
from trendconv.formats.monitor.parse import parse_csv_file
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


def shard_of(unit: CsvFile, options: ParseOptions) -> tuple[pa.Table, dict]:
    """The shard rows of a CSV file, and its part of the shard's meta."""
    rows = parse_csv_file(unit, options)
    columns = dict(rows.columns)
    count = len(rows)
    columns["rank"] = constant(unit.rank, pa.int64(), count)
    columns["metric"] = pa.DictionaryArray.from_arrays(constant(0, pa.int32(), count), _dictionary(unit.metric))
    columns["target_name"] = columns["target_name"].dictionary_encode()
    stats = tuple(rows.stats)
    arrays = [_as_type(columns[name], kind) for name, kind in _types(stats)]
    table = pa.Table.from_arrays(arrays, schema=_schema(stats))
    meta = {
        **unit.identity,
        "stats": rows.stats,
        "has_micro_step": rows.has_micro_step,
        "micro_steps_per_step": rows.micro_steps_per_step(),
        "rows": count,
        "rows_per_metric": {unit.metric: count} if count else {},
        "skipped": dict(sorted(rows.skipped.items())),
    }
    return table, meta


def _as_type(column: pa.Array, kind: pa.DataType) -> pa.Array:
    return column if column.type == kind else column.cast(kind)
