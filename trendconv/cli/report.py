"""What the CLI shows a person: progress bars on stderr (TTY only), warnings, errors and summaries."""

from __future__ import annotations

import os
import sys
from collections import Counter

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

import trendconv.progress
from trendconv import formats
from trendconv.errors import DEBUG_ENV, plural

_stderr = Console(stderr=True, highlight=False)


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


def _new_bars() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=_stderr,
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


def print_load_summary(summary) -> None:
    lines = [
        f"wrote {summary.db} ({summary.size} bytes) from {summary.shards} shards",
        f"  rows {summary.rows}, targets {summary.targets}, tags {summary.tags}, tag links {summary.tag_links}",
    ]
    lines += _duplicates_lines(summary)
    typer.echo("\n".join(lines))


def _load_timing(parsed) -> str:
    return "overlapping parse" if formats.get(parsed.format).streams else "after parse"


def print_run_summary(summary) -> None:
    parsed, loaded, seconds = summary.parse, summary.load, summary.seconds
    lines = [
        f"wrote {loaded.db} ({loaded.size} bytes)",
        f"  {_units(parsed)}: {parsed.parsed} parsed, {parsed.reused} reused (shards in {summary.work})",
        f"  rows {loaded.rows}, targets {loaded.targets}, tags {loaded.tags}, tag links {loaded.tag_links}",
    ]
    lines += _duplicates_lines(loaded)
    lines += _selection_lines(parsed)
    lines += _skipped_file_lines(parsed)
    lines += _skipped_lines(parsed.skipped)
    lines.append(
        f"  time: scan {seconds['scan']:.2f}s, parse {seconds['parse']:.2f}s, "
        f"load {seconds['load']:.2f}s ({_load_timing(parsed)}), index {seconds['index']:.2f}s, "
        f"total {seconds['total']:.2f}s"
    )
    typer.echo("\n".join(lines))
