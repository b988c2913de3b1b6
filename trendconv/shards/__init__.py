"""Parquet shards: the self-describing, atomically written intermediate between parse and load.

One shard per (step, rank) of dump data, `WORK/shards/step<S>_rank<R>.parquet`; one per monitor CSV file,
`WORK/monitor/shards/<run directory>/<file>.parquet`. Its footer metadata (key
`trendconv`) holds a JSON document describing where it came from; the rows carry no database ids.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from trendconv.errors import DataError, cannot_write, make_directory
from trendconv.faults import fault_point

# 2: local_micro_step is int64 (construct.json micro steps reach 3000000000 and beyond).
SHARD_FORMAT = 2
META_KEY = b"trendconv"
SHARD_DIR = "shards"
STAT_COLUMNS = ("norm", "max", "min", "mean")

_DICT_STRING = pa.dictionary(pa.int32(), pa.string())
SCHEMA = pa.schema(
    [
        ("step", pa.int64()),
        ("rank", pa.int64()),
        ("local_micro_step", pa.int64()),
        ("metric", _DICT_STRING),
        ("target_name", _DICT_STRING),
        ("vpp_stage", pa.int32()),
        ("micro_step", pa.int64()),
        *[(name, pa.float64()) for name in STAT_COLUMNS],
        ("key", _DICT_STRING),
    ]
)


# Monitor shards: one per CSV file; the stat columns are those of the file's header, in canonical order.
MONITOR_KEY_FIELDS = [
    ("rank", pa.int64()),
    ("metric", _DICT_STRING),
    ("target_name", _DICT_STRING),
    ("vpp_stage", pa.int64()),
    ("step", pa.int64()),
    ("micro_step", pa.int64()),
]


def monitor_schema(stats: list[str]) -> pa.Schema:
    return pa.schema([*MONITOR_KEY_FIELDS, *[(stat, pa.float64()) for stat in stats]])


@dataclass(frozen=True)
class Shard:
    path: Path
    meta: dict

    @property
    def step(self) -> int:
        return self.meta["step"]

    @property
    def rank(self) -> int:
        return self.meta["rank"]


def shard_dir(work: Path) -> Path:
    return work / SHARD_DIR


def shard_path(work: Path, step: int, rank: int) -> Path:
    return shard_dir(work) / f"step{step}_rank{rank}.parquet"


def build_table(
    columns: dict[str, pa.Array], constants: dict[str, int | str], rows: int, schema: pa.Schema = SCHEMA
) -> pa.Table:
    """The shard table from per-row Arrow columns and the values shared by the whole shard."""
    arrays = []
    for field in schema:
        if field.name in constants:
            arrays.append(pa.repeat(pa.scalar(constants[field.name], field.type), rows))
        else:
            arrays.append(columns[field.name].cast(field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def write_shard(path: Path, table: pa.Table, meta: dict) -> None:
    """Write to a temporary name in the same directory, then rename: readers never see half a shard.

    A full disk or a missing permission is WORK's problem, and the error says so, not the input's."""
    try:
        _write_shard(path, table, meta)
    except OSError as exc:
        raise cannot_write(path, exc) from None


def _write_shard(path: Path, table: pa.Table, meta: dict) -> None:
    make_directory(path.parent)
    table = table.replace_schema_metadata({META_KEY: orjson.dumps(meta, option=orjson.OPT_SORT_KEYS)})
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        pq.write_table(
            table,
            tmp,
            compression="snappy",
            row_group_size=max(table.num_rows, 1),
            use_dictionary=_dictionary_columns(table.schema),
            write_statistics=False,  # nothing filters shards; statistics were a third of the write time
        )
        fault_point("shard-before-rename")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _dictionary_columns(schema: pa.Schema) -> list[str]:
    """The columns that are dictionaries in memory; trying a dictionary on number columns costs time for nothing."""
    return [field.name for field in schema if pa.types.is_dictionary(field.type)]


def read_meta(path: Path) -> dict:
    """The footer document alone (cheap: no rows are read)."""
    try:
        metadata = pq.read_schema(path).metadata or {}
        return orjson.loads(metadata[META_KEY])
    except (OSError, pa.ArrowException, KeyError, orjson.JSONDecodeError) as exc:
        raise DataError(f"{path}: not a readable trendconv shard ({_reason(exc)})") from None


def read_rows(path: Path, schema: pa.Schema = SCHEMA, *, use_threads: bool = True) -> pa.Table:
    """The rows of a shard; USE_THREADS False halves the time for small shards (no thread-pool round trip)."""
    try:
        table = pq.ParquetFile(path).read(use_threads=use_threads)
    except (OSError, pa.ArrowException) as exc:
        raise DataError(f"{path}: not a readable trendconv shard ({_reason(exc)})") from None
    if table.schema.remove_metadata() != schema:
        raise DataError(f"{path}: unexpected shard columns; re-run parse")
    return table


def list_shards(work: Path, pattern: str = "*.parquet") -> list[Path]:
    directory = shard_dir(work)
    if not directory.is_dir():
        return []
    return sorted(directory.glob(pattern))


def _reason(exc: Exception) -> str:
    if isinstance(exc, KeyError):
        return "no trendconv metadata"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
