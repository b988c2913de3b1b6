"""The Python API behind the CLI: parse, load and (later) run, as plain functions tests can call."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import orjson

from trendconv import shards
from trendconv.dump.parse import ParseOptions
from trendconv.errors import DataError, UsageError
from trendconv.jsonfile import read_json
from trendconv.load import LoadSummary, load_shards
from trendconv.parse import ParseSummary, manifest_path, run_parse

__all__ = ["ParseOptions", "load", "load_mapping", "parse", "read_manifest_shards"]


def load_mapping(path: Path | None) -> tuple[tuple[str, str], ...]:
    """A --mapping file: a JSON object of string → string, applied in file order."""
    if path is None or str(path) == "":
        return ()
    if not path.is_file():
        raise UsageError(f"{path}: mapping file not found")
    try:
        mapping = read_json(path)
    except DataError as exc:
        raise UsageError(str(exc)) from None
    if not isinstance(mapping, dict) or not all(isinstance(v, str) for v in mapping.values()):
        raise UsageError(f'{path}: a mapping must be a JSON object of strings, like {{".TE": "."}}')
    if "" in mapping:
        raise UsageError(f"{path}: a mapping key must not be empty")
    return tuple(mapping.items())


def parse(data: Path, work: Path, options: ParseOptions, *, workers: int | None = None, **kwargs) -> ParseSummary:
    return run_parse(data, work, options, workers=workers, **kwargs)


def read_manifest_shards(work: Path) -> list[shards.Shard]:
    """The complete shard set of WORK, in (step, rank) order, as the last finished parse left it."""
    if not work.is_dir():
        raise UsageError(f"{work}: WORK does not exist")
    path = manifest_path(work)
    if not path.is_file():
        raise DataError(f"{path}: not found: the parse of this WORK did not finish; run `trendconv parse` again")
    try:
        names = orjson.loads(path.read_bytes())["shards"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        raise DataError(f"{path}: unreadable manifest; run `trendconv parse` again") from None
    found = []
    for name in names:
        shard_file = shards.shard_dir(work) / name
        if not shard_file.is_file():
            raise DataError(f"{shard_file}: shard missing; run `trendconv parse` again to rebuild it")
        found.append(shards.Shard(shard_file, shards.read_meta(shard_file)))
    return sorted(found, key=lambda shard: (shard.step, shard.rank))


def load(
    work: Path,
    out_dir: Path,
    *,
    index: bool = True,
    on_plan: Callable[[list[shards.Shard]], None] | None = None,
    on_shard: Callable[[shards.Shard], None] | None = None,
) -> LoadSummary:
    """Build OUT_DIR/dump_data.trend.db from the shards of WORK alone."""
    shard_list = read_manifest_shards(work)
    if on_plan:
        on_plan(shard_list)
    return load_shards(shard_list, out_dir, index=index, on_shard=on_shard)
