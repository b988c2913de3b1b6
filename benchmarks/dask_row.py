"""The Dask row of the benchmarks: `run` with a local Dask cluster next to the local process pool.

    python -m benchmarks.dask_row [--workers 2] [--repeat 3]

Uses the cached 32 steps x 1 rank data of benchmarks.run and appends a section to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import statistics
import sys

from benchmarks.run import HERE, SCENARIOS, data_for, measure
from trendconv import formats


def timed(mode: str, data, out, workers: int, repeat: int) -> tuple[float, int, set[str]]:
    times, peaks, digests = [], [], set()
    for _ in range(repeat):
        shutil.rmtree(out, ignore_errors=True)
        elapsed, peak, stdout = measure(
            [sys.executable, "-m", "benchmarks.drive", mode, str(data), str(out), str(workers)]
        )
        json.loads(stdout)
        times.append(elapsed)
        peaks.append(peak)
        digests.add(hashlib.sha256((out / formats.get("dump").db_name).read_bytes()).hexdigest())
    return statistics.median(times), max(peaks), digests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    scenario = SCENARIOS[1]
    data = data_for(scenario)
    scratch = data.parent / "scratch"
    local = timed("run", data, scratch / "dask_local", args.workers, args.repeat)
    dask = timed("dask", data, scratch / "dask_cluster", args.workers, args.repeat)
    lines = [
        "",
        f"## Dask executor ({scenario.name}, {scenario.layers} layers, {args.workers} workers)",
        "",
        f"Produced by `python -m benchmarks.dask_row --workers {args.workers} --repeat {args.repeat}`; medians, wall "
        "seconds of whole processes (the Dask run includes starting its LocalCluster).",
        "",
        "| executor | total s | peak PSS MiB |",
        "|---|---|---|",
        f"| local process pool | {local[0]:.2f} | {local[1] / 1024:.0f} |",
        f"| Dask LocalCluster (processes) | {dask[0]:.2f} | {dask[1] / 1024:.0f} |",
        "",
        f"Identical database: **{'yes' if len(local[2] | dask[2]) == 1 else 'NO'}**.",
        "",
    ]
    with open(HERE / "RESULTS.md", "a") as results:
        results.write("\n".join(lines))


if __name__ == "__main__":
    main()
