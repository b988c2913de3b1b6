"""The records a parse keeps in its part of WORK: work.json when it starts, manifest.json when it is complete."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from trendconv import schemas, shards, workdir
from trendconv.errors import DataError
from trendconv.formats import Format
from trendconv.options import ParseOptions
from trendconv.parsing.tasks import ParseTask


def start_parse(data: Path, part: Path, options: ParseOptions, fmt: Format) -> None:
    """Forget the old manifest (the shard set is about to change) and say what this parse does."""
    workdir.make_work_dir(part)
    workdir.forget_manifest(part)
    document = {"data": str(data.resolve()), "input_format": fmt.name, "options": options.record()}
    _record_selection(document, options)
    workdir.write_json_atomic(workdir.work_json_path(part), document)


def write_manifest(part: Path, options: ParseOptions, tasks: list[ParseTask], fmt: Format) -> None:
    """The complete shard list, in processing order: written last, it says the parse finished."""
    directory = shards.shard_dir(part)
    document = {
        "shard_format": shards.SHARD_FORMAT,
        "input_format": fmt.name,
        "options": options.record(),
        "shards": [task.shard_path.relative_to(directory).as_posix() for task in tasks],
    }
    _record_selection(document, options)
    workdir.write_json_atomic(workdir.manifest_path(part), document)


def _record_selection(document: dict, options: ParseOptions) -> None:
    """Which steps and ranks the shards are of; recorded only when a parse selects, so that the records of a
    parse of everything are what they always were."""
    if options.selection:
        document["selection"] = options.selection.record()


def read_manifest(work: Path, fmt: Format, keep: Callable = lambda shard: shard) -> list:
    """The complete shard set of FMT's part of WORK, in processing order, as the last finished parse left it: each
    shard as KEEP returns it (the load stage keeps them packed, trendconv.loading.records)."""
    part = workdir.found_part(work, fmt)
    unfinished = "the parse of this WORK did not finish; run `trendconv.parse()` again"
    document = workdir.read_json_document(workdir.manifest_path(part), unfinished, schemas.manifest(fmt.name))
    directory = shards.shard_dir(part)
    found = []
    for name in document["shards"]:
        if not (directory / name).is_file():
            raise DataError(f"{directory / name}: shard missing; run `trendconv.parse()` again to rebuild it")
        found.append(keep(shards.read_own(directory, name, fmt)))
    return sorted(found, key=lambda shard: fmt.meta_order(shard.meta))
