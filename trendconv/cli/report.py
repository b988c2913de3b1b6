"""What the CLI shows a person: progress bars on stderr (TTY only), warnings, errors and summaries."""

from __future__ import annotations

import os
import sys
from collections import Counter

import typer

import trendconv.progress
from trendconv import formats
from trendconv.errors import DEBUG_ENV, plural

debug = False  # set by `trendconv --debug`


def debugging() -> bool:
    """Whether to show an internal error's traceback: `trendconv --debug`, or TRENDCONV_DEBUG set (not 0)."""
    return debug or os.environ.get(DEBUG_ENV, "0") not in ("", "0")


# The library names the fix of a problem in Python terms (trendconv.library); the command line names its own.
CLI_WORDS = {
    "`trendconv.parse()`": "`trendconv parse`",
    "`micro_step=False`": "--no-micro-step",
    "`executor='dask'`": "--executor dask",
    "with its traceback (the error's `detail`)": "with the traceback `trendconv --debug ...` shows",
    "another `out` or `name`": "another --db or --name",
    "another `out`": "another --db",
}


def in_cli_words(message: str) -> str:
    for library, cli in CLI_WORDS.items():
        message = message.replace(library, cli)
    return message


def print_error(message: str) -> None:
    typer.echo(f"error: {in_cli_words(message)}", err=True)


def print_warnings(warnings: list[str]) -> None:
    for warning in warnings:
        typer.echo(f"warning: {in_cli_words(warning)}", err=True)


def finish(print_summary, summary, *, quiet: bool) -> None:
    """Warnings always; the summary unless --quiet."""
    print_warnings(summary.warnings)
    if not quiet:
        print_summary(summary)


