"""A dump shard: the rows of one (step, rank) file set, and what its meta says of them."""

from __future__ import annotations

import pyarrow as pa

from trendconv.formats.dump.metrics import STATS
from trendconv.formats.dump.parse import parse_file_set
from trendconv.formats.dump.scan import FileSet
from trendconv.options import ParseOptions
from trendconv.shards import DICT_STRING

SCHEMA = pa.schema(
    [
        ("step", pa.int64()),
        ("rank", pa.int64()),
        ("local_micro_step", pa.int64()),
        ("metric", DICT_STRING),
        ("target_name", DICT_STRING),
        ("vpp_stage", pa.int32()),
        ("micro_step", pa.int64()),
        *[(name, pa.float64()) for name in STATS],
        ("key", DICT_STRING),
    ]
)


def shard_of(unit: FileSet, options: ParseOptions) -> tuple[pa.Table, dict]:
    """The shard rows of a file set, and its part of the shard's meta."""
    rows = parse_file_set(unit, options)
    table = build_table(rows.columns(), {"step": unit.step, "rank": unit.rank, "vpp_stage": 0}, len(rows))
    meta = {
        **unit.identity,
        "micro_steps": rows.micro_steps,
        "rows": len(rows),
        "rows_per_metric": dict(sorted(rows.metric_counts().items())),
        "skipped": dict(sorted(rows.skipped.items())),
    }
    return table, meta


def build_table(columns: dict[str, pa.Array], constants: dict[str, int | str], rows: int) -> pa.Table:
    """The shard table from per-row Arrow columns and the values shared by the whole shard."""
    arrays = []
    for field in SCHEMA:
        if field.name in constants:
            arrays.append(pa.repeat(pa.scalar(constants[field.name], field.type), rows))
        else:
            arrays.append(columns[field.name].cast(field.type))
    return pa.Table.from_arrays(arrays, schema=SCHEMA)
