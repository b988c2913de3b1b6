"""Parquet shards: the self-describing, atomically written intermediate between parse and load.

One shard per unit of a format (trendconv.formats), at WORK/<format>/shards/<Format.shard_name(unit)>. Its footer
metadata (key `trendconv`) holds a JSON document, its *meta*, saying where it came from and what it holds; the
rows carry no database ids. Each format says which columns its shards have (`Format.shard_schema`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from trendconv.errors import DataError, cannot_write

# 2: local_micro_step is int64 (construct.json micro steps reach 3000000000 and beyond).
SHARD_FORMAT = 2
META_KEY = b"trendconv"
SHARD_DIR = "shards"

# The type of a shard's text columns: most values repeat, and a dictionary stores each once.
DICT_STRING = pa.dictionary(pa.int32(), pa.string())


@dataclass(frozen=True)
class Shard:
    path: Path
    meta: dict  # the footer document


def shard_dir(part: Path) -> Path:
    """The shard directory of a format's part of WORK (trendconv.workdir)."""
    return part / SHARD_DIR


def write_shard(path: Path, table: pa.Table, meta: dict) -> None:
    """Write to a temporary name in the same directory, then rename: readers never see half a shard.

    A full disk or a missing permission is WORK's problem, and the error says so, not the input's."""
    try:
        _write_shard(path, table, meta)
    except OSError as exc:
        raise cannot_write(path, exc) from None


def _write_shard(path: Path, table: pa.Table, meta: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
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


def read_rows(path: Path, schema: pa.Schema, *, use_threads: bool = True) -> pa.Table:
    """The rows of a shard, which must have the columns of SCHEMA; USE_THREADS False halves the time for small
    shards (no thread-pool round trip)."""
    try:
        table = pq.ParquetFile(path).read(use_threads=use_threads)
    except (OSError, pa.ArrowException) as exc:
        raise DataError(f"{path}: not a readable trendconv shard ({_reason(exc)})") from None
    if table.schema.remove_metadata() != schema:
        raise DataError(f"{path}: unexpected shard columns; re-run parse")
    return table


def list_shards(part: Path) -> list[Path]:
    """Every shard file under the shard directory of PART, sorted."""
    directory = shard_dir(part)
    if not directory.is_dir():
        return []
    return sorted(directory.glob("**/*.parquet"))


def _reason(exc: Exception) -> str:
    if isinstance(exc, KeyError):
        return "no trendconv metadata"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
