"""What the CLI shows a person: progress bars on stderr (TTY only), warnings, errors and summaries."""

from __future__ import annotations

import sys
from collections import Counter

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

_stderr = Console(stderr=True, highlight=False)


def print_error(message: str) -> None:
    typer.echo(f"error: {message}", err=True)


def print_warnings(warnings: list[str]) -> None:
    for warning in warnings:
        typer.echo(f"warning: {warning}", err=True)


class _Bar:
    """One rich progress bar, shown only when stderr is a terminal and the user did not ask for quiet."""

    label = ""

    def __init__(self, *, enabled: bool):
        self._progress = None
        if enabled and sys.stderr.isatty():
            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=_stderr,
                transient=True,
            )
        self._task = None

    def __enter__(self):
        if self._progress:
            self._progress.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._progress:
            self._progress.stop()

    def plan(self, items: list) -> None:
        if self._progress:
            self._task = self._progress.add_task(self.label, total=len(items))

    def _advance(self) -> None:
        if self._progress and self._task is not None:
            self._progress.advance(self._task)


class ParseProgress(_Bar):
    label = "parse"

    def shard(self, task, meta, reused) -> None:
        self._advance()


class LoadProgress(_Bar):
    label = "load "

    def shard(self, shard) -> None:
        self._advance()


def _skipped_lines(skipped: Counter | dict) -> list[str]:
    return [f"  skipped {count} × {reason}" for reason, count in sorted(skipped.items())]


def print_parse_summary(summary, work) -> None:
    lines = [
        f"parsed {summary.files} file sets into {work}/shards: {summary.parsed} parsed, {summary.reused} reused",
        f"  rows {summary.rows}",
        *_skipped_lines(summary.skipped),
    ]
    if summary.removed_orphans:
        lines.append(f"  removed {summary.removed_orphans} shards of file sets no longer in DATA")
    typer.echo("\n".join(lines))


def print_load_summary(summary) -> None:
    lines = [
        f"wrote {summary.db} ({summary.size} bytes) from {summary.shards} shards",
        f"  rows {summary.rows}, targets {summary.targets}, tags {summary.tags}, tag links {summary.tag_links}",
    ]
    if summary.duplicates:
        lines.append(f"  dropped {summary.duplicates} duplicate rows (same rank, step, target, metric; first kept)")
    typer.echo("\n".join(lines))
