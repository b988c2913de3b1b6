"""Scale benchmark: many small file sets (issue 21), measured at three sizes to show what grows with the count.

    python -m benchmarks.scale [--quick] [--sizes 10000,30000,100000] [--ranks 1000] [--workers 2] [--keep]

Generates STEPS x RANKS tiny file sets (`datagen.dump --tiny`, one micro batch) once for the largest size and
hard-links the first steps of it for the smaller ones, then per size: `run` (scan, parse, load; peak RSS of the
main process and of every worker), a re-run that reuses every shard (the per-file-set overhead of scan, reuse
check and load alone), `trendconv inspect --json` (time, peak RSS) and a split run of the same data reusing the
same shards (`--split-steps`, built by `--load-workers` loader processes: time, the files' sizes, the peak RSS of
the main process and of each loader). Between two sizes, what grows per file set (time and memory) is the slope.
Writes benchmarks/RESULTS-scale.md. The scratch directory is deleted at the end unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from benchmarks.report import write_results
from benchmarks.run import compile_package, trendconv_command
from datagen.dump import generate

HERE = Path(__file__).resolve().parent
SCRATCH = Path(os.environ.get("TMPDIR", "/tmp")) / "trendconv-scale"
SPLIT_STEPS = 10  # step directories per file of the split output
# The split run, in a fresh process like benchmarks.drive: its own peak RSS and stage times as JSON.
SPLIT_DRIVER = """
import json, resource, sys
from pathlib import Path
from trendconv.executors import prestart
data, out, work, workers, steps = sys.argv[1:]
prestart(int(workers), Path(data))
import trendconv
[summary] = trendconv.convert(Path(data), Path(out), work=Path(work), workers=int(workers),
                              split_steps=int(steps), load_workers=int(workers))
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": summary.seconds, "rss_main_kib": rss, "rows": summary.load.rows}))
"""


def _hwm_kib(pid: int) -> int:
    """The process's peak resident set size so far (VmHWM), 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _role(pid: int, parent: int, root: int) -> str:
    """What a process of the tree is: multiprocessing's resource tracker, the pool's forkserver (a child of the
    main process) or a worker (forked by the forkserver)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            words = cmdline.read().decode(errors="replace")
    except OSError:
        return "gone"
    if "resource_tracker" in words:
        return "resource tracker"
    return "forkserver" if "forkserver" in words and parent == root else "worker"


def _descendants(pid: int) -> list[tuple[int, int]]:
    """(pid, parent pid) of every descendant of PID."""
    found, stack = [], [pid]
    while stack:
        parent = stack.pop()
        try:
            for task in os.listdir(f"/proc/{parent}/task"):
                with open(f"/proc/{parent}/task/{task}/children") as children:
                    kids = [int(child) for child in children.read().split()]
                    found += [(kid, parent) for kid in kids]
                    stack += kids
        except OSError:
            continue
    return found


def measure(command: list[str]) -> dict:
    """Wall time, stdout, the peak RSS of the main process (from wait4, exact) and of each descendant (VmHWM
    sampled every 50 ms: the workers live as long as the parse, so the last sample is their peak)."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peaks: dict[int, int] = {}
    roles: dict[int, str] = {}
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            for pid, parent in _descendants(process.pid):
                peaks[pid] = max(peaks.get(pid, 0), _hwm_kib(pid))
                roles.setdefault(pid, _role(pid, parent, process.pid))
            stop.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stdout, stderr = process.stdout.read(), process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - started
    stop.set()
    sampler.join()
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:4])} failed ({process.returncode}): {stderr[-2000:]}")
    children = sorted(((roles[pid], kib) for pid, kib in peaks.items() if kib), key=lambda item: -item[1])
    return {"seconds": elapsed, "stdout": stdout, "tree_max_kib": usage.ru_maxrss, "children_kib": children}


def make_data(root: Path, steps: int, ranks: int) -> tuple[Path, float]:
    """All STEPS x RANKS file sets, generated once (seconds it took; 0 when reused)."""
    data = root / f"data_s{steps}_r{ranks}"
    if (root / f"{data.name}.done").exists():
        return data, 0.0
    shutil.rmtree(data, ignore_errors=True)
    started = time.perf_counter()
    generate(data, steps=steps, ranks=ranks, layers=1, micro_batches=1, tiny=True)
    (root / f"{data.name}.done").write_text("ok\n")
    return data, time.perf_counter() - started


