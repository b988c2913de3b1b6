"""`trendconv inspect`: what a WORK directory holds, shard by shard, for a person or a program.

`inspect_work` returns the whole document (the Python API); `write_inspection` writes the same text shard by shard
(the command line), so that its memory does not grow with the number of shards: the JSON as each entry is made,
the table through a temporary file that holds its cells until every column's width is known.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson

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
    head, entries = _inspection(work, input_format)
    listed = list(entries)
    return {**head, "shards": listed, "totals": _totals(listed, formats.get(head["input_format"]).metrics)}


def write_inspection(work: Path, input_format: str | None, write: Callable[[str], None], *, as_json: bool) -> None:
    """What `inspect_work` returns, written with WRITE as JSON (as orjson indents it) or as the table of
    `format_inspection`, one shard at a time."""
    head, entries = _inspection(work, input_format)
    fmt = formats.get(head["input_format"])
    totals = Totals(fmt.metrics)
    counted = (totals.add(entry) for entry in entries)
    if as_json:
        _write_json(head, counted, totals, write)
    else:
        _write_table(fmt, head, counted, totals, write)


def _inspection(work: Path, input_format: str | None) -> tuple[dict, Iterator[dict]]:
    """The document's fields before its shards, and its shard entries, made as they are asked for."""
    workdir.require_work(work)
    started = [fmt for fmt in formats.FORMATS.values() if _started(work, fmt)]
    fmt = formats.get(input_format) if input_format else (started or list(formats.FORMATS.values()))[0]
    part = workdir.found_part(work, fmt)
    started_text = f"no parse of {fmt.name} data was started"
    settings = workdir.read_json_document(workdir.work_json_path(part), started_text, schemas.work_json(fmt.name))
    data = Path(settings["data"])
    selection = from_record(settings.get("selection"))
    entries, note = _entries(part, data, settings["options"], fmt, selection)
    head = {
        "work": str(work),
        "input_format": fmt.name,
        "other_formats": [other.name for other in started if other is not fmt],
        "data": str(data),
        "options": settings["options"],
        "selection": settings.get("selection"),  # what --steps/--ranks selected; None: everything
        "complete": _complete(part, fmt),
        "note": note,
    }
    return head, entries


def _started(work: Path, fmt: Format) -> bool:
    return workdir.work_json_path(workdir.found_part(work, fmt)).exists()


def _complete(part: Path, fmt: Format) -> bool:
    """Whether the last parse finished: its manifest is there, and is one `load` reads."""
    try:
        workdir.read_json_document(workdir.manifest_path(part), "", schemas.manifest(fmt.name))
    except DataError:
        return False
    return True


def _entries(part: Path, data: Path, options: dict, fmt: Format, selection) -> tuple[Iterator[dict], str | None]:
    """One entry per unit of DATA that the parse selected, each made when it is asked for."""
    try:
        units = (fmt.scan(data, selection) if selection else fmt.scan(data)).units
    except TrendconvError as exc:
        found = shards.list_shards(part)
        entries = (entry for path in found for entry in _entries_without_source(part, path, fmt))
        return entries, f"sources not checked: {exc}"
    chunks = chunks_of(part, fmt, spill=False) if fmt.chunked else None  # inspect writes nothing in WORK
    return (_entry(part, unit, options, fmt, chunks) for unit in units), None


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
    totals = Totals(metrics)
    for entry in entries:
        totals.add(entry)
    return totals.document()


class Totals:
    """The totals of the entries `add` is given."""

    def __init__(self, metrics) -> None:
        self.metrics, self.shards, self.rows = metrics, 0, 0
        self.statuses, self.per_metric, self.skipped = Counter(), Counter(), Counter()

    def add(self, entry: dict) -> dict:
        self.shards += 1
        self.rows += entry["rows"]
        self.statuses[entry["status"]] += 1
        self.per_metric.update(entry["rows_per_metric"])
        self.skipped.update(entry["skipped"])
        return entry

    def document(self) -> dict:
        return {
            "shards": self.shards,
            "status": {status: self.statuses.get(status, 0) for status in STATUSES},
            "rows": self.rows,
            "rows_per_metric": {metric: self.per_metric.get(metric, 0) for metric in self.metrics},
            "skipped": dict(sorted(self.skipped.items())),
        }


def _indented(document, spaces: int) -> str:
    """DOCUMENT as orjson indents it, every line but the first SPACES further in (its place inside the whole)."""
    return orjson.dumps(document, option=orjson.OPT_INDENT_2).decode().replace("\n", "\n" + " " * spaces)


def _write_json(head: dict, entries: Iterator[dict], totals: Totals, write: Callable[[str], None]) -> None:
    """The text of `orjson.dumps(document, option=OPT_INDENT_2)`, written entry by entry."""
    write(_indented(head, 0)[:-2] + ',\n  "shards": [')
    first = True
    for entry in entries:
        write(("\n    " if first else ",\n    ") + _indented(entry, 4))
        first = False
    write("]" if first else "\n  ]")
    write(',\n  "totals": ' + _indented(totals.document(), 2) + "\n}")


def _selection_text(record: dict | None) -> str:
    return f", selected {from_record(record)}" if record else ""


def format_inspection(document: dict) -> str:
    """A table a person can read: one line per shard, then the totals."""
    fmt = formats.get(document["input_format"])
    lines = _head_lines(document)
    lines += _table(fmt, document["shards"])
    lines.append(_totals_line(document["totals"]))
    return "\n".join(line.rstrip() for line in lines)


def _head_lines(document: dict) -> list[str]:
    """The lines before the table."""
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
    return [line.rstrip() for line in lines]


def _write_table(
    fmt: Format, head: dict, entries: Iterator[dict], totals: Totals, write: Callable[[str], None]
) -> None:
    """`format_inspection`'s text: the rows wait in a temporary file (one JSON array a line) until the widths of
    the columns are known."""
    metrics = fmt.metrics if fmt.metric_columns else ()
    header = (*fmt.label_columns, "status", "rows", *metrics, "skipped")
    widths = [len(cell) for cell in header[:-1]]
    left = [False] * len(fmt.label_columns)
    with tempfile.TemporaryFile() as rows:
        for entry in entries:
            row = _row(fmt, entry, metrics)
            widths = [max(width, len(cell)) for width, cell in zip(widths, row)]
            left = [was or isinstance(entry[column], str) for was, column in zip(left, fmt.label_columns)]
            rows.write(orjson.dumps(row) + b"\n")
        write("\n".join(_head_lines(head)))
        rows.seek(0)
        for line in (header, *(orjson.loads(line) for line in rows)):
            write("\n" + _line(line, widths, left).rstrip())
    write("\n" + _totals_line(totals.document()))


def _line(row, widths: list[int], left: list[bool]) -> str:
    cells = (_cell(cell, width, i < len(left) and left[i]) for i, (cell, width) in enumerate(zip(row, widths)))
    return "  ".join(cells) + "  " + row[-1]


def _table(fmt: Format, entries: list[dict]) -> list[str]:
    """The label columns (text ones left-aligned), status, rows, rows per metric if the format shows them, then
    the skips, unpadded."""
    metrics = fmt.metrics if fmt.metric_columns else ()
    header = (*fmt.label_columns, "status", "rows", *metrics, "skipped")
    rows = [header] + [_row(fmt, entry, metrics) for entry in entries]
    left = [any(isinstance(entry[column], str) for entry in entries) for column in fmt.label_columns]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    return [_line(row, widths, left) for row in rows]


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
