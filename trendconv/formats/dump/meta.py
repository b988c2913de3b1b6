"""What a dump shard's meta holds besides the common keys (trendconv.schemas), and what its values must agree on."""

from __future__ import annotations

from trendconv import schemas
from trendconv.formats.dump.metrics import METRICS

# A file set's micro-step count is its largest local micro step + 1 (negative where every micro step is, as
# msprobe has them), and local_micro_step is an int64 column.
MICRO_STEPS = (-(2**63) + 1, 2**63)
FIELDS = {
    "step": schemas.integer(*schemas.INT64),
    "rank": schemas.integer(*schemas.INT64),
    "item": schemas.file_name,
    "micro_steps": schemas.integer(*MICRO_STEPS),
}


def check(document: dict) -> None:
    unknown = sorted(set(document["rows_per_metric"]) - set(METRICS))
    if unknown:
        raise schemas.Invalid(f"'rows_per_metric' counts an unknown metric {unknown[0]!r}")