def linked_subset(full: Path, target: Path, steps: int) -> Path:
    """The first STEPS step directories of FULL, as hard links (no extra disk, same bytes)."""
    shutil.rmtree(target, ignore_errors=True)
    for step in range(steps):
        shutil.copytree(full / f"step{step}", target / f"step{step}", copy_function=os.link)
    return target


def data_bytes(data: Path) -> int:
    return sum(entry.stat().st_size for entry in data.rglob("*.json"))


def bench_size(root: Path, full: Path, steps: int, ranks: int, workers: int) -> dict:
    count = steps * ranks
    data = linked_subset(full, root / f"data_{count}", steps)
    out = root / f"out_{count}"
    shutil.rmtree(out, ignore_errors=True)
    drive = [sys.executable, "-m", "benchmarks.drive", "run", str(data), str(out), str(workers)]
    first = measure(drive)
    again = measure(drive)  # every shard reused: scan, reuse check, load
    inspect = measure([*trendconv_command(), "inspect", str(out / ".trendconv"), "--json"])
    report = json.loads(first["stdout"])
    result = {
        "file_sets": count,
        "steps": steps,
        "ranks": ranks,
        "data_bytes": data_bytes(data),
        "run": _run_numbers(first),
        "rerun": _run_numbers(again),
        "rows": report["rows"],
        "db_bytes": sum(path.stat().st_size for path in out.glob("*.trend.db")),
        "work_bytes": sum(path.stat().st_size for path in (out / ".trendconv").rglob("*") if path.is_file()),
        "inspect": {"seconds": inspect["seconds"], "peak_kib": inspect["tree_max_kib"]},
        "split": split_run(data, out, workers),
    }
    shutil.rmtree(data)
    shutil.rmtree(out)
    return result


def _run_numbers(measured: dict) -> dict:
    report = json.loads(measured["stdout"])
    return {
        "wall": measured["seconds"],
        "stages": report["seconds"],
        "main_peak_kib": report["rss_main_kib"],
        "worker_peaks_kib": measured["children_kib"],
    }


def split_run(data: Path, out: Path, workers: int) -> dict:
    """A run of the same data into files of SPLIT_STEPS step directories each, reusing the shards of OUT's WORK,
    the files built by WORKERS loader processes."""
    split = out.parent / f"{out.name}_split"
    command = [sys.executable, "-c", SPLIT_DRIVER, str(data), str(split), str(out / ".trendconv"), str(workers)]
    measured = measure([*command, str(SPLIT_STEPS)])
    report = json.loads(measured["stdout"])
    sizes = {path.name: path.stat().st_size for path in sorted(split.glob("*.trend.db"))}
    shutil.rmtree(split)
    return {
        "wall": measured["seconds"],
        "stages": report["seconds"],
        "rows": report["rows"],
        "files": sizes,
        "main_peak_kib": report["rss_main_kib"],
        "worker_peaks_kib": measured["children_kib"],
    }


def machine() -> dict:
    return {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "system": f"{platform.system()} {platform.release()}",
        "trendconv": subprocess.run([*trendconv_command(), "--version"], capture_output=True, text=True).stdout.strip(),
    }


def mib(kib: int) -> str:
    return f"{kib / 1024:.0f}"


