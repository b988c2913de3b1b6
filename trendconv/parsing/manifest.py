"""The records a parse keeps in its part of WORK: work.json when it starts, manifest.json when it is complete."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from pathlib import Path

from trendconv import schemas, shards, workdir
from trendconv.errors import DataError
from trendconv.formats import Format
from trendconv.options import ParseOptions


def start_parse(data: Path, part: Path, options: ParseOptions, fmt: Format) -> None:
    """Forget the old manifest (the shard set is about to change) and say what this parse does."""
    workdir.make_work_dir(part)
    workdir.forget_manifest(part)
    document = {"data": str(data.resolve()), "input_format": fmt.name, "options": options.record()}
    _record_selection(document, options)
    workdir.write_json_atomic(workdir.work_json_path(part), document)


def write_manifest(
    part: Path, options: ParseOptions, units: Sequence, fmt: Format, located: list[str | None] | None = None
) -> None:
    """The complete shard list of UNITS, in processing order: written last, it says the parse finished. LOCATED:
    the chunk file of each unit's shard (by its index in UNITS), None for a shard in a file of its own."""
    directory = shards.shard_dir(part)
    document = {
        "shard_format": shards.SHARD_FORMAT,
        "input_format": fmt.name,
        "options": options.record(),
        "shards": workdir.Streamed(map(fmt.shard_name, units)),
    }
    if located and any(located):  # else every shard is in a file of its own, which the reader takes by default
        relative = functools.cache(lambda chunk: _relative(chunk, directory))  # a chunk holds up to 256 units
        document["located"] = _runs([relative(chunk) for chunk in located])
    _record_selection(document, options)
    workdir.write_json_atomic(workdir.manifest_path(part), document)


def _relative(chunk: str | None, directory: Path) -> str | None:
    return None if chunk is None else Path(chunk).relative_to(directory).as_posix()


def _runs(names: list[str | None]) -> list[list]:
    """NAMES as runs [name, count]: the units of a chunk come one after another."""
    runs: list[list] = []
    for name in names:
        if runs and runs[-1][0] == name:
            runs[-1][1] += 1
        else:
            runs.append([name, 1])
    return runs


def _record_selection(document: dict, options: ParseOptions) -> None:
    """Which steps and ranks the shards are of; recorded only when a parse selects, so that the records of a
    parse of everything are what they always were."""
    if options.selection:
        document["selection"] = options.selection.record()


def manifest_shards(work: Path, fmt: Format) -> Iterator[shards.Shard]:
    """The shards of FMT's part of WORK in the manifest's order, each read (and checked) as it is reached: the
    plan's order, which is processing order for a manifest this trendconv wrote. The load stage keeps them
    compressed as they come (trendconv.loading.records.in_order): 100,000 metas as dicts at once were most of the
    memory of a `load`."""
    part = workdir.found_part(work, fmt)
    unfinished = "the parse of this WORK did not finish; run `trendconv.parse()` again"
    path = workdir.manifest_path(part)
    document = workdir.read_json_document(path, unfinished, schemas.manifest(fmt.name))
    directory = shards.shard_dir(part)
    places = _places(document, path)
    chunks: dict[str, dict[str, dict]] = {}
    for name, chunk in zip(document["shards"], places):
        yield _own(directory, name, fmt) if chunk is None else _in_chunk(directory, name, chunk, chunks, fmt)


def _places(document: dict, path: Path) -> list[str | None]:
    """The chunk of each unit of the manifest, None for a unit's own file."""
    runs = document.get("located", [[None, len(document["shards"])]])
    places = [name for name, count in runs for _ in range(count)]
    if len(places) != len(document["shards"]):
        raise DataError(
            f"{path}: unexpected manifest: 'located' covers {len(places)} of {len(document['shards'])} "
            f"shards; {schemas.AGAIN}"
        )
    return places


def _own(directory: Path, name: str, fmt: Format) -> shards.Shard:
    if not (directory / name).is_file():
        raise DataError(f"{directory / name}: shard missing; run `trendconv.parse()` again to rebuild it")
    return shards.read_own(directory, name, fmt)


def _in_chunk(directory: Path, name: str, chunk: str, chunks: dict, fmt: Format) -> shards.Shard:
    """The shard of the unit NAME in the chunk file CHUNK, whose footer is read once."""
    if chunk not in chunks:
        path = directory / chunk
        if not shards.is_chunk(path, directory) or not path.is_file():
            raise DataError(f"{path}: shard missing; run `trendconv.parse()` again to rebuild it")
        if len(chunks) >= 4:  # a chunk's units mostly follow each other: a few footers at a time are enough
            chunks.pop(next(iter(chunks)))
        chunks[chunk] = {fmt.meta_shard_name(meta): meta for meta in shards.read_chunk(path, fmt)}
    meta = chunks[chunk].get(name)
    if meta is None:
        raise DataError(f"{directory / chunk}: holds no shard of {name}; run `trendconv.parse()` again")
    return shards.Shard(directory / name, meta)
