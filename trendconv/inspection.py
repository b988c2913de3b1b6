"""`trendconv inspect`: what a WORK directory holds, shard by shard, for a person or a program."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from trendconv import shards, workdir
from trendconv.dump.parse import ParseOptions, options_text
from trendconv.errors import DataError, TrendconvError, UsageError
from trendconv.load.schema import METRICS
from trendconv.parse import CORRUPT, MISSING, OK, ParseTask, status_of
from trendconv.scan import scan


def inspect_work(work: Path) -> dict:
    """The JSON document of `inspect --json`: the work's settings, one entry per shard, totals."""
    if not work.is_dir():
        raise UsageError(f"{work}: WORK does not exist")
    settings = workdir.read_json_document(workdir.work_json_path(work), "no parse was started in this WORK")
    data = Path(settings["data"])
    entries, note = _entries(work, data, settings["options"])
    return {
        "work": str(work),
        "data": str(data),
        "options": settings["options"],
        "complete": workdir.manifest_path(work).is_file(),
        "note": note,
        "shards": entries,
        "totals": _totals(entries),
    }


def _entries(work: Path, data: Path, options: dict) -> tuple[list[dict], str | None]:
    try:
        file_sets = scan(data).file_sets
    except TrendconvError as exc:
        return [_entry_without_source(path) for path in shards.list_shards(work)], f"sources not checked: {exc}"
    return [_entry(work, file_set, options) for file_set in file_sets], None


def _entry(work: Path, file_set, options: dict) -> dict:
    task = ParseTask(file_set, ParseOptions(micro_step=bool(options.get("micro_step"))), work)
    status, meta = status_of(task, options)
    return _describe(file_set.step, file_set.rank, task.shard_path, status, meta)


def _entry_without_source(path: Path) -> dict:
    try:
        meta = shards.read_meta(path)
    except DataError:
        return _describe(None, None, path, CORRUPT, None)
    return _describe(meta["step"], meta["rank"], path, OK, meta)


def _describe(step, rank, path: Path, status: str, meta: dict | None) -> dict:
    meta = meta or {}
    return {
        "step": meta.get("step", step),
        "rank": meta.get("rank", rank),
        "shard": path.name,
        "status": status,
        "rows": meta.get("rows", 0),
        "rows_per_metric": {metric: meta.get("rows_per_metric", {}).get(metric, 0) for metric in METRICS},
        "skipped": meta.get("skipped", {}),
    }


def _totals(entries: list[dict]) -> dict:
    statuses = Counter(entry["status"] for entry in entries)
    per_metric, skipped = Counter(), Counter()
    for entry in entries:
        per_metric.update(entry["rows_per_metric"])
        skipped.update(entry["skipped"])
    return {
        "shards": len(entries),
        "status": {status: statuses.get(status, 0) for status in (OK, "stale", CORRUPT, MISSING)},
        "rows": sum(entry["rows"] for entry in entries),
        "rows_per_metric": {metric: per_metric.get(metric, 0) for metric in METRICS},
        "skipped": dict(sorted(skipped.items())),
    }


def format_inspection(document: dict) -> str:
    """A table a person can read: one line per shard, then the totals."""
    lines = [
        f"WORK {document['work']}",
        f"DATA {document['data']} ({options_text(document['options'])})",
        f"parse {'complete' if document['complete'] else 'NOT complete'}",
    ]
    if document["note"]:
        lines.append(document["note"])
    header = ("step", "rank", "status", "rows", *METRICS, "skipped")
    table = [header] + [_row(entry) for entry in document["shards"]]
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    lines += ["  ".join(cell.rjust(width) for cell, width in zip(row, widths)) + "  " + row[-1] for row in table]
    lines.append(_totals_line(document["totals"]))
    return "\n".join(line.rstrip() for line in lines)


def _row(entry: dict) -> tuple[str, ...]:
    skipped = ", ".join(f"{reason} {count}" for reason, count in sorted(entry["skipped"].items()))
    counts = (str(entry["rows_per_metric"][metric]) for metric in METRICS)
    return (str(entry["step"]), str(entry["rank"]), entry["status"], str(entry["rows"]), *counts, skipped)


def _totals_line(totals: dict) -> str:
    statuses = ", ".join(f"{count} {status}" for status, count in totals["status"].items() if count)
    metrics = ", ".join(f"{metric} {count}" for metric, count in totals["rows_per_metric"].items())
    skipped = ", ".join(f"{reason} {count}" for reason, count in totals["skipped"].items()) or "none"
    shard_count = f"{totals['shards']} shards ({statuses or 'none'})"
    return f"total: {shard_count}; rows {totals['rows']} ({metrics}); skipped: {skipped}"
