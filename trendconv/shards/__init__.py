"""Parquet shards: writing them atomically, reading their meta and rows (see trendconv.shards.files)."""

from trendconv.shards.files import (
    DICT_STRING,
    META_KEY,
    SHARD_DIR,
    SHARD_FORMAT,
    Shard,
    list_shards,
    read_meta,
    read_rows,
    shard_dir,
    write_shard,
)

__all__ = [
    "DICT_STRING",
    "META_KEY",
    "SHARD_DIR",
    "SHARD_FORMAT",
    "Shard",
    "list_shards",
    "read_meta",
    "read_rows",
    "shard_dir",
    "write_shard",
]
