"""The parse stage: each unit of a format's data into one shard, in parallel workers, reusing what is unchanged.

`runner` runs the stage, `tasks` is what a worker does, `reuse` decides which shards are still good, `manifest`
records a finished parse.
"""

from trendconv.parsing.manifest import manifest_shards, start_parse, write_manifest
from trendconv.parsing.reuse import CORRUPT, MISSING, OK, STALE, status_of
from trendconv.parsing.runner import plan, run_parse
from trendconv.parsing.tasks import ParseTask, parse_chunk, parse_task

__all__ = [
    "CORRUPT",
    "MISSING",
    "OK",
    "STALE",
    "ParseTask",
    "parse_chunk",
    "parse_task",
    "plan",
    "manifest_shards",
    "run_parse",
    "start_parse",
    "status_of",
    "write_manifest",
]
