"""Benchmark runner: trendconv vs msprobe data2db 26.2.0 and against the physical floors, in one run.

    python -m benchmarks.run [--quick] [--large] [--shapes] [--workers 1,2,4,8] [--repeat 3] [--msprobe PATH]

--shapes adds the generator's other dump shapes (datagen.dump.SHAPES: wide, narrow, plain) at 32 steps x 4 ranks
(with --quick: at the quick size). Every run also times the start-up: `trendconv --version` and `trendconv run`
on the shipped sample.

Writes benchmarks/RESULTS.md and benchmarks/results.png. Every number is a median of --repeat rounds (each
round runs every measurement once), measured on this machine in this run; speed-ups are ratios of times from
the same run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import apsw
import orjson

from datagen.dump import SHAPES, generate
from trendconv import formats, native
from trendconv.jsonfile import _quote_bare_tokens
from trendconv.loading import connection, schema

HERE = Path(__file__).resolve().parent
CACHE = HERE / ".data"
SAMPLE = HERE.parent / "examples" / "sample_dump"


@dataclass(frozen=True)
class Scenario:
    name: str
    steps: int
    ranks: int
    layers: int
    shape: str = ""  # a name of datagen.dump.SHAPES; "" for the generator's default shape


SCENARIOS = [
    Scenario("1 step x 32 ranks", 1, 32, 16),
    Scenario("32 steps x 1 rank", 32, 1, 16),
    Scenario("32 steps x 4 ranks", 32, 4, 16),
]
LARGE = Scenario("64 steps x 8 ranks", 64, 8, 16)
QUICK = [Scenario("quick: 4 steps x 2 ranks", 4, 2, 4)]


def shape_scenarios(quick: bool) -> list[Scenario]:
    """The other dump shapes, at the size of the main scenario (32 x 4 x 16) or, QUICK, of the quick one."""
    steps, ranks, layers = (4, 2, 4) if quick else (32, 4, 16)
    size = f"{steps} steps x {ranks} ranks"
    return [Scenario(f"{shape}: {size}", steps, ranks, layers, shape) for shape in sorted(SHAPES)]


@dataclass
class Measured:
    seconds: list[float] = field(default_factory=list)
    stages: list[dict] = field(default_factory=list)
    rss_kib: list[int] = field(default_factory=list)
    db_sha256: set[str] = field(default_factory=set)
    counts: dict = field(default_factory=dict)

    def median(self) -> float:
        return statistics.median(self.seconds)

    def stage_median(self, stage: str) -> float:
        return statistics.median(run[stage] for run in self.stages)


def _pss_kib(pid: int) -> int:
    """Proportional set size: shared pages (pyarrow forked from the forkserver) counted once overall."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _children(pid: int) -> list[int]:
    found = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as children:
                found += [int(child) for child in children.read().split()]
    except OSError:
        pass
    return found


def tree_rss_kib(root: int) -> int:
    """Memory of a process and all its descendants (sum of PSS), from /proc."""
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += _pss_kib(pid)
        stack.extend(_children(pid))
    return total


def measure(command: list[str], env: dict | None = None, *, sample: bool = True) -> tuple[float, int, str]:
    """Wall time, peak memory of the whole process tree (sampled every 100 ms; 0 without SAMPLE), stdout. The file
    system's dirty pages are written out first (`sync`, not timed): the previous command's output (msprobe's
    database, a WORK's shards) would otherwise be flushed while this one runs, and be counted in its time.

    A sample reads every process's smaps_rollup, ~11 ms of CPU for `run -j2`'s five processes: ~6% of a core,
    which a command using both cores pays and one using one core does not. Timed runs of trendconv are therefore
    not sampled, and its peak memory comes from a run of its own (`sampled_rss`)."""
    os.sync()
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    peak = [0]

    def sample_tree() -> None:
        while process.poll() is None:
            peak[0] = max(peak[0], tree_rss_kib(process.pid))
            time.sleep(0.1)

    sampler = threading.Thread(target=sample_tree, daemon=True)
    if sample:
        sampler.start()
    stdout, stderr = process.communicate()
    elapsed = time.perf_counter() - started
    if sample:
        sampler.join()
    if process.returncode != 0:
        raise RuntimeError(f"{command[:4]} failed ({process.returncode}): {stderr[-2000:]}")
    return elapsed, peak[0], stdout


