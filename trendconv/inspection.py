"""`trendconv inspect`: what a WORK directory holds, shard by shard, for a person or a program."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from trendconv import schemas, shards, workdir
from trendconv.dump.parse import ParseOptions, options_text
from trendconv.errors import DataError, TrendconvError
from trendconv.load.schema import METRICS, MONITOR_METRICS
from trendconv.parse import CORRUPT, MISSING, OK, ParseTask, status_of
from trendconv.parse.formats import DUMP, FORMATS, MONITOR

_METRICS = {DUMP: METRICS, MONITOR: MONITOR_METRICS}


def inspect_work(work: Path, input_format: str | None = None) -> dict:
    """The JSON document of `inspect --json`: the work's settings, one entry per shard, totals.

    Without INPUT_FORMAT: the dump part of WORK if a parse of dump data was started there, else the monitor part.
    """
    workdir.require_work(work)
    started = [fmt for fmt in FORMATS if workdir.work_json_path(FORMATS[fmt].work_dir(work)).exists()]
    input_format = input_format or (started[0] if started else DUMP)
    part = FORMATS[input_format].work_dir(work)
    settings = workdir.read_json_document(
        workdir.work_json_path(part), f"no parse of {input_format} data was started", schemas.work_json(input_format)
    )
    data = Path(settings["data"])
    entries, note = _entries(part, data, settings["options"], input_format)
    return {
        "work": str(work),
        "input_format": input_format,
        "other_formats": [fmt for fmt in started if fmt != input_format],
        "data": str(data),
        "options": settings["options"],
        "complete": _complete(part, input_format),
        "note": note,
        "shards": entries,
        "totals": _totals(entries, _METRICS[input_format]),
    }


def _complete(part: Path, input_format: str) -> bool:
    """Whether the last parse finished: its manifest is there, and is one `load` reads."""
    try:
        workdir.read_json_document(workdir.manifest_path(part), "", schemas.manifest(input_format))
    except DataError:
        return False
    return True


def _entries(part: Path, data: Path, options: dict, input_format: str) -> tuple[list[dict], str | None]:
    try:
        units = FORMATS[input_format].scan(data).units
    except TrendconvError as exc:
        found = shards.list_shards(part)
        return [_entry_without_source(part, path, input_format) for path in found], f"sources not checked: {exc}"
    return [_entry(part, unit, options, input_format) for unit in units], None


def _entry(part: Path, unit, options: dict, input_format: str) -> dict:
    task = ParseTask(unit, ParseOptions(micro_step=options["micro_step"]), part, input_format)
    status, meta = status_of(task, options)
    place = {"file": unit.relative} if input_format == MONITOR else {"step": unit.step}
    return _describe({**place, "rank": unit.rank}, task.shard_path, status, meta, input_format)


def _entry_without_source(part: Path, path: Path, input_format: str) -> dict:
    directory = shards.shard_dir(part)
    try:
        meta = shards.read_own(directory, path.relative_to(directory).as_posix(), input_format).meta
    except DataError:
        place = {"file": None} if input_format == MONITOR else {"step": None}
        return _describe({**place, "rank": None}, path, CORRUPT, None, input_format)
    if input_format == MONITOR:
        place = {"file": f"{meta['run_dir']}/{meta['file']}"}
    else:
        place = {"step": meta["step"]}
    return _describe({**place, "rank": meta["rank"]}, path, OK, meta, input_format)


def _describe(place: dict, path: Path, status: str, meta: dict | None, input_format: str) -> dict:
    meta = meta or {}
    per_metric = meta.get("rows_per_metric", {})
    return {
        **place,
        "shard": path.name,
        "status": status,
        "rows": meta.get("rows", 0),
        "rows_per_metric": {metric: per_metric.get(metric, 0) for metric in _METRICS[input_format]},
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
        "status": {status: statuses.get(status, 0) for status in (OK, "stale", CORRUPT, MISSING)},
        "rows": sum(entry["rows"] for entry in entries),
        "rows_per_metric": {metric: per_metric.get(metric, 0) for metric in metrics},
        "skipped": dict(sorted(skipped.items())),
    }


def format_inspection(document: dict) -> str:
    """A table a person can read: one line per shard, then the totals."""
    lines = [
        f"WORK {document['work']} ({document['input_format']} data)",
        f"DATA {document['data']} ({options_text(document['options'])})",
        f"parse {'complete' if document['complete'] else 'NOT complete'}",
    ]
    if document["note"]:
        lines.append(document["note"])
    for other in document["other_formats"]:
        lines.append(f"WORK also holds {other} shards: trendconv inspect {document['work']} --format {other}")
    monitor = document["input_format"] == MONITOR
    header = (
        ("rank", "file", "status", "rows", "skipped")
        if monitor
        else ("step", "rank", "status", "rows", *METRICS, "skipped")
    )
    table = [header] + [_monitor_row(entry) if monitor else _dump_row(entry) for entry in document["shards"]]
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    lines += [
        "  ".join(_cell(cell, width, monitor and i == 1) for i, (cell, width) in enumerate(zip(row, widths)))
        + "  "
        + row[-1]
        for row in table
    ]
    lines.append(_totals_line(document["totals"]))
    return "\n".join(line.rstrip() for line in lines)


def _cell(text: str, width: int, left: bool) -> str:
    return text.ljust(width) if left else text.rjust(width)


def _skipped(entry: dict) -> str:
    return ", ".join(f"{reason} {count}" for reason, count in sorted(entry["skipped"].items()))


def _dump_row(entry: dict) -> tuple[str, ...]:
    counts = (str(entry["rows_per_metric"][metric]) for metric in METRICS)
    return (str(entry["step"]), str(entry["rank"]), entry["status"], str(entry["rows"]), *counts, _skipped(entry))


def _monitor_row(entry: dict) -> tuple[str, ...]:
    return (str(entry["rank"]), str(entry["file"]), entry["status"], str(entry["rows"]), _skipped(entry))


def _totals_line(totals: dict) -> str:
    statuses = ", ".join(f"{count} {status}" for status, count in totals["status"].items() if count)
    metrics = ", ".join(f"{metric} {count}" for metric, count in totals["rows_per_metric"].items())
    skipped = ", ".join(f"{reason} {count}" for reason, count in totals["skipped"].items()) or "none"
    shard_count = f"{totals['shards']} shards ({statuses or 'none'})"
    return f"total: {shard_count}; rows {totals['rows']} ({metrics}); skipped: {skipped}"
