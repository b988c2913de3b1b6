"""Parquet shards: writing them atomically, reading their meta and rows (see trendconv.shards.files)."""

from trendconv.shards.files import (
    DELETE_AGAIN,
    DICT_STRING,
    META_KEY,
    SHARD_DIR,
    SHARD_FORMAT,
    OtherShardFormat,
    Shard,
    list_shards,
    read_meta,
    read_own,
    read_rows,
    rows_mismatch,
    shard_dir,
    write_shard,
)

__all__ = [
    "DELETE_AGAIN",
    "DICT_STRING",
    "META_KEY",
    "SHARD_DIR",
    "SHARD_FORMAT",
    "OtherShardFormat",
    "Shard",
    "list_shards",
    "read_meta",
    "read_own",
    "read_rows",
    "rows_mismatch",
    "shard_dir",
    "write_shard",
]
