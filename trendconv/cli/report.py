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


def _new_progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=_stderr,
        transient=True,
    )


class _Bar:
    """One rich progress bar, shown only when stderr is a terminal and the user did not ask for quiet."""

    label = ""

    def __init__(self, *, enabled: bool):
        self._progress = _new_progress() if enabled and sys.stderr.isatty() else None
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


class RunProgress:
    """Two bars, parse and load, advancing as shards are parsed and as the loader takes them."""

    def __init__(self, *, enabled: bool):
        self._progress = _new_progress() if enabled and sys.stderr.isatty() else None
        self._tasks: dict[str, object] = {}

    def __enter__(self):
        if self._progress:
            self._progress.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._progress:
            self._progress.stop()

    def plan(self, tasks: list) -> None:
        if self._progress:
            self._tasks = {name: self._progress.add_task(name, total=len(tasks)) for name in ("parse", "load ")}

    def parsed(self, task, meta, reused) -> None:
        if self._tasks:
            self._progress.advance(self._tasks["parse"])

    def loaded(self, shard) -> None:
        if self._tasks:
            self._progress.advance(self._tasks["load "])


def _duplicates_lines(loaded) -> list[str]:
    if not loaded.duplicates:
        return []
    return [f"  dropped {loaded.duplicates} duplicate rows (same rank, step, target, metric; first kept)"]


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
    lines += _duplicates_lines(summary)
    typer.echo("\n".join(lines))


def print_run_summary(summary) -> None:
    parsed, loaded, seconds = summary.parse, summary.load, summary.seconds
    lines = [
        f"wrote {loaded.db} ({loaded.size} bytes)",
        f"  files {parsed.files}: {parsed.parsed} parsed, {parsed.reused} reused (shards in {summary.work})",
        f"  rows {loaded.rows}, targets {loaded.targets}, tags {loaded.tags}, tag links {loaded.tag_links}",
    ]
    lines += _duplicates_lines(loaded)
    lines += _skipped_lines(parsed.skipped)
    lines.append(
        f"  time: scan {seconds['scan']:.2f}s, parse {seconds['parse']:.2f}s, "
        f"load {seconds['load']:.2f}s (overlapping parse), index {seconds['index']:.2f}s, total {seconds['total']:.2f}s"
    )
    typer.echo("\n".join(lines))