def data_for(scenario: Scenario, seed: int = 1) -> Path:
    shape = f"_{scenario.shape}" if scenario.shape else ""
    target = CACHE / f"s{scenario.steps}_r{scenario.ranks}_l{scenario.layers}_seed{seed}{shape}"
    if not (target / "done").exists():
        shutil.rmtree(target, ignore_errors=True)
        size = {"steps": scenario.steps, "ranks": scenario.ranks, "layers": scenario.layers}
        generate(target / "data", **size, seed=seed, **SHAPES.get(scenario.shape, {}))
        (target / "done").write_text("ok\n")
    return target / "data"


def input_files(data: Path) -> list[Path]:
    return sorted(data.glob("step*/*/dump.json")) + sorted(data.glob("step*/*/construct.json"))


def run_trendconv(data: Path, workers: int, scratch: Path, mode: str = "run", *, sample: bool = False) -> Measured:
    """One `mode` run: run (both stages, the command itself), parse (a fresh WORK) or load (from the shards of a
    run); its peak memory only with SAMPLE (see `measure`)."""
    out = scratch / f"tc_w{workers}" if mode != "load" else scratch / "tc_load"
    if mode != "load":
        shutil.rmtree(out, ignore_errors=True)
    if mode == "run":
        return run_command("dump", data, out, workers, sample=sample)
    source = scratch / f"tc_w{workers}" / ".trendconv" if mode == "load" else data
    return drive(mode, source, out, workers, None if mode == "parse" else formats.get("dump").db_name)


def sampled_rss(measured: dict[int, Measured], run) -> None:
    """The peak memory of each of MEASURED's worker counts (timed without sampling) from one more run of its own,
    `run(workers)`."""
    for workers, result in measured.items():
        result.rss_kib = run(workers).rss_kib


def trendconv_command() -> list[str]:
    script = Path(sys.executable).with_name("trendconv")  # the console script, as a user runs it
    return [str(script)] if script.exists() else [sys.executable, "-m", "trendconv"]


def run_command(input_format: str, data: Path, out: Path, workers: int, *, sample: bool = False) -> Measured:
    """`trendconv run` as a user types it, measured as a whole process: its wall time and (with SAMPLE) peak
    memory, the stage times (to 10 ms) and counts its summary prints, and the digest of the database it wrote to
    OUT."""
    command = [*trendconv_command(), "run", str(data), "--db", str(out), "--format", input_format, f"-j{workers}"]
    elapsed, rss, stdout = measure(command, sample=sample)
    stages, counts = summary_of(stdout)
    result = Measured(seconds=[elapsed], stages=[stages], rss_kib=[rss], counts=counts)
    result.db_sha256.add(hashlib.sha256((out / formats.get(input_format).db_name).read_bytes()).hexdigest())
    return result


_COUNTS = re.compile(
    r"^  (\d+) (?:file sets?|monitor CSV files?):.*\n  rows (\d+), targets (\d+), tags (\d+), tag links (\d+)$", re.M
)
_TIMES = re.compile(r"^  time: scan (\S+)s, parse (\S+)s, load (\S+)s \([^)]*\), index (\S+)s, total (\S+)s$", re.M)


def summary_of(stdout: str) -> tuple[dict, dict]:
    """The stage seconds and the counts of a `trendconv run` summary (one format)."""
    [counts] = _COUNTS.findall(stdout)
    [times] = _TIMES.findall(stdout)
    stages = dict(zip(("scan", "parse", "load", "index", "total"), map(float, times)))
    return stages, dict(zip(("files", "rows", "targets", "tags", "tag_links"), map(int, counts)))


