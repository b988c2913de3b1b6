"""Monitor CSV benchmark: trendconv vs msprobe data2db --format monitor 26.2.0, the floors, the cost per file and
a many-file run, in one run.

    python -m benchmarks.monitor [--quick] [--large [--large-repeat N]] [--many] [--workers 1,2] [--repeat 3]
                                 [--msprobe PATH]

Writes benchmarks/RESULTS-monitor.md. The msprobe scenarios are those of docs/monitor-format.md §14 (Megatron GPT,
all nine metrics, ops min,max,norm,zeros,nans,mean): 4 ranks x 50 steps x 8 layers, and a shape with about the same
bytes in ten times the files (one layer, one micro-batch, ten times the steps). Every number is a median of
--repeat rounds, each round running every measurement once (interleaved: each ratio compares runs of the same
stretch of time), and msprobe runs with the same --process_num as trendconv's --workers.

The cost per file is the slope of trendconv's wall time over the file count, on files of nine rows (the start-up of
the process drops out). `--many` adds a 100,000-file run (and one of a tenth of the files, for the slope of the peak
memory); `--quick` shrinks every scenario to a smoke test of the runner.
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

from benchmarks.report import machine_line, write_results
from benchmarks.run import (
    HERE,
    Measured,
    compile_package,
    machine,
    measure,
    merged,
    run_command,
    run_msprobe,
    sampled_rss,
    sqlite_floor,
    trendconv_command,
)
from datagen.monitor import ALL_NINE, generate
from trendconv import formats


@dataclass(frozen=True)
class MonitorScenario:
    name: str
    ranks: int
    steps: int
    layers: int
    micro_batches: int = 2
    metrics: tuple[str, ...] = ALL_NINE

    @property
    def key(self) -> str:
        metrics = "" if self.metrics == ALL_NINE else "_" + "-".join(self.metrics)
        return f"monitor_r{self.ranks}_s{self.steps}_l{self.layers}_m{self.micro_batches}{metrics}"


def tiny(name: str, files: int, metrics: tuple[str, ...] = ("grad_reduced",), layers: int = 1) -> MonitorScenario:
    """FILES files (rounded up to a multiple of 4 ranks x the metrics) of LAYERS layers and one micro-batch: nine
    rows per grad_reduced file of one layer."""
    return MonitorScenario(name, 4, -(-files // (4 * len(metrics))), layers, 1, metrics)


SCENARIOS = [
    MonitorScenario("4 ranks x 50 steps x 8 layers", 4, 50, 8),
    MonitorScenario("10x the files: 4 ranks x 500 steps x 1 layer, 1 micro-batch", 4, 500, 1, 1),
]
LARGE = MonitorScenario("8 ranks x 200 steps x 16 layers", 8, 200, 16)
QUICK = [
    MonitorScenario("quick: 2 ranks x 4 steps x 2 layers", 2, 4, 2),
    MonitorScenario("quick, 10x the files: 2 ranks x 40 steps x 1 layer, 1 micro-batch", 2, 40, 1, 1),
]
PER_FILE, PER_FILE_QUICK = (2_000, 10_000), (200, 1_000)
# (files, layers): ten times the files and ten times the rows, then the first count again with the rows of the second
# (ten layers a file), so that what the file count alone adds to the peak shows apart from what the rows add
# (files, layers): the last has the first's files and about the second's rows (1.49 M rows against 1.47 M)
MANY, MANY_QUICK = ((10_000, 1), (100_000, 1), (10_000, 14)), ((500, 1), (5_000, 1), (500, 14))
CACHE = HERE / ".data"


def data_for(scenario: MonitorScenario) -> Path:
    target = CACHE / scenario.key
    if not (target / "done").exists():
        shutil.rmtree(target, ignore_errors=True)
        generate(
            target / "data",
            ranks=scenario.ranks,
            steps=scenario.steps,
            layers=scenario.layers,
            micro_batches=scenario.micro_batches,
            metrics=scenario.metrics,
            procs=2,
        )
        (target / "done").write_text("ok\n")
    return target / "data"


def csv_files(data: Path) -> list[Path]:
    return sorted(data.glob("*-rank*-*/*.csv"))


def run_trendconv(data: Path, workers: int, scratch: Path, *, sample: bool = False) -> Measured:
    """One `trendconv run`; its peak memory only with SAMPLE (benchmarks.run.measure)."""
    out = scratch / f"tc_w{workers}"
    shutil.rmtree(out, ignore_errors=True)
    return run_command("monitor", data, out, workers, sample=sample)


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
    scratch = _scratch(data)
    files = csv_files(data)
    rounds = [_round(data, workers, args.msprobe, scratch) for _ in range(repeat)]
    ours = {count: merged(one["ours"][count] for one in rounds) for count in workers}
    sampled_rss(ours, lambda count: run_trendconv(data, count, scratch, sample=True))
    theirs = {count: merged(one["msprobe"][count] for one in rounds) for count in workers}
    sampled_rss(theirs, lambda count: _msprobe(args.msprobe, data, scratch, count, sample=True))
    print(f"done: {scenario.name}", file=sys.stderr)
    return {
        "scenario": scenario,
        "files": len(files),
        "bytes": sum(path.stat().st_size for path in files),
        "ours": ours,
        "msprobe": theirs,
        "repeat": repeat,
        "csv_floor": statistics.median(one["csv_floor"] for one in rounds),
        "sqlite_floor": statistics.median(one["sqlite_floor"] for one in rounds),
        "identical": len(set().union(*(measured.db_sha256 for measured in ours.values()))) == 1,
    }


def _round(data: Path, workers: list[int], msprobe: str, scratch: Path) -> dict:
    """One run of everything; the SQLite floor reads the rows of the first trendconv run."""
    measured = {"ours": {count: run_trendconv(data, count, scratch) for count in workers}}
    measured["msprobe"] = {count: _msprobe(msprobe, data, scratch, count) for count in workers}
    measured["csv_floor"] = csv_floor(data)
    measured["sqlite_floor"] = sqlite_floor(scratch / f"tc_w{workers[0]}" / formats.get("monitor").db_name, scratch)
    return measured


def _msprobe(msprobe: str, data: Path, scratch: Path, workers: int, *, sample: bool = False) -> Measured:
    """msprobe data2db with WORKERS processes: not sampled while timed, as trendconv's runs are not."""
    return run_msprobe(msprobe, data, scratch, "--format", "monitor", "--process_num", str(workers), sample=sample)


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
        "vs msprobe | CSV MB/s | ms per file | total / floor | peak RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for workers, measured in sorted(ours.items()):
        total, theirs = measured.median(), reference[workers]
        floor = max(result["csv_floor"] / workers, result["sqlite_floor"])
        stages = " | ".join(f"{measured.stage_median(stage):.2f}" for stage in ("scan", "parse", "load", "index"))
        lines.append(
            f"| {workers} | {theirs.median():.2f} ({max(theirs.rss_kib) / 1024:.0f}) | {total:.2f} | {stages} | "
            f"{theirs.median() / total:.2f}× | {result['bytes'] / 1e6 / total:.1f} | "
            f"{total / result['files'] * 1e3:.2f} | {total / floor:.2f} | {max(measured.rss_kib) / 1024:.0f} |"
        )
    return lines + [""]


