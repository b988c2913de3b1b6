"""Split output and parallel loaders, measured as ratios in one run (medians of interleaved rounds).

    python -m benchmarks.split [--steps 32 --ranks 4 --layers 16] [--split-steps 4] [--repeat 3] [--output DIR]

- load throughput: `trendconv load WORK --split-steps N` with `--load-workers 2` against `--load-workers 1`
  (target: at least 1.7x on 2 cores), as rows a second: the slope between a WORK of the first half of the steps
  and the whole one (the seconds the second half adds), so that the command's and the pool's start-up, the same
  whatever the size, drop out; and the whole commands' ratio beside it;
- end to end: `trendconv run -j2 --split-steps N` against `run -j1 --split-steps N`, fresh WORK and output each
  run (target: at least 1.6x on 32 steps x 4 ranks x 16 layers);
- the unsplit `run -j1` and `run -j2` beside them, and every file's size, with peak memory of each process tree.

Writes RESULTS-split.md into --output (default: benchmarks/RESULTS-split.md).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks.report import machine_line, write_results
from benchmarks.run import CACHE, Scenario, compile_package, data_for, machine, measure

HERE = Path(__file__).resolve().parent


def trendconv(*args) -> list[str]:
    return [sys.executable, "-m", "trendconv", *map(str, args), "-q"]


def variants(data: Path, scratch: Path, split: int) -> dict[str, list[str]]:
    """Each measured command; every one starts from an empty output (and WORK) but `load`'s, which reads one WORK."""
    work, half = scratch / "work", scratch / "half"
    return {
        "load, 1 loader": trendconv("load", work, "--db", scratch / "l1", "--split-steps", split, "--load-workers", 1),
        "load, 2 loaders": trendconv("load", work, "--db", scratch / "l2", "--split-steps", split, "--load-workers", 2),
        "load half, 1 loader": trendconv(
            "load", half, "--db", scratch / "h1", "--split-steps", split, "--load-workers", 1
        ),
        "load half, 2 loaders": trendconv(
            "load", half, "--db", scratch / "h2", "--split-steps", split, "--load-workers", 2
        ),
        "run -j1, split": trendconv("run", data, "--db", scratch / "r1", "-j1", "--split-steps", split),
        "run -j2, split": trendconv("run", data, "--db", scratch / "r2", "-j2", "--split-steps", split),
        "run -j1, one file": trendconv("run", data, "--db", scratch / "u1", "-j1"),
        "run -j2, one file": trendconv("run", data, "--db", scratch / "u2", "-j2"),
    }


def bench(scenario: Scenario, split: int, repeat: int) -> dict:
    data = data_for(scenario)
    with tempfile.TemporaryDirectory(dir=CACHE) as scratch_dir:
        scratch = Path(scratch_dir)
        measure(trendconv("parse", data, "--work", scratch / "work", "-j2"))
        steps = sorted(int(path.name[len("step") :]) for path in data.glob("step*"))
        first_half = f"{steps[0]}-{steps[len(steps) // 2 - 1]}"
        measure(trendconv("parse", data, "--work", scratch / "half", "-j2", "--steps", first_half))
        commands = variants(data, scratch, split)
        seconds: dict[str, list[float]] = {name: [] for name in commands}
        peaks: dict[str, int] = dict.fromkeys(commands, 0)
        for round_ in range(repeat + 1):  # interleaved: each round runs every variant once
            for name, command in commands.items():
                shutil.rmtree(command[command.index("--db") + 1], ignore_errors=True)  # a fresh output (and WORK)
                if round_ < repeat:  # timed, not sampled (benchmarks.run.measure)
                    seconds[name].append(measure(command, sample=False)[0])
                else:  # the last round: the peak memory, sampled
                    peaks[name] = measure(command)[1]
            sizes = {path.name: path.stat().st_size for path in sorted((scratch / "r2").glob("*.trend.db"))}
    return {"scenario": scenario, "split": split, "seconds": seconds, "peaks": peaks, "sizes": sizes}


def medians(result: dict) -> dict[str, float]:
    return {name: statistics.median(values) for name, values in result["seconds"].items()}


def ratio(result: dict, slow: str, fast: str) -> float:
    return medians(result)[slow] / medians(result)[fast]


def throughput_ratio(result: dict) -> float:
    """Rows a second of 2 loaders against 1: both load the same rows more in the whole WORK than in its first
    half, so the ratio of the rates is that of the seconds those rows add (medians of each command)."""
    median = medians(result)
    added = {count: median[f"load, {count}"] - median[f"load half, {count}"] for count in ("1 loader", "2 loaders")}
    return added["1 loader"] / added["2 loaders"]


def report(result: dict, repeat: int) -> str:
    scenario = result["scenario"]
    median = medians(result)
    lines = [
        "# Split output and parallel loaders",
        "",
        f"`python -m benchmarks.split --steps {scenario.steps} --ranks {scenario.ranks} --layers {scenario.layers} "
        f"--split-steps {result['split']} --repeat {repeat}`; {machine_line(machine())}",
        "",
        f"Dump data of {scenario.steps} steps × {scenario.ranks} ranks × {scenario.layers} layers, "
        f"`--split-steps {result['split']}`; medians of {repeat} interleaved rounds, fresh output (and WORK, for "
        "`run`) each time, not sampled; peak memory of the whole process tree (PSS), sampled every 100 ms in one "
        "more round (a sample costs ~11 ms of CPU, which a command using both cores would pay). Each command starts "
        "after a `sync`.",
        "",
        "| command | median s | rounds s | peak MiB |",
        "|---|---:|---|---:|",
    ]
    for name, values in result["seconds"].items():
        rounds = ", ".join(f"{value:.2f}" for value in values)
        lines.append(f"| {name} | {median[name]:.2f} | {rounds} | {result['peaks'][name] / 1024:.0f} |")
    lines += [
        "",
        f"- load throughput (rows a second: the seconds the second half of the steps adds to a load of the first "
        f"half), 2 loader processes against 1: **{throughput_ratio(result):.2f}×** (target ≥ 1.7×)",
        f"- whole `load` commands, 2 loader processes against 1 (each command's start-up and the pool's within): "
        f"{ratio(result, 'load, 1 loader', 'load, 2 loaders'):.2f}×",
        f"- `run -j1` / `run -j2`, split output: **{ratio(result, 'run -j1, split', 'run -j2, split'):.2f}×** "
        "(target ≥ 1.6×)",
        f"- `run -j1` / `run -j2`, one file: {ratio(result, 'run -j1, one file', 'run -j2, one file'):.2f}×",
        "",
        "Files of the split output:",
        "",
        "| file | bytes |",
        "|---|---:|",
        *(f"| {name} | {size} |" for name, size in result["sizes"].items()),
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--split-steps", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--output", type=Path, default=HERE)
    args = parser.parse_args()
    compile_package()
    scenario = Scenario(f"{args.steps}x{args.ranks}x{args.layers}", args.steps, args.ranks, args.layers)
    result = bench(scenario, args.split_steps, args.repeat)
    text = report(result, args.repeat)
    args.output.mkdir(parents=True, exist_ok=True)
    write_results(args.output / "RESULTS-split.md", text)
    print(text)


if __name__ == "__main__":
    main()
