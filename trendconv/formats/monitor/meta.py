"""What a monitor shard's meta holds besides the common keys (trendconv.schemas), and what its values must agree
on."""

from __future__ import annotations

from trendconv import schemas
from trendconv.formats.monitor.metrics import METRICS, STATS
from trendconv.formats.monitor.scan import RUN_DIR, metric_of

RANK = (0, 99999)  # a run directory's rank has at most 5 digits (formats.monitor.scan.RUN_DIR)
FIELDS = {
    "rank": schemas.integer(*RANK),
    "run_dir": schemas.file_name,
    "file": schemas.file_name,
    "metric": schemas.one_of(METRICS, "a monitor metric name"),
    "stats": schemas.list_of(schemas.one_of(STATS, "a monitor stat name"), distinct=True),
    "has_micro_step": schemas.boolean,
    "micro_steps_per_step": schemas.list_of(
        schemas.pair(schemas.integer(*schemas.INT64), schemas.integer(*schemas.COUNT))
    ),
}


def check(document: dict) -> None:
    metric, rows = document["metric"], document["rows"]
    if document["rows_per_metric"] != ({metric: rows} if rows else {}):
        raise schemas.Invalid(f"'rows_per_metric' is not the rows of metric {metric!r}")
    if metric_of(document["file"]) != metric:
        raise schemas.Invalid(f"'file' {document['file']!r} is not a CSV file name of metric {metric!r}")
    run = RUN_DIR.match(document["run_dir"])
    if run is None or int(run[2]) != document["rank"]:
        raise schemas.Invalid(f"'run_dir' {document['run_dir']!r} is not a run directory of rank {document['rank']}")
    if bool(rows) != bool(document["micro_steps_per_step"]):
        raise schemas.Invalid(
            f"'micro_steps_per_step' is {schemas.shown(document['micro_steps_per_step'])} for {rows} rows"
        )
    steps = [step for step, _ in document["micro_steps_per_step"]]
    if steps != sorted(set(steps)):
        raise schemas.Invalid("'micro_steps_per_step' is not in ascending order of distinct steps")