def per_file(counts: tuple[int, int], workers: list[int], repeat: int) -> dict:
    """trendconv's wall seconds on two sets of nine-row files, in interleaved rounds: the slope over the file count
    is the cost per file, without the process start-up."""
    sets = [data_for(tiny(f"{count} files", count)) for count in counts]
    seconds: dict[int, list[list[float]]] = {count: [[], []] for count in workers}
    for _ in range(repeat):
        for count in workers:
            for index, data in enumerate(sets):
                seconds[count][index].append(run_trendconv(data, count, _scratch(data)).median())
    print("done: cost per file", file=sys.stderr)
    return {
        "files": [len(csv_files(data)) for data in sets],
        "seconds": {count: [statistics.median(runs) for runs in seconds[count]] for count in workers},
        "cpu": [statistics.median(cpu_seconds(data, repeat)) for data in sets],
        "repeat": repeat,
    }


def cpu_seconds(data: Path, repeat: int) -> list[float]:
    """CPU seconds of this process converting DATA with one worker in process: what other work on the machine
    adds to wall times hardly shows here."""
    import trendconv

    found = []
    for _ in range(repeat):
        out = _scratch(data) / "cpu"
        shutil.rmtree(out, ignore_errors=True)
        started = time.process_time()
        trendconv.convert(data, out, format="monitor", workers=1)
        found.append(time.process_time() - started)
    return found