def drive(mode: str, source: Path, out: Path, workers: int, db_name: str | None) -> Measured:
    """One `benchmarks.drive` process, measured; with DB_NAME, the digest of the database it wrote to OUT."""
    elapsed, rss, stdout = measure(
        [sys.executable, "-m", "benchmarks.drive", mode, str(source), str(out), str(workers)], sample=False
    )
    report = json.loads(stdout)
    counts = {key: report[key] for key in report if key not in ("seconds", "rss_main_kib")}
    result = Measured(seconds=[elapsed], stages=[report["seconds"]], rss_kib=[rss], counts=counts)
    if db_name:
        result.db_sha256.add(hashlib.sha256((out / db_name).read_bytes()).hexdigest())
    return result


def run_msprobe(msprobe: str, data: Path, scratch: Path, *options: str, sample: bool = True) -> Measured:
    """One msprobe data2db run of DATA into SCRATCH/msprobe; OPTIONS such as `--format dump` go last. Sampled
    (SAMPLE) as it is timed where it runs one process: the sampler then has the other core to itself."""
    out = scratch / "msprobe"
    shutil.rmtree(out, ignore_errors=True)
    command = [msprobe, "data2db", "--data", str(data), "--db", str(out), *options]
    elapsed, rss, _ = measure(command, env={**os.environ, "PYTHONHASHSEED": "0"}, sample=sample)
    return Measured(seconds=[elapsed], rss_kib=[rss])


def json_floor(data: Path) -> float:
    """orjson alone on the same bytes, one core (tokens quoted beforehand, as orjson needs)."""
    blobs = [_quote_bare_tokens(path.read_bytes()) for path in input_files(data)]
    started = time.perf_counter()
    for blob in blobs:
        orjson.loads(blob)
    return time.perf_counter() - started


def sqlite_floor(db: Path, scratch: Path) -> float:
    """A bare executemany of DB's trend rows into a trend_data table of the same columns, one transaction,
    through the connection (and so the SQLite) the loader writes with."""
    source = sqlite3.connect(db)
    rows = source.execute("SELECT * FROM trend_data").fetchall()
    stats = [row[1] for row in source.execute("PRAGMA table_info(trend_data)")][4:]
    source.close()
    target = scratch / "floor.db"
    target.unlink(missing_ok=True)
    conn = connection.Connection(target)
    conn.execute(schema.trend_data_ddl(stats))
    started = time.perf_counter()
    conn.executemany(schema.insert_trend(stats), rows)
    conn.commit()
    elapsed = time.perf_counter() - started
    conn.close()
    return elapsed