def _new_bars():
    """Rich's progress bars; rich is imported only here, for a terminal that shows them."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True, highlight=False),
        transient=True,
    )


class Bars(trendconv.progress.Progress):
    """Rich progress bars on stderr, one per stage the command runs ("parse", "load"), shown only on a terminal
    and when not --quiet."""

    def __init__(self, stages: tuple[str, ...], *, enabled: bool):
        self._stages = stages
        self._progress = _new_bars() if enabled and sys.stderr.isatty() else None
        self._bars: dict[str, object] = {}

    def __enter__(self):
        if self._progress:
            self._progress.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._progress:
            self._progress.stop()

    def planned(self, format: str, units: int) -> None:
        """New bars; those of the format before go."""
        if self._progress:
            for bar in self._bars.values():
                self._progress.remove_task(bar)
            self._bars = {stage: self._progress.add_task(stage.ljust(5), total=units) for stage in self._stages}

    def parsed(self, format: str, *, reused: bool) -> None:
        self._advance("parse")

    def loaded(self, format: str) -> None:
        self._advance("load")

    def _advance(self, stage: str) -> None:
        if stage in self._bars:
            self._progress.advance(self._bars[stage])


def _duplicates_lines(loaded) -> list[str]:
    if not loaded.duplicates:
        return []
    return [f"  dropped {loaded.duplicates} duplicate rows (same rank, step, target, metric; first kept)"]


def _skipped_lines(skipped: Counter | dict) -> list[str]:
    return [f"  skipped {count} × {reason}" for reason, count in sorted(skipped.items())]


def _skipped_file_lines(parsed) -> list[str]:
    return [f"  skipped {plural(count, 'file')}: {reason}" for reason, count in sorted(parsed.skipped_files.items())]


def _selection_lines(parsed) -> list[str]:
    """What --steps/--ranks selected, and what they left out unread."""
    if parsed.selection is None:
        return []
    left_out = ", ".join(f"{count} × {what}" for what, count in parsed.left_out.items()) or "nothing"
    return [f"  selected {parsed.selection}; left out unread: {left_out}"]


def _units(parsed) -> str:
    return formats.get(parsed.format).units(parsed.files)


def print_parse_summary(summary) -> None:
    lines = [
        f"parsed {_units(summary)} into {summary.shard_dir}: {summary.parsed} parsed, {summary.reused} reused",
        f"  rows {summary.rows}",
        *_selection_lines(summary),
        *_skipped_file_lines(summary),
        *_skipped_lines(summary.skipped),
    ]
    if summary.removed_orphans:
        noun = formats.get(summary.format).unit_noun
        lines.append(f"  removed {summary.removed_orphans} shards of {noun}s no longer in DATA")
    typer.echo("\n".join(lines))


def _wrote(loaded) -> str:
    if not loaded.parts:
        return f"wrote {loaded.db} ({loaded.size} bytes)"
    return f"wrote {len(loaded.parts)} databases ({loaded.size} bytes) in {loaded.db.parent}, split by steps:"


def _part_lines(loaded) -> list[str]:
    return [
        f"  {part.db.name}: {part.size} bytes, {part.shards} shards, rows {part.rows}, targets {part.targets}"
        for part in loaded.parts
    ]


def _totals(loaded) -> str:
    within = " (each database has its own)" if loaded.parts else ""
    return f"  rows {loaded.rows}, targets {loaded.targets}, tags {loaded.tags}, tag links {loaded.tag_links}{within}"


def print_load_summary(summary) -> None:
    lines = [f"{_wrote(summary)} from {summary.shards} shards", *_part_lines(summary), _totals(summary)]
    lines += _duplicates_lines(summary)
    typer.echo("\n".join(lines))


def _load_timing(summary) -> str:
    if summary.load.parts:
        return f"{len(summary.load.parts)} databases at once"
    return "overlapping parse" if formats.get(summary.format).streams else "after parse"


def print_run_summary(summary) -> None:
    parsed, loaded, seconds = summary.parse, summary.load, summary.seconds
    lines = [
        _wrote(loaded),
        *_part_lines(loaded),
        f"  {_units(parsed)}: {parsed.parsed} parsed, {parsed.reused} reused (shards in {summary.work})",
        _totals(loaded),
    ]
    lines += _duplicates_lines(loaded)
    lines += _selection_lines(parsed)
    lines += _skipped_file_lines(parsed)
    lines += _skipped_lines(parsed.skipped)
    lines.append(
        f"  time: scan {seconds['scan']:.2f}s, parse {seconds['parse']:.2f}s, "
        f"load {seconds['load']:.2f}s ({_load_timing(summary)}), index {seconds['index']:.2f}s, "
        f"total {seconds['total']:.2f}s"
    )
    typer.echo("\n".join(lines))


def print_batch(batch) -> None:
    """One line per batch of `run --follow`, on stderr as it goes in."""
    if batch.was is not None:
        typer.echo(f"{batch.was}: renamed to {batch.db.name}, as its steps now name it", err=True)
        return
    if batch.removed:
        typer.echo(f"{batch.db}: removed: its steps are now in the split's other databases", err=True)
        return
    units = formats.get(batch.format).units(batch.units)
    if batch.created:
        line = f"{batch.db}: made from {units}, {batch.rows:,} rows"
    elif batch.rebuilt is not None:
        line = f"{batch.db}: rebuilt in place with {units} more ({in_cli_words(batch.rebuilt)}), {batch.rows:,} rows"
    else:
        line = f"{batch.db}: appended {units}, {batch.rows:,} rows"
    typer.echo(f"{line} (batch {batch.mark})", err=True)


def _follow_files(summary) -> str:
    """The database followed, or the first and last of a split and how many."""
    if len(summary.files) < 2:
        return str(summary.db)
    return f"{summary.files[0]} … {summary.files[-1].name} ({len(summary.files)} databases)"


def print_follow_summary(summary) -> None:
    fmt = formats.get(summary.format)
    rebuilt = f", {plural(summary.rebuilt, 'rebuild')} in place" if summary.rebuilt else ""
    batches = "1 batch" if summary.appended == 1 else f"{summary.appended} batches"
    typer.echo(
        f"{_follow_files(summary)}: stopped following with {fmt.units(summary.units)} in; "
        f"{batches} appended ({summary.rows:,} rows){rebuilt}"
    )
    if summary.held:
        typer.echo(f"  not converted (files that do not parse): {'; '.join(summary.held)}")