def per_file_section(result: dict) -> list[str]:
    small, big = result["files"]
    lines = [
        "### Cost per file",
        "",
        f"Files of nine rows (grad_reduced, one layer): {small} and {big} files, median of {result['repeat']} "
        "interleaved rounds; the cost per file is the difference of the wall times over the difference of the file "
        "counts.",
        "",
        f"| workers | {small} files s | {big} files s | ms per file |",
        "|---|---|---|---|",
    ]
    for workers, (few, many) in sorted(result["seconds"].items()):
        lines.append(f"| {workers} | {few:.2f} | {many:.2f} | {(many - few) / (big - small) * 1e3:.3f} |")
    few, many = result["cpu"]
    lines += [
        "",
        f"CPU seconds of one worker in the benchmark's own process (`trendconv.convert(..., workers=1)`, median of "
        f"{result['repeat']}): {few:.2f} s for {small} files, {many:.2f} s for {big}: "
        f"**{(many - few) / (big - small) * 1e3:.3f} ms of CPU per file** (issue 24's target: at most 0.3).",
    ]
    return lines + [""]


def many_files(counts: tuple[tuple[int, int], ...], workers: int, repeat: int) -> list[dict]:
    """REPEAT interleaved rounds on COUNTS (files, layers) of all nine metrics (one micro-batch), each run timed and
    sampled: seconds and peak memory; then one `trendconv load` of each run's shards."""
    sets = [(data_for(tiny(f"{count} files", count, ALL_NINE, layers)), layers) for count, layers in counts]
    runs: list[list[Measured]] = [[] for _ in sets]
    for _ in range(repeat):
        for index, (data, _) in enumerate(sets):
            runs[index].append(run_trendconv(data, workers, _scratch(data), sample=True))
    found = []
    for (data, layers), measured in zip(sets, runs):
        files = csv_files(data)
        found.append(
            {
                "files": len(files),
                "layers": layers,
                "bytes": sum(path.stat().st_size for path in files),
                "measured": merged(measured),
                "load": load_alone(_scratch(data) / f"tc_w{workers}"),
                "rerun": rerun(data, workers, _scratch(data) / f"tc_w{workers}"),
            }
        )
        print(f"done: {len(files)} files", file=sys.stderr)
    return found


def load_alone(out: Path) -> tuple[float, int]:
    """`trendconv load` of the shards the run in OUT left (its WORK, OUT/.trendconv) into a fresh directory: the
    seconds and peak memory of a load that reads every footer from the manifest."""
    again = out.with_name(f"{out.name}_load")
    shutil.rmtree(again, ignore_errors=True)
    seconds, rss_kib, _ = measure([*trendconv_command(), "load", str(out / ".trendconv"), "--db", str(again)])
    return seconds, rss_kib


def rerun(data: Path, workers: int, out: Path) -> Measured:
    """`trendconv run` again over the output and WORK a run left in OUT: every file's shard reused (each chunk's
    footer read and checked, each file stat'ed), the database built again. Its time and peak memory."""
    measured = run_command("monitor", data, out, workers, sample=True)
    if measured.counts["files"] != len(csv_files(data)):
        raise RuntimeError(f"{out}: the re-run did not see every file")
    return measured


