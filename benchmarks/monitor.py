"""Monitor CSV benchmark: trendconv vs msprobe data2db --format monitor 26.2.0, and the floors, in one run.

    python -m benchmarks.monitor [--quick] [--large [--large-repeat N]] [--workers 1,2] [--repeat 3] [--msprobe PATH]

Writes benchmarks/RESULTS-monitor.md. The scenarios are those of docs/monitor-format.md §14 (Megatron GPT, two
micro-batches, all nine metrics, ops min,max,norm,zeros,nans,mean); every number is a median of --repeat runs
measured on this machine in this run, and msprobe runs with the same --process_num as trendconv's --workers.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow.csv as pacsv

from benchmarks.report import machine_line
from benchmarks.run import HERE, Measured, drive, machine, merged, run_msprobe, sqlite_floor
from datagen.monitor import generate
from trendconv import formats


@dataclass(frozen=True)
class MonitorScenario:
    name: str
    ranks: int
    steps: int
    layers: int


SCENARIOS = [MonitorScenario("4 ranks x 50 steps x 8 layers", 4, 50, 8)]
LARGE = MonitorScenario("8 ranks x 200 steps x 16 layers", 8, 200, 16)
QUICK = [MonitorScenario("quick: 2 ranks x 4 steps x 2 layers", 2, 4, 2)]
CACHE = HERE / ".data"


def data_for(scenario: MonitorScenario) -> Path:
    target = CACHE / f"monitor_r{scenario.ranks}_s{scenario.steps}_l{scenario.layers}"
    if not (target / "done").exists():
        shutil.rmtree(target, ignore_errors=True)
        generate(target / "data", ranks=scenario.ranks, steps=scenario.steps, layers=scenario.layers, procs=2)
        (target / "done").write_text("ok\n")
    return target / "data"


def csv_files(data: Path) -> list[Path]:
    return sorted(data.glob("*-rank*-*/*.csv"))


def run_trendconv(data: Path, workers: int, scratch: Path) -> Measured:
    out = scratch / f"tc_w{workers}"
    shutil.rmtree(out, ignore_errors=True)
    return drive("monitor", data, out, workers, formats.get("monitor").db_name)


def csv_floor(data: Path) -> float:
    """pyarrow's CSV reader alone on the same files, one core, every column as it infers it."""
    blobs = [path.read_bytes() for path in csv_files(data)]
    options = pacsv.ReadOptions(use_threads=False)
    started = time.perf_counter()
    for blob in blobs:
        pacsv.read_csv(io.BytesIO(blob), read_options=options)
    return time.perf_counter() - started


def bench(scenario: MonitorScenario, workers: list[int], repeat: int, args) -> dict:
    """REPEAT rounds of every measurement, as benchmarks.run does: each ratio compares runs of the same stretch
    of time on this drifting machine."""
    data = data_for(scenario)
    scratch = data.parent / "scratch"
    scratch.mkdir(exist_ok=True)
    files = csv_files(data)
    rounds = [_round(data, workers, args.msprobe, scratch) for _ in range(repeat)]
    ours = {count: merged(one["ours"][count] for one in rounds) for count in workers}
    print(f"done: {scenario.name}", file=sys.stderr)
    return {
        "scenario": scenario,
        "files": len(files),
        "bytes": sum(path.stat().st_size for path in files),
        "ours": ours,
        "msprobe": {count: merged(one["msprobe"][count] for one in rounds) for count in workers},
        "repeat": repeat,
        "csv_floor": statistics.median(one["csv_floor"] for one in rounds),
        "sqlite_floor": statistics.median(one["sqlite_floor"] for one in rounds),
        "identical": len(set().union(*(measured.db_sha256 for measured in ours.values()))) == 1,
    }


def _round(data: Path, workers: list[int], msprobe: str, scratch: Path) -> dict:
    """One run of everything; the SQLite floor reads the rows of the first trendconv run."""
    measured = {"ours": {count: run_trendconv(data, count, scratch) for count in workers}}
    measured["msprobe"] = {
        count: run_msprobe(msprobe, data, scratch, "--format", "monitor", "--process_num", str(count))
        for count in workers
    }
    measured["csv_floor"] = csv_floor(data)
    measured["sqlite_floor"] = sqlite_floor(scratch / f"tc_w{workers[0]}" / formats.get("monitor").db_name, scratch)
    return measured


def section(result: dict) -> list[str]:
    scenario, ours, reference = result["scenario"], result["ours"], result["msprobe"]
    counts = ours[min(ours)].counts
    lines = [
        f"### {scenario.name}",
        "",
        f"{'Median of ' + str(result['repeat']) + ' runs' if result['repeat'] > 1 else 'One run'} per cell.",
        f"{result['files']} CSV files, {result['bytes'] / 1e6:.1f} MB; rows {counts['rows']}, targets "
        f"{counts['targets']}, tags {counts['tags']}, tag links {counts['tag_links']}. CSV floor (pyarrow's reader, "
        f"one core) {result['csv_floor']:.2f} s; SQLite floor (bare executemany) {result['sqlite_floor']:.2f} s. "
        f"Identical DB for every worker count: **{'yes' if result['identical'] else 'NO'}**.",
        "",
        "| workers | msprobe s (peak RSS MiB) | trendconv s | scan | parse | load (after parse) | index | "
        "vs msprobe | total / floor | peak RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for workers, measured in sorted(ours.items()):
        total, theirs = measured.median(), reference[workers]
        floor = max(result["csv_floor"] / workers, result["sqlite_floor"])
        stages = " | ".join(f"{measured.stage_median(stage):.2f}" for stage in ("scan", "parse", "load", "index"))
        lines.append(
            f"| {workers} | {theirs.median():.2f} ({max(theirs.rss_kib) / 1024:.0f}) | {total:.2f} | {stages} | "
            f"{theirs.median() / total:.2f}× | {total / floor:.2f} | {max(measured.rss_kib) / 1024:.0f} |"
        )
    return lines + [""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one small scenario (a smoke test of the runner)")
    parser.add_argument("--large", action="store_true", help="add the 8 ranks x 200 steps x 16 layers scenario")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--large-repeat", type=int, help="runs of the large scenario (default: --repeat)")
    parser.add_argument(
        "--msprobe", default=os.environ.get("TRENDCONV_MSPROBE", str(HERE.parent / ".venv-ref/bin/msprobe"))
    )
    parser.add_argument("--output", type=Path, default=HERE / "RESULTS-monitor.md")
    args = parser.parse_args()
    scenarios = QUICK if args.quick else SCENARIOS + ([LARGE] if args.large else [])
    workers = [int(count) for count in args.workers.split(",")]
    repeats = {LARGE: args.large_repeat or args.repeat}
    results = [bench(scenario, workers, repeats.get(scenario, args.repeat), args) for scenario in scenarios]
    lines = [
        "# Monitor benchmark results",
        "",
        f"Produced by `python -m benchmarks.monitor {' '.join(sys.argv[1:])}`. Wall seconds of whole processes; "
        "peak RSS of the whole process tree (sum of PSS, sampled every 100 ms).",
        machine_line(machine()),
        "`total / floor` is total / max(CSV floor / workers, SQLite floor); the SQLite floor goes through the "
        "connection trendconv writes with.",
        "",
    ]
    for result in results:
        lines += section(result)
    args.output.write_text("\n".join(lines))


if __name__ == "__main__":
    main()