def markdown(results: list[dict], generated: float, args) -> str:
    lines = [
        "# Scale: many small file sets",
        "",
        f"`python -m benchmarks.scale{' --quick' if args.quick else ''}` on {json.dumps(machine())}, "
        f"`-j{args.workers}`, one run per size. The machine (2 cores) was shared with other sessions working at the "
        "same time, so the times are noisy; memory is not affected by that.",
        "",
        f"Input: `datagen.dump --tiny` file sets ({args.ranks} ranks per step, one micro batch: 12 rows per file "
        f"set, about 4 kB of JSON); generating the largest size took {generated:.0f} s (0 = reused).",
        "",
        "| file sets | scan s | parse s | load s | total s | ms per file set | re-run s (all reused) "
        "| re-run ms per file set | main peak RSS MiB | other processes' peak RSS MiB | inspect s "
        "| inspect peak RSS MiB | DB MiB | WORK MiB |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        run, rerun = r["run"], r["rerun"]
        workers = ", ".join(f"{role} {mib(kib)}" for role, kib in run["worker_peaks_kib"]) or "-"
        lines.append(
            f"| {r['file_sets']:,} | {run['stages'].get('scan', 0):.2f} | {run['stages'].get('parse', 0):.1f} "
            f"| {run['stages'].get('load', 0):.1f} | {run['wall']:.1f} | {1000 * run['wall'] / r['file_sets']:.2f} "
            f"| {rerun['wall']:.1f} | {1000 * rerun['wall'] / r['file_sets']:.2f} | {mib(run['main_peak_kib'])} "
            f"| {workers} | {r['inspect']['seconds']:.2f} | {mib(r['inspect']['peak_kib'])} "
            f"| {r['db_bytes'] / 2**20:.1f} | {r['work_bytes'] / 2**20:.0f} |"
        )
    lines += [
        "",
        f"Split output (`--split-steps {SPLIT_STEPS} --load-workers {args.workers}`, the same data, every shard "
        "reused):",
        "",
        "| file sets | total s | load s | files | smallest MiB | largest MiB | all files MiB | main peak RSS MiB "
        "| other processes' peak RSS MiB |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        split = r["split"]
        sizes = list(split["files"].values())
        others = ", ".join(f"{role} {mib(kib)}" for role, kib in split["worker_peaks_kib"]) or "-"
        lines.append(
            f"| {r['file_sets']:,} | {split['wall']:.1f} | {split['stages'].get('load', 0):.1f} | {len(sizes)} "
            f"| {min(sizes) / 2**20:.2f} | {max(sizes) / 2**20:.2f} | {sum(sizes) / 2**20:.1f} "
            f"| {mib(split['main_peak_kib'])} | {others} |"
        )
    lines += ["", "Growth per file set between two sizes (the slope: what each further file set costs):", ""]
    lines += growth(results)
    lines += ["", "Raw numbers:", "", "```json", json.dumps(results, indent=1), "```", ""]
    return "\n".join(lines)


def growth(results: list[dict]) -> list[str]:
    """Per further file set between consecutive sizes: run and re-run time, and the peak RSS of run's main
    process, inspect and the split run's main process."""
    lines = [
        "| from - to | run ms | re-run ms | run main RSS bytes | inspect RSS bytes | split main RSS bytes |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for low, high in zip(results, results[1:]):
        cells = [_slope(low, high, path, scale) for path, scale in _SLOPES]
        lines.append(f"| {low['file_sets']:,} - {high['file_sets']:,} | " + " | ".join(cells) + " |")
    return lines


_SLOPES = [
    (("run", "wall"), 1000),
    (("rerun", "wall"), 1000),
    (("run", "main_peak_kib"), 1024),
    (("inspect", "peak_kib"), 1024),
    (("split", "main_peak_kib"), 1024),
]


def _slope(low: dict, high: dict, path: tuple[str, str], scale: int) -> str:
    """(HIGH - LOW) / the file sets between them, times SCALE (ms of seconds, bytes of KiB)."""
    group, key = path
    value = scale * (high[group][key] - low[group][key]) / (high["file_sets"] - low["file_sets"])
    return f"{value:.0f}" if scale == 1024 else f"{value:.2f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="sizes 500, 1500, 5000 (100 ranks per step)")
    parser.add_argument("--sizes", default="10000,30000,100000", help="file-set counts, multiples of --ranks")
    parser.add_argument("--ranks", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--scratch", type=Path, default=SCRATCH)
    parser.add_argument("--keep", action="store_true", help="keep the generated data in --scratch")
    parser.add_argument("--out", type=Path, help="default: benchmarks/RESULTS-scale.md; with --quick, stdout")
    args = parser.parse_args(argv)
    compile_package()
    if args.quick:
        args.sizes, args.ranks = "500,1500,5000", 100
    counts = sorted(int(size) for size in args.sizes.split(","))
    args.scratch.mkdir(parents=True, exist_ok=True)
    full, generated = make_data(args.scratch, counts[-1] // args.ranks, args.ranks)
    results = []
    for count in counts:
        results.append(bench_size(args.scratch, full, count // args.ranks, args.ranks, args.workers))
        print(json.dumps(results[-1]), flush=True)
    text = markdown(results, generated, args)
    if args.out is None and args.quick:
        print(text)
    else:
        write_results(args.out or HERE / "RESULTS-scale.md", text)
    if not args.keep:
        shutil.rmtree(args.scratch)


if __name__ == "__main__":
    main()