def many_section(results: list[dict], workers: int, repeat: int) -> list[str]:
    lines = [
        "### Many files",
        "",
        f"All nine metrics, one micro-batch, 4 ranks; at {workers} workers, medians of {repeat} interleaved rounds, "
        "each run's peak sampled (msprobe data2db not run: at its speed the larger set takes hours); `trendconv load` "
        "alone: one run. The last row has the first's files with about the second's rows (fourteen layers a file): "
        "the difference of the peaks from it to the second is the file count's. A re-run (one run): `trendconv run` "
        "again over the first run's output and WORK, every shard reused and the database built again.",
        "",
        "| files | layers | rows | CSV MB | trendconv s | scan | parse | load (after parse) | index | ms per file | "
        "CSV MB/s | peak RSS MiB | `trendconv load` alone s | its peak RSS MiB | re-run s | its peak RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        load_seconds, load_kib = result["load"]
        again = result["rerun"]
        measured, total = result["measured"], result["measured"].median()
        stages = " | ".join(f"{measured.stage_median(stage):.2f}" for stage in ("scan", "parse", "load", "index"))
        lines.append(
            f"| {result['files']} | {result['layers']} | {measured.counts['rows']} | {result['bytes'] / 1e6:.1f} | "
            f"{total:.2f} | {stages} | "
            f"{total / result['files'] * 1e3:.2f} | {result['bytes'] / 1e6 / total:.1f} | "
            f"{statistics.median(measured.rss_kib) / 1024:.0f} | {load_seconds:.2f} | {load_kib / 1024:.0f} | "
            f"{again.median():.2f} | {again.rss_kib[0] / 1024:.0f} |"
        )
    return lines + [""]


def _scratch(data: Path) -> Path:
    scratch = data.parent / "scratch"
    scratch.mkdir(exist_ok=True)
    return scratch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one small scenario (a smoke test of the runner)")
    parser.add_argument("--large", action="store_true", help="add the 8 ranks x 200 steps x 16 layers scenario")
    parser.add_argument("--many", action="store_true", help="add the 10,000 and 100,000-file runs")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--large-repeat", type=int, help="runs of the large scenario (default: --repeat)")
    parser.add_argument(
        "--msprobe", default=os.environ.get("TRENDCONV_MSPROBE", str(HERE.parent / ".venv-ref/bin/msprobe"))
    )
    parser.add_argument("--output", type=Path, default=HERE / "RESULTS-monitor.md")
    args = parser.parse_args()
    compile_package()
    scenarios = QUICK if args.quick else SCENARIOS + ([LARGE] if args.large else [])
    workers = [int(count) for count in args.workers.split(",")]
    repeats = {LARGE: args.large_repeat or args.repeat}
    results = [bench(scenario, workers, repeats.get(scenario, args.repeat), args) for scenario in scenarios]
    costs = per_file(PER_FILE_QUICK if args.quick else PER_FILE, workers, args.repeat)
    many = many_files(MANY_QUICK if args.quick else MANY, max(workers), args.repeat) if args.many or args.quick else []
    lines = [
        "# Monitor benchmark results",
        "",
        f"Produced by `python -m benchmarks.monitor {' '.join(sys.argv[1:])}`. Wall seconds of whole processes "
        "(trendconv's: the `trendconv run` command as a user types it, with the stage times its summary prints, "
        "to 10 ms); peak RSS of the whole process tree (sum of PSS, sampled every 100 ms in one more run of each "
        "command and worker count: the timed runs are not sampled, as a sample costs ~11 ms of CPU that a command "
        "using both cores would pay). Each command starts after a `sync`, so that no earlier command's writes are "
        "flushed during it.",
        machine_line(machine()),
        "`total / floor` is total / max(CSV floor / workers, SQLite floor); the SQLite floor goes through the "
        "connection trendconv writes with.",
        "",
    ]
    for result in results:
        lines += section(result)
    lines += per_file_section(costs)
    if many:
        lines += many_section(many, max(workers), args.repeat)
    write_results(args.output, "\n".join(lines))


if __name__ == "__main__":
    main()
