"""Parquet shards: the self-describing, atomically written intermediate between parse and load.

One shard per (step, rank) of dump data, `WORK/shards/step<S>_rank<R>.parquet`; one per monitor CSV file,
`WORK/monitor/shards/<run directory>/<file>.parquet`. Its footer metadata (key
`trendconv`) holds a JSON document describing where it came from, checked by trendconv.schemas whenever it is
read; the rows carry no database ids.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from trendconv import schemas
from trendconv.errors import DataError, cannot_write, make_directory
from trendconv.faults import fault_point

SHARD_FORMAT = schemas.SHARD_FORMAT
META_KEY = b"trendconv"
# A shard whose footer reads fine is reused by parse, so parse alone does not replace one with broken rows.
DELETE_AGAIN = "delete it and run `trendconv parse` again"
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
    return _monitor_schema(tuple(stats))


@functools.lru_cache(maxsize=64)  # a few stat sets, thousands of shards
def _monitor_schema(stats: tuple[str, ...]) -> pa.Schema:
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
    return shard_dir(work) / dump_shard_name(step, rank)


def dump_shard_name(step: int, rank: int) -> str:
    return f"step{step}_rank{rank}{schemas.SHARD_SUFFIX}"


def monitor_shard_name(run_dir: str, file: str) -> str:
    return f"{run_dir}/{file}{schemas.SHARD_SUFFIX}"


def name_of(meta: dict) -> str:
    """Where the shard a (checked) footer describes belongs, relative to its shard directory."""
    if meta["input_format"] == schemas.MONITOR:
        return monitor_shard_name(meta["run_dir"], meta["file"])
    return dump_shard_name(meta["step"], meta["rank"])


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
    """Write to a temporary name in the same directory, then rename: readers never see half a shard."""
    table = table.replace_schema_metadata({META_KEY: orjson.dumps(meta, option=orjson.OPT_SORT_KEYS)})
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        make_directory(path.parent)
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
    except OSError as exc:  # WORK's fault (full, read-only, a directory in the way), never the input file's
        raise cannot_write(path, exc, ours=tmp) from None
    finally:
        if tmp.is_file():
            tmp.unlink()


def _dictionary_columns(schema: pa.Schema) -> list[str]:
    """The columns that are dictionaries in memory; trying a dictionary on number columns costs time for nothing."""
    return [field.name for field in schema if pa.types.is_dictionary(field.type)]


class OtherShardFormat(DataError):
    """A shard written by a trendconv of another shard format: stale, not damaged."""


def read_meta(path: Path, input_format: str = schemas.DUMP) -> dict:
    """The footer document alone (cheap: no rows are read), once trendconv.schemas found it to be the footer of
    an INPUT_FORMAT shard with the columns and the number of rows it says; otherwise a DataError naming it."""
    if not path.is_file():  # not even opened: a FIFO would block
        raise DataError(f"{path}: not a readable trendconv shard (not a file); {schemas.AGAIN}")
    try:
        with pq.ParquetFile(path) as parquet:
            rows, columns = parquet.metadata.num_rows, parquet.schema_arrow
        document = orjson.loads((columns.metadata or {})[META_KEY])
    except (OSError, pa.ArrowException, KeyError, orjson.JSONDecodeError) as exc:
        raise DataError(f"{path}: not a readable trendconv shard ({_reason(exc)}); {schemas.AGAIN}") from None
    try:
        schemas.check_footer(document, input_format, rows)
    except schemas.OtherShardFormat as exc:
        raise OtherShardFormat(f"{path}: {exc}; {schemas.AGAIN}") from None
    except schemas.Invalid as exc:
        raise DataError(f"{path}: unexpected footer: {exc}; {schemas.AGAIN}") from None
    if columns.remove_metadata() != columns_of(document):
        raise DataError(f"{path}: unexpected shard columns; {schemas.AGAIN}")
    return document


def columns_of(meta: dict) -> pa.Schema:
    """The columns of the shard a (checked) footer describes."""
    if meta["input_format"] == schemas.MONITOR:
        return monitor_schema(meta["stats"])
    return SCHEMA


def read_own(directory: Path, name: str, input_format: str) -> Shard:
    """The shard DIRECTORY/NAME, if it is one trendconv wrote there: its footer is valid and names NAME."""
    path = directory / name
    meta = read_meta(path, input_format)
    if name_of(meta) != name:
        raise DataError(f"{path}: unexpected footer: it describes {name_of(meta)}; {schemas.AGAIN}")
    return Shard(path, meta)


def read_rows(path: Path, schema: pa.Schema = SCHEMA, *, use_threads: bool = True) -> pa.Table:
    """The rows of a shard; USE_THREADS False halves the time for small shards (no thread-pool round trip)."""
    try:
        table = pq.ParquetFile(path).read(use_threads=use_threads)
    except (OSError, pa.ArrowException) as exc:
        raise DataError(f"{path}: not a readable trendconv shard ({_reason(exc)}); {DELETE_AGAIN}") from None
    if table.schema.remove_metadata() != schema:
        raise DataError(f"{path}: unexpected shard columns; {schemas.AGAIN}")
    return table


def list_shards(work: Path) -> list[Path]:
    """Every entry named *.parquet under WORK's shard directory, in sorted order. Symbolic links to directories
    are not followed: what they lead to is not WORK's."""
    found = []
    for parent, directories, files in os.walk(shard_dir(work)):
        directories.sort()
        found += [Path(parent, name) for name in files + directories if name.endswith(schemas.SHARD_SUFFIX)]
    return sorted(found)


def _reason(exc: Exception) -> str:
    if isinstance(exc, KeyError):
        return "no trendconv metadata"
    if isinstance(exc, OSError) and exc.errno:  # the system's words, not Arrow's sentence around them
        return os.strerror(exc.errno)
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