def startup(repeat: int, scratch: Path) -> dict[str, list[float]]:
    """Wall seconds of `trendconv --version` and of `trendconv run` on the shipped sample (fresh output each time,
    -j2 and the default workers), REPEAT interleaved rounds."""
    trendconv = trendconv_command()
    commands = {
        "trendconv --version": [*trendconv, "--version"],
        "trendconv run examples/sample_dump -j2": [*trendconv, "run", str(SAMPLE), "-q", "-j2", "--db"],
        "trendconv run examples/sample_dump": [*trendconv, "run", str(SAMPLE), "-q", "--db"],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    for round_ in range(repeat):
        for number, (name, command) in enumerate(commands.items()):
            out = [str(scratch / f"startup_{round_}_{number}")] if command[-1] == "--db" else []
            times[name].append(measure([*command, *out])[0])
    shutil.rmtree(scratch, ignore_errors=True)
    return times


def compile_package() -> None:
    """trendconv's modules compiled to bytecode, as `pip install` leaves an installed package: with the source tree
    installed in place (editable) and PYTHONDONTWRITEBYTECODE set, as it is on this machine, every measured command
    would compile some 70 modules from source first (0.06-0.08 s a command)."""
    import compileall

    compileall.compile_dir(HERE.parent / "trendconv", quiet=1)


def machine() -> dict:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(memory, 1),
        "python": platform.python_version(),
        "sqlite_writer": apsw.sqlite_lib_version(),
        "sqlite_system": sqlite3.sqlite_version,
        "native": native.describe(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one small scenario (a smoke test of the runner)")
    parser.add_argument("--large", action="store_true", help="add the 64 steps x 8 ranks scenario")
    parser.add_argument("--shapes", action="store_true", help="add the other dump shapes (wide, narrow, plain)")
    parser.add_argument("--workers", default="1,2,4,8")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--msprobe", default=os.environ.get("TRENDCONV_MSPROBE", str(HERE.parent / ".venv-ref/bin/msprobe"))
    )
    parser.add_argument("--output", type=Path, default=HERE)
    args = parser.parse_args()
    compile_package()
    scenarios = QUICK if args.quick else SCENARIOS + ([LARGE] if args.large else [])
    scenarios += shape_scenarios(args.quick) if args.shapes else []
    workers = [int(count) for count in args.workers.split(",")]
    results = [bench(scenario, workers, args) for scenario in scenarios]
    started = startup(args.repeat * 3, CACHE / "startup")
    from benchmarks.report import write_report

    command = "python -m benchmarks.run " + " ".join(sys.argv[1:])
    write_report(args.output, command.strip(), machine(), results, started)


def bench(scenario: Scenario, workers: list[int], args) -> dict:
    """Every measurement once per round, REPEAT rounds: this machine's speed drifts by tens of percent over
    minutes, so each ratio compares runs spread over the same stretch of time rather than one block per tool."""
    data = data_for(scenario)
    scratch = data.parent / "scratch"
    scratch.mkdir(exist_ok=True)
    files = input_files(data)
    rounds = [_round(data, workers, args.msprobe, scratch) for _ in range(args.repeat)]
    ours = {count: merged(one["ours"][count] for one in rounds) for count in workers}
    sampled_rss(ours, lambda count: run_trendconv(data, count, scratch, sample=True))
    load_only = merged(one["load_only"] for one in rounds)
    print(f"done: {scenario.name}", file=sys.stderr)
    return {
        "scenario": scenario,
        "files": len([path for path in files if path.name == "dump.json"]),
        "bytes": sum(path.stat().st_size for path in files),
        "largest_file": max(path.stat().st_size for path in files),
        "ours": ours,
        "parse_only": {count: merged(one["parse_only"][count] for one in rounds) for count in workers},
        "load_only": load_only,
        "msprobe": merged(one["msprobe"] for one in rounds),
        "json_floor": statistics.median(one["json_floor"] for one in rounds),
        "sqlite_floor": statistics.median(one["sqlite_floor"] for one in rounds),
        "identical": len(set().union(*(m.db_sha256 for m in [*ours.values(), load_only]))) == 1,
    }


def _round(data: Path, workers: list[int], msprobe: str, scratch: Path) -> dict:
    """One run of everything. Parse-only runs go first, as each replaces the WORK of the `run` with as many
    workers; the load-only run then reads the shards of the first `run`, and the SQLite floor its rows."""
    measured = {"parse_only": {count: run_trendconv(data, count, scratch, "parse") for count in workers}}
    measured["ours"] = {count: run_trendconv(data, count, scratch) for count in workers}
    measured["load_only"] = run_trendconv(data, workers[0], scratch, "load")
    measured["msprobe"] = run_msprobe(msprobe, data, scratch, "--format", "dump")
    measured["json_floor"] = json_floor(data)
    measured["sqlite_floor"] = sqlite_floor(scratch / f"tc_w{workers[0]}" / formats.get("dump").db_name, scratch)
    return measured


def merged(runs) -> Measured:
    """RUNS' measurements as one."""
    merged = Measured()
    for run in runs:
        merged.seconds += run.seconds
        merged.stages += run.stages
        merged.rss_kib += run.rss_kib
        merged.db_sha256 |= run.db_sha256
        merged.counts = run.counts
    return merged


if __name__ == "__main__":
    main()
