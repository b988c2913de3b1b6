"""The databases of a split output, built at the same time by loader processes (or one after another in this
process), each as an unsplit one is: to a private temporary file, complete before anything is renamed.

A loader builds its database at a temporary path of its own process id and, once it is complete, renames it to
one of the main process's id: the main process publishes it later, and a concurrent load into the same directory
then sees a temporary file whose owner is alive (trendconv.loading.build).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trendconv import formats, interrupt
from trendconv.errors import OutputError, TrendconvError, internal_error
from trendconv.executors import Executor, local_executor
from trendconv.loading.build import publish, remove_dead_temporaries, stage_shards
from trendconv.loading.records import ShardList
from trendconv.loading.split import Part
from trendconv.summaries import LoadSummary


@dataclass(frozen=True)
class PartJob:
    """What a loader process needs to build one database of a split."""

    format: str
    out_dir: Path
    name: str
    shards: ShardList  # compressed (trendconv.loading.records)
    carry: Any
    index: bool
    max_size: int
    owner: int  # the main process

    @property
    def tmp(self) -> Path:
        """Where the complete database waits for `publish`."""
        return self.out_dir / f".{self.name}.{self.owner}.tmp"


class SealedPart:
    """A database of a split, complete at its temporary path: the Builder protocol's `publish` and `abort`."""

    def __init__(self, job: PartJob, summary: LoadSummary, seconds: dict):
        self.tmp, self.final, self.summary, self.seconds = job.tmp, job.out_dir / job.name, summary, seconds

    def publish(self) -> LoadSummary:
        return publish(self.tmp, self.final, self.summary, self.seconds)

    def abort(self) -> None:
        self.tmp.unlink(missing_ok=True)
        interrupt.finished(self.tmp)


def jobs_of(fmt, parts: list[Part], carry: Any, out_dir: Path, *, index: bool, max_size: int) -> list[PartJob]:
    owner = os.getpid()
    return [PartJob(fmt.name, out_dir, part.name, part.shards, carry, index, max_size, owner) for part in parts]


def build_parts(jobs: list[PartJob], *, workers: int, executor: Executor | None = None, on_part=None) -> list:
    """Build every job's database, WORKERS at a time (or on EXECUTOR): the SealedParts, in the jobs' order. On
    any failure every temporary file is removed, and the first failure in the jobs' order is raised."""
    for job in jobs:
        interrupt.unfinished(job.tmp)
    executor = executor or local_executor(max(1, min(workers, len(jobs))))
    sealed: dict[int, SealedPart] = {}
    try:
        with contextlib.closing(executor.imap_unordered(build_part, list(enumerate(jobs)))) as outcomes:
            for outcome in outcomes:
                if outcome.error is not None:
                    raise _failure(outcome.error)
                number, summary, seconds = outcome.value
                sealed[number] = SealedPart(jobs[number], summary, seconds)
                if on_part:
                    on_part(sealed[number])
    except BaseException:
        for job in jobs:  # the loaders are gone: also what a killed one left under its own process id
            job.tmp.unlink(missing_ok=True)
            interrupt.finished(job.tmp)
            remove_dead_temporaries(job.out_dir, job.name)
        raise
    return [sealed[number] for number in range(len(jobs))]


def _failure(error: BaseException) -> TrendconvError:
    if isinstance(error, TrendconvError):
        return error
    return internal_error(error, "running the loader processes")


def build_part(numbered: tuple[int, PartJob]) -> tuple[int, LoadSummary, dict]:
    """Loader entry point: one database of a split, complete at the job's `tmp`."""
    number, job = numbered
    fmt = formats.get(job.format)
    try:
        builder = stage_shards(
            fmt,
            job.shards,
            job.out_dir,
            index=job.index,
            name=job.name,
            carry=job.carry,
        )
    except TrendconvError:
        raise
    except Exception as exc:  # noqa: BLE001 - a bug: said so here, where its traceback is
        raise internal_error(exc, f"building {job.out_dir / job.name}") from None
    try:
        check_size(builder.tmp, builder.final, job.max_size)
        os.replace(builder.tmp, job.tmp)
    except BaseException:
        builder.abort()
        raise
    interrupt.finished(builder.tmp)
    return number, builder.summary, builder.seconds


def check_size(tmp: Path, final: Path, max_size: int) -> None:
    """The split decided sizes by an estimate (`Format.row_bytes`) meant to be above any database: a database
    above MAX_SIZE after all is our estimate's failure, not the data's."""
    size = tmp.stat().st_size
    if size > max_size:
        raise OutputError(
            f"{final}: {size} bytes, more than the {max_size} bytes of --max-db-size: the split's estimate of the "
            "database sizes fell short, a trendconv bug (please report it); --split-steps N makes smaller files"
        )


def combined(sealed: list) -> LoadSummary:
    """One summary of a split's databases (complete once they are published): totals, and each database's own
    summary in `parts`."""
    total = LoadSummary(parts=[part.summary for part in sealed], db=sealed[0].final)
    for part in total.parts:
        for key in ("shards", "rows", "duplicates", "targets", "tags", "tag_links"):
            setattr(total, key, getattr(total, key) + getattr(part, key))
        total.warnings.extend(part.warnings)
    return total
