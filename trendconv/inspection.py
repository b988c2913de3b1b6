"""`trendconv inspect`: what a WORK directory holds, shard by shard, for a person or a program."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from trendconv import formats, schemas, shards, workdir
from trendconv.errors import DataError, TrendconvError
from trendconv.formats import Format
from trendconv.options import ParseOptions, options_text
from trendconv.parsing import CORRUPT, OK, ParseTask, status_of
from trendconv.parsing.reuse import STATUSES, chunks_of
from trendconv.selection import from_record


def inspect_work(work: Path, input_format: str | None = None) -> dict:
    """The JSON document of `inspect --json`: the work's settings, one entry per shard, totals.

    Without INPUT_FORMAT: the part of WORK of the first format (in registry order) whose parse was started there.
    """
    workdir.require_work(work)
    started = [fmt for fmt in formats.FORMATS.values() if _started(work, fmt)]
    fmt = formats.get(input_format) if input_format else (started or list(formats.FORMATS.values()))[0]
    part = workdir.found_part(work, fmt)
    started_text = f"no parse of {fmt.name} data was started"
    settings = workdir.read_json_document(workdir.work_json_path(part), started_text, schemas.work_json(fmt.name))
    data = Path(settings["data"])
    selection = from_record(settings.get("selection"))
    entries, note = _entries(part, data, settings["options"], fmt, selection)
    return {
        "work": str(work),
        "input_format": fmt.name,
        "other_formats": [other.name for other in started if other is not fmt],
        "data": str(data),
        "options": settings["options"],
        "selection": settings.get("selection"),  # what --steps/--ranks selected; None: everything
        "complete": _complete(part, fmt),
        "note": note,
        "shards": entries,
        "totals": _totals(entries, fmt.metrics),
    }


def _started(work: Path, fmt: Format) -> bool:
    return workdir.work_json_path(workdir.found_part(work, fmt)).exists()


def _complete(part: Path, fmt: Format) -> bool:
    """Whether the last parse finished: its manifest is there, and is one `load` reads."""
    try:
        workdir.read_json_document(workdir.manifest_path(part), "", schemas.manifest(fmt.name))
    except DataError:
        return False
    return True


def _entries(part: Path, data: Path, options: dict, fmt: Format, selection) -> tuple[list[dict], str | None]:
    """One entry per unit of DATA that the parse selected."""
    try:
        units = (fmt.scan(data, selection) if selection else fmt.scan(data)).units
    except TrendconvError as exc:
        found = shards.list_shards(part)
        return [entry for path in found for entry in _entries_without_source(part, path, fmt)], (
            f"sources not checked: {exc}"
        )
    chunks = chunks_of(part, fmt) if fmt.chunked else None
    return [_entry(part, unit, options, fmt, chunks) for unit in units], None


def _entry(part: Path, unit, options: dict, fmt: Format, chunks) -> dict:
    task = ParseTask(unit, ParseOptions(micro_step=options["micro_step"]), part, fmt)
    status, meta = status_of(task, options, chunks)
    path = Path(meta["chunk"]) if meta and "chunk" in meta else task.shard_path  # a chunk holds many units' shards
    return _shard_entry(fmt.label(unit), path, status, meta, fmt)


def _entries_without_source(part: Path, path: Path, fmt: Format) -> list[dict]:
    """The entry of a shard file, or those of the units of a chunk file (trendconv.shards)."""
    if not shards.is_chunk(path, shards.shard_dir(part)):
        return [_entry_without_source(part, path, fmt)]
    try:
        metas = shards.read_chunk(path, fmt)
    except DataError:
        return [_shard_entry(dict.fromkeys(fmt.label_fields), path, CORRUPT, None, fmt)]
    return [_shard_entry(fmt.meta_label(meta), path, OK, meta, fmt) for meta in metas]


def _entry_without_source(part: Path, path: Path, fmt: Format) -> dict:
    directory = shards.shard_dir(part)
    try:
        meta = shards.read_own(directory, path.relative_to(directory).as_posix(), fmt).meta
    except DataError:
        return _shard_entry(dict.fromkeys(fmt.label_fields), path, CORRUPT, None, fmt)
    return _shard_entry(fmt.meta_label(meta), path, OK, meta, fmt)


def _shard_entry(label: dict, path: Path, status: str, meta: dict | None, fmt: Format) -> dict:
    meta = meta or {}
    per_metric = meta.get("rows_per_metric", {})
    return {
        **label,
        "shard": path.name,
        "status": status,
        "rows": meta.get("rows", 0),
        "rows_per_metric": {metric: per_metric.get(metric, 0) for metric in fmt.metrics},
        "skipped": meta.get("skipped", {}),
    }


def _totals(entries: list[dict], metrics) -> dict:
    statuses = Counter(entry["status"] for entry in entries)
    per_metric, skipped = Counter(), Counter()
    for entry in entries:
        per_metric.update(entry["rows_per_metric"])
        skipped.update(entry["skipped"])
    return {
        "shards": len(entries),
        "status": {status: statuses.get(status, 0) for status in STATUSES},
        "rows": sum(entry["rows"] for entry in entries),
        "rows_per_metric": {metric: per_metric.get(metric, 0) for metric in metrics},
        "skipped": dict(sorted(skipped.items())),
    }


def _selection_text(record: dict | None) -> str:
    return f", selected {from_record(record)}" if record else ""


def format_inspection(document: dict) -> str:
    """A table a person can read: one line per shard, then the totals."""
    fmt = formats.get(document["input_format"])
    lines = [
        f"WORK {document['work']} ({fmt.name} data)",
        f"DATA {document['data']} ({options_text(document['options'])}{_selection_text(document['selection'])})",
        f"parse {'complete' if document['complete'] else 'NOT complete'}",
    ]
    if document["note"]:
        lines.append(document["note"])
    for other in document["other_formats"]:
        lines.append(f"WORK also holds {other} shards: trendconv inspect {document['work']} --format {other}")
    lines += _table(fmt, document["shards"])
    lines.append(_totals_line(document["totals"]))
    return "\n".join(line.rstrip() for line in lines)


def _table(fmt: Format, entries: list[dict]) -> list[str]:
    """The label columns (text ones left-aligned), status, rows, rows per metric if the format shows them, then
    the skips, unpadded."""
    metrics = fmt.metrics if fmt.metric_columns else ()
    header = (*fmt.label_columns, "status", "rows", *metrics, "skipped")
    rows = [header] + [_row(fmt, entry, metrics) for entry in entries]
    left = [any(isinstance(entry[column], str) for entry in entries) for column in fmt.label_columns]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    return [
        "  ".join(_cell(cell, width, i < len(left) and left[i]) for i, (cell, width) in enumerate(zip(row, widths)))
        + "  "
        + row[-1]
        for row in rows
    ]


def _row(fmt: Format, entry: dict, metrics) -> tuple[str, ...]:
    labels = (str(entry[column]) for column in fmt.label_columns)
    counts = (str(entry["rows_per_metric"][metric]) for metric in metrics)
    return (*labels, entry["status"], str(entry["rows"]), *counts, _skipped(entry))


def _cell(text: str, width: int, left: bool) -> str:
    return text.ljust(width) if left else text.rjust(width)


def _skipped(entry: dict) -> str:
    return ", ".join(f"{reason} {count}" for reason, count in sorted(entry["skipped"].items()))


def _totals_line(totals: dict) -> str:
    statuses = ", ".join(f"{count} {status}" for status, count in totals["status"].items() if count)
    metrics = ", ".join(f"{metric} {count}" for metric, count in totals["rows_per_metric"].items())
    skipped = ", ".join(f"{reason} {count}" for reason, count in totals["skipped"].items()) or "none"
    shard_count = f"{totals['shards']} shards ({statuses or 'none'})"
    return f"total: {shard_count}; rows {totals['rows']} ({metrics}); skipped: {skipped}"
