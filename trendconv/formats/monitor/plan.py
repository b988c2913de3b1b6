"""What the shard footers of monitor data decide before any row is loaded: metrics, stat columns, step slots and
global_stats. A monitor step's slots depend on every file (docs/monitor-format.md §7: the micro-step count of an
original step is the largest over all ranks and metrics)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from trendconv import int64
from trendconv.errors import DataError, plural
from trendconv.formats.monitor.metrics import METRICS, STATS
from trendconv.options import first_agreeing


@dataclass
class MonitorPlan:
    """What the shard footers alone decide: metrics, stat columns, step slots and global_stats."""

    micro_step: bool
    metrics: list[str]  # present metrics, canonical order
    stats: dict[str, list[str]]  # per present metric, canonical order
    offsets: dict[int, int] = field(default_factory=dict)
    min_step: int = 0
    max_step: int = 0
    max_rank: int = 0
    warnings: list[str] = field(default_factory=list)

    @property
    def columns(self) -> list[str]:
        """trend_data's stat columns: every stat of a present metric, canonical order."""
        used = {stat for stats in self.stats.values() for stat in stats}
        return [stat for stat in STATS if stat in used]


def plan_monitor(metas: Iterable[dict], counts: list[tuple[int, int]] | None = None) -> MonitorPlan:
    """What METAS decide, read once (a load of many files never holds every meta). COUNTS (`micro_step_counts`
    of every file of the run) when METAS are one database's files of a split: their global steps are then those
    of the unsplit database."""
    footers = Footers()
    for meta in metas:
        footers.add(meta)
    return footers.plan(counts)


class Footers:
    """What `plan_monitor` needs of the metas, gathered one meta at a time."""

    def __init__(self) -> None:
        self.first: dict | None = None
        self.files: Counter = Counter()  # per metric
        self.with_rows: Counter = Counter()
        self.stats: dict[str, set[str]] = {}
        self.max_rank = 0
        self.counts: dict[int, tuple[int, str]] = {}  # per original step: its micro-step count, and a file that has it

    def add(self, meta: dict) -> None:
        self._check_options(meta)
        metric = meta["metric"]
        self.files[metric] += 1
        self.with_rows[metric] += bool(meta["rows"])
        self.stats.setdefault(metric, set()).update(meta["stats"])
        self.max_rank = max(self.max_rank, meta["rank"])
        for step, count in meta["micro_steps_per_step"]:
            self.counts[step] = max(self.counts.get(step, (0, "")), (count, f"{meta['run_dir']}/{meta['file']}"))

    def _check_options(self, meta: dict) -> None:
        self.first = first_agreeing(self.first, meta, f"{meta['run_dir']}/{meta['file']}")

    def plan(self, counts: list[tuple[int, int]] | None) -> MonitorPlan:
        if self.first is None:
            raise DataError("no monitor shards to load")
        metrics = [metric for metric in METRICS if self.with_rows[metric]]
        if not metrics:
            raise DataError(f"no data rows in any of the {self.files.total()} monitor CSV files")
        # the union of the stat columns of the metric's files, header-only files included (docs/monitor-format.md §4.3)
        stats = {metric: [stat for stat in STATS if stat in self.stats[metric]] for metric in metrics}
        if not any(stats.values()):
            raise DataError(f"no stat column ({', '.join(STATS[:6])}, ...) in any monitor CSV file")
        plan = MonitorPlan(bool(self.first["options"]["micro_step"]), metrics, stats, max_rank=self.max_rank)
        plan.warnings = self._rowless_metric_warnings()
        if counts is None:
            _plan_steps(plan, self.counts)
        else:
            _plan_part_steps(plan, sorted(self.counts), counts)
        return plan

    def _rowless_metric_warnings(self) -> list[str]:
        """docs/monitor-format.md Q1: msprobe lists such a metric in global_stats (where the Trend Analyzer cannot
        find it)."""
        return [
            f"{metric}: {plural(count, 'CSV file')} without a valid data row; the metric is left out of the database "
            "(msprobe data2db lists it in global_stats and may write no trend rows at all)"
            for metric, count in sorted(self.files.items())
            if not self.with_rows[metric]
        ]


def micro_step_counts(metas: list[dict]) -> list[tuple[int, int]] | None:
    """In micro-step mode, each original step with its micro-step count, the largest in any file (None in step
    mode)."""
    if not metas or not metas[0]["options"]["micro_step"]:
        return None
    counts: dict[int, int] = {}
    for meta in metas:
        for step, count in meta["micro_steps_per_step"]:
            counts[step] = max(counts.get(step, 0), count)
    return sorted(counts.items())


def _plan_part_steps(plan: MonitorPlan, steps: list[int], counts: list[tuple[int, int]]) -> None:
    """The slots of every step of the run (checked when the whole run was planned), and global_stats' steps
    from STEPS, those of its files."""
    offset, ends = 0, {}
    for step, count in counts:
        plan.offsets[step] = offset
        offset += count
        ends[step] = offset - 1
    if steps:
        plan.min_step, plan.max_step = plan.offsets[steps[0]], ends[steps[-1]]


def _plan_steps(plan: MonitorPlan, counts: dict[int, tuple[int, str]]) -> None:
    steps = sorted(counts)
    if plan.micro_step:
        offset, last = 0, None
        for step in steps:
            _check_slot(offset, last)
            plan.offsets[step] = offset
            offset += counts[step][0]
            last = (step, *counts[step])
        _check_slot(offset - 1, last)
        # -1 (as msprobe has it) when every micro_step is negative: no slot at all. There are rows: else no database.
        plan.min_step, plan.max_step = 0, offset - 1
    else:
        plan.min_step, plan.max_step = (steps[0] if steps else 0), max([0, *steps])


def _check_slot(slot: int, last: tuple[int, int, str] | None) -> None:
    """A step's first slot, and the last slot of all, must be 64-bit integers; LAST (step, micro-step count,
    a file with that count) is the step before, whose slots reach SLOT."""
    if last is not None and not int64.fits(slot):
        step, count, file = last
        raise DataError(
            f"{file}: step {step}, micro_step {count - 1}: with the micro-step slots of the steps before, "
            f"the global steps reach {slot}, beyond a 64-bit integer (`micro_step=False` keeps the original step "
            "numbers)"
        )
