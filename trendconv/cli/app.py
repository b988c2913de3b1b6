"""The `trendconv` command line: a thin typer layer over the library (trendconv.library); trendconv.cli.report
shows its summaries and words its errors with the command line's flags.

The library (pyarrow, the loader) is imported inside the commands, not here: `parse` and `run` first start
the worker pool's forkserver, which then imports the parser on another core while this process imports the
rest. That brings the first parsed shard half a second sooner, and `--help` needs neither.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from typer.exceptions import TyperException

from trendconv import __version__, formats, interrupt
from trendconv.cli import report
from trendconv.errors import ExitStatus, InternalError, TrendconvError, UsageError, internal_error, require_utf8
from trendconv.executors import MAX_WORKERS, as_command, is_command, prestart

app = typer.Typer(
    name="trendconv",
    help="Convert msprobe dump statistics into Trend Analyzer trend databases (*.trend.db), fast.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)

Workers = Annotated[
    int | None,
    typer.Option(
        "--workers",
        "-j",
        min=1,
        max=MAX_WORKERS,
        help="Parallel parse workers (1..128). Default: CPU count, capped at the number of files.",
    ),
]
MicroStep = Annotated[
    bool,
    typer.Option(
        "--micro-step/--no-micro-step",
        help="Put each micro step on its own step slot, as msprobe does by default (dump data: root calls from "
        "construct.json; monitor data: the micro_step column, one target for all micro-batches). --no-micro-step "
        "keeps the original step numbers (dump: does not read construct.json; monitor: one target per micro-batch).",
    ),
]
Mapping = Annotated[
    Path | None,
    typer.Option(
        "--mapping",
        help='JSON object of name replacements applied to dump keys and monitor names, e.g. {".TE": "."}.',
    ),
]
ExecutorKind = Annotated[
    str,
    typer.Option(
        "--executor",
        help="Where parse tasks run: local (process pool) or dask (a Dask cluster; pip install 'trendconv[dask]').",
    ),
]
Scheduler = Annotated[
    str | None,
    typer.Option(
        "--scheduler",
        help="Dask scheduler address (tcp://host:8786). Without it, --executor dask starts a local cluster.",
    ),
]
SplitSteps = Annotated[
    int | None,
    typer.Option(
        "--split-steps",
        min=1,
        metavar="N",
        help="One database per N step directories (monitor data: per N step ranges of its CSV files), named by "
        "their steps: dump_data.steps-000100-000199.trend.db.",
    ),
]
MaxDbSize = Annotated[
    str | None,
    typer.Option(
        "--max-db-size",
        metavar="SIZE",
        help="Split so that no database exceeds SIZE (bytes, or like 500M, 2G; KB/MB/GB are powers of 1000). "
        "Default: 5G, the largest file the Trend Analyzer opens. Small runs stay one file.",
    ),
]
LoadWorkers = Annotated[
    int | None,
    typer.Option(
        "--load-workers",
        min=1,
        max=MAX_WORKERS,
        metavar="N",
        help="Processes building the databases of a split output at the same time. Default: the worker count.",
    ),
]
RunName = Annotated[
    str | None,
    typer.Option(
        "--name",
        metavar="NAME",
        help="Put NAME before every output file name (NAME.dump_data.trend.db), so that several runs share one "
        "TensorBoard log directory and the Trend Analyzer's database switcher lists them all.",
    ),
]


def _choice(value: str | None, choices: list[str]) -> str | None:
    if value is not None and value not in choices:
        listed = ", ".join(repr(choice) for choice in choices)
        raise typer.BadParameter(f"{value!r} is not one of {listed}", param_hint="'--format'")
    return value


def _spec(value: str | None, flag: str) -> str | None:
    """--steps/--ranks checked here, so that a bad SPEC is a usage error that names the flag."""
    from trendconv.selection import SpecError, parse_spec

    if value is not None:
        try:
            parse_spec(value)
        except SpecError as exc:
            raise typer.BadParameter(str(exc), param_hint=f"'{flag}'") from None
    return value


Steps = Annotated[
    str | None,
    typer.Option(
        "--steps",
        metavar="SPEC",
        callback=lambda value: _spec(value, "--steps"),
        help="Convert only these steps: numbers and inclusive ranges, like 0-9,12 (monitor data: the files whose "
        "<a>-<b> steps are all selected).",
    ),
]
Ranks = Annotated[
    str | None,
    typer.Option(
        "--ranks",
        metavar="SPEC",
        callback=lambda value: _spec(value, "--ranks"),
        help="Convert only these ranks (proc directories by the rank they are given), like 0-3,8.",
    ),
]


Format = Annotated[
    str,
    typer.Option(
        "--format",
        metavar="|".join([formats.AUTO, *formats.names()]),
        callback=lambda value: _choice(value, [formats.AUTO, *formats.names()]),
        help="What DATA holds: "
        + ", ".join(f"{fmt.name} ({fmt.looks_like})" for fmt in formats.FORMATS.values())
        + " or auto (each of them that is found; each gets its own database).",
    ),
]
DataArgument = Annotated[
    Path,
    typer.Argument(
        metavar="DATA",
        help="msprobe output: a dump directory (parent of step*) or a monitor output directory (parent of the "
        "<time>-rank<R>-<id> run directories).",
    ),
]
DbOption = Annotated[
    Path,
    typer.Option(
        "--db",
        help="Output directory: " + " and/or ".join(f"DB/{fmt.db_name}" for fmt in formats.FORMATS.values()) + ".",
    ),
]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars and no summary; errors only.")]
NoIndex = Annotated[
    bool, typer.Option("--no-index", help="Skip the read indexes and ANALYZE (smaller file, slower plugin).")
]


def _handles_errors(command):
    """Turn trendconv errors into one line on stderr and their exit status; Ctrl-C (or SIGTERM, SIGHUP) into
    130, whatever error the interruption caused (see trendconv.interrupt)."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            with interrupt.armed():
                return _call(command, args, kwargs)
        except TrendconvError as exc:
            if not interrupt.received():
                report.print_warnings(exc.warnings)
                if isinstance(exc, InternalError) and report.debugging():
                    typer.echo(exc.detail, err=True, nl=False)
                report.print_error(str(exc))
                raise typer.Exit(int(exc.exit_status)) from None
        except KeyboardInterrupt:
            pass
        except BaseException:
            if not interrupt.received():
                raise
        report.print_error("interrupted")
        raise typer.Exit(int(ExitStatus.INTERRUPTED)) from None

    return wrapper


def _call(command, args, kwargs):
    """COMMAND's own result; an unexpected exception is a bug of ours, worded as one (InternalError)."""
    for name in ("data", "work", "db"):  # recorded in WORK, or handed to Arrow and SQLite
        if kwargs.get(name) is not None:
            require_utf8(kwargs[name], UsageError)
    try:
        return command(*args, **kwargs)
    except (TrendconvError, typer.Exit, typer.Abort, TyperException):
        raise
    except Exception as exc:  # noqa: BLE001 - a bug: one line that says so, the traceback with --debug
        raise internal_error(exc, f"running `trendconv {command.__name__}`") from None


def _version(value: bool) -> None:
    if value:
        from trendconv import native

        typer.echo(f"trendconv {__version__} ({native.describe()})")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and C parts, and exit."),
    ] = False,
    debug: Annotated[
        bool, typer.Option("--debug", help="On an internal error, print its traceback (also: TRENDCONV_DEBUG=1).")
    ] = False,
) -> None:
    """Convert msprobe dump statistics into Trend Analyzer trend databases (*.trend.db), fast."""
    report.debug = debug


@app.command()
@_handles_errors
def parse(
    data: DataArgument,
    work: Annotated[Path, typer.Option("--work", help="Where the Parquet shards go (created if needed).")],
    input_format: Format = "auto",
    workers: Workers = None,
    micro_step: MicroStep = True,
    mapping: Mapping = None,
    executor: ExecutorKind = "local",
    scheduler: Scheduler = None,
    quiet: Quiet = False,
    steps: Steps = None,
    ranks: Ranks = None,
) -> None:
    """Parse DATA into Parquet shards under WORK: one per (step, rank) of dump data, one per monitor CSV file.

    Finished shards whose sources and options are unchanged are reused, so an interrupted parse
    resumes where it stopped.

    Example: trendconv parse ./dump --work ./work --workers 4
    """
    _prestart(executor, workers, data, input_format)
    import trendconv

    with report.Bars(("parse",), enabled=not quiet) as bars:
        summaries = trendconv.parse(
            data,
            work,
            format=input_format,
            workers=workers,
            micro_step=micro_step,
            mapping=_mapping(mapping),
            executor=_executor(executor, scheduler, workers),
            progress=bars,
            steps=steps,
            ranks=ranks,
        )
    for summary in summaries:
        report.finish(report.print_parse_summary, summary, quiet=quiet)


@app.command()
@_handles_errors
def load(
    work: Annotated[Path, typer.Argument(metavar="WORK", help="A WORK directory written by `trendconv parse`.")],
    db: DbOption,
    no_index: NoIndex = False,
    split_steps: SplitSteps = None,
    max_db_size: MaxDbSize = None,
    load_workers: LoadWorkers = None,
    name: RunName = None,
    quiet: Quiet = False,
) -> None:
    """Load the shards of WORK into DB/dump_data.trend.db and/or DB/monitor_data.trend.db, atomically.

    Needs only the shards: the raw data may be gone. Re-run it after a schema change, or to split otherwise.

    Example: trendconv load ./work --db ./out --split-steps 100
    """
    _without_numpy()
    if split_steps is not None or load_workers is not None:  # loader processes are likely: their server starts now
        prestart(load_workers)
    import trendconv

    with report.Bars(("load",), enabled=not quiet) as bars:
        summaries = trendconv.load(
            work,
            db,
            index=not no_index,
            progress=bars,
            split_steps=split_steps,
            max_db_size=max_db_size,
            load_workers=load_workers,
            name=name,
        )
    for summary in summaries:
        report.finish(report.print_load_summary, summary, quiet=quiet)
    _warn_if_refused(db)


@app.command()
@_handles_errors
def run(
    data: DataArgument,
    db: DbOption,
    work: Annotated[
        Path | None, typer.Option("--work", help="Where shards go. Default: DB/.trendconv (kept, for re-loads).")
    ] = None,
    input_format: Format = "auto",
    workers: Workers = None,
    micro_step: MicroStep = True,
    mapping: Mapping = None,
    no_index: NoIndex = False,
    split_steps: SplitSteps = None,
    max_db_size: MaxDbSize = None,
    load_workers: LoadWorkers = None,
    name: RunName = None,
    executor: ExecutorKind = "local",
    scheduler: Scheduler = None,
    quiet: Quiet = False,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow",
            help="Keep watching DATA as training writes it and append each complete file set or CSV file to the "
            "databases in place, which an open Trend Analyzer shows on its next refresh (docs/live.md). Ctrl-C "
            "stops it (exit 0).",
        ),
    ] = False,
    poll: Annotated[
        float | None,
        typer.Option(
            "--poll",
            min=0.01,
            help="With --follow: seconds between looks at DATA; a file counts as complete once unchanged that long "
            f"(default {_POLL:g}).",
        ),
    ] = None,
    stop_after_idle: Annotated[
        float | None,
        typer.Option(
            "--stop-after-idle", min=0.01, help="With --follow: stop after this many seconds without new data."
        ),
    ] = None,
    steps: Steps = None,
    ranks: Ranks = None,
) -> None:
    """Parse and load in one go (dump data: loading overlaps parsing). Re-running resumes after a crash or Ctrl-C.

    Example: trendconv run ./dump --db ./out --workers 4 --split-steps 100
    """
    _prestart(executor, workers, data, input_format)
    if follow or poll is not None or stop_after_idle is not None:
        if follow and load_workers is not None:
            raise UsageError("--follow writes one database at a time: --load-workers cannot go with it")
        _follow(
            data,
            db,
            follow=follow,
            poll=poll,
            stop_after_idle=stop_after_idle,
            format=input_format,
            work=work,
            workers=workers,
            micro_step=micro_step,
            mapping=_mapping(mapping),
            index=not no_index,
            executor=_executor(executor, scheduler, workers),
            quiet=quiet,
            split_steps=split_steps,
            max_db_size=max_db_size,
            name=name,
            steps=steps,
            ranks=ranks,
        )
        return
    _convert(
        data,
        db,
        format=input_format,
        work=work,
        workers=workers,
        micro_step=micro_step,
        mapping=_mapping(mapping),
        index=not no_index,
        split_steps=split_steps,
        max_db_size=max_db_size,
        load_workers=load_workers,
        name=name,
        executor=_executor(executor, scheduler, workers),
        quiet=quiet,
        steps=steps,
        ranks=ranks,
    )


def _prestart(executor: str, workers: int | None, data: Path, input_format: str) -> None:
    if executor == "local":
        _without_numpy()
        prestart(workers, data, [input_format])


def _without_numpy() -> None:
    """Before the library is imported, in the command's own process (`main`), not a program's that runs the app:
    see trendconv.executors.numpyless."""
    if is_command():
        import trendconv.executors.numpyless  # noqa: F401


def _mapping(path: Path | None) -> Path | None:
    """--mapping '' is no mapping, as in msprobe."""
    return None if path is None or str(path) == "" else path


def _executor(kind: str, scheduler: str | None, workers: int | None):
    """--executor and --scheduler as the library's `executor`: None for the local pool, or a Dask executor."""
    if kind == "local":
        if scheduler:
            raise UsageError("--scheduler goes with --executor dask")
        return None
    if kind == "dask":
        from trendconv.executors.dask import DaskExecutor, local_workers

        return DaskExecutor(scheduler, workers=local_workers(workers))
    raise UsageError(f"--executor {kind!r}: expected 'local' or 'dask'")


def _convert(data: Path, db: Path, *, quiet: bool, **options) -> None:
    import trendconv

    with report.Bars(("parse", "load"), enabled=not quiet) as bars:
        summaries = trendconv.convert(data, db, progress=bars, **options)
    for summary in summaries:
        report.finish(report.print_run_summary, summary, quiet=quiet)
    _warn_if_refused(db)


_POLL = 2.0


def _follow(data: Path, db: Path, *, follow: bool, poll: float | None, quiet: bool, **options) -> None:
    """`run --follow`: a line per batch as it goes in, a summary line per format when it stops."""
    if not follow:
        raise UsageError("--poll and --stop-after-idle go with --follow")
    import trendconv

    summaries = trendconv.follow(
        data,
        db,
        poll=_POLL if poll is None else poll,
        on_batch=None if quiet else report.print_batch,
        on_warning=lambda warning: report.print_warnings([warning]),  # as they arise, --quiet or not
        **options,
    )
    for summary in summaries if not quiet else []:
        report.print_follow_summary(summary)
    if not summaries and not quiet:  # --format auto, and no data appeared
        typer.echo(f"{data}: stopped following with nothing converted: no dump or monitor data appeared in it")
    if any(summary.files for summary in summaries):  # else there is nothing the Trend Analyzer could refuse
        _warn_if_refused(db)
    elif summaries:
        _warn_of_other_formats(data, [summary.format for summary in summaries])


def _warn_of_other_formats(data: Path, followed: list[str]) -> None:
    """Nothing converted with --format named: DATA may hold another format's data, which a follower waits for."""
    from trendconv import formats

    try:
        found = [fmt.name for fmt in formats.detect(data) if fmt.name not in followed]
    except TrendconvError:  # no data of any format (or DATA gone): the summary said what was followed
        return
    if found:
        report.print_warnings(
            [f"{data}: holds {found[0]} data, which --format {followed[0]} does not follow: use --format {found[0]}"]
        )


def _warn_if_refused(db: Path) -> None:
    """Whatever in DB the Trend Analyzer would refuse (an old group-writable directory, another user's file)."""
    from trendconv import check as checks

    report.print_warnings([str(problem) for problem in checks.check_directory(db).problems])


@app.command()
@_handles_errors
def check(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="A TensorBoard log directory (a --db directory).")],
) -> None:
    """Run the Trend Analyzer's own checks on DIR and every *.trend.db in it; exit 1 if it would refuse any.

    Checks path length, symbolic links, owner, write bits, size, the tables and columns the plugin reads, the
    global_stats row and its stat names; says which database the plugin opens first.

    Example: trendconv check ./out
    """
    from trendconv import check as checks

    found = checks.check_directory(directory)
    typer.echo(found.format())
    if found.problems:
        raise typer.Exit(int(ExitStatus.DATA_ERROR))


@app.command()
@_handles_errors
def inspect(
    work: Annotated[Path, typer.Argument(metavar="WORK", help="A WORK directory written by parse or run.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of a table.")] = False,
    input_format: Annotated[
        str | None,
        typer.Option(
            "--format",
            metavar="|".join(formats.names()),
            callback=lambda value: _choice(value, formats.names()),
            help="Which part of WORK to show. Default: the first of "
            + ", ".join(formats.names())
            + " whose parse was started in WORK.",
        ),
    ] = None,
) -> None:
    """Show each shard of WORK: step (or CSV file), rank, status (ok/stale/corrupt/missing), rows, skips.

    Example: trendconv inspect ./out/.trendconv --json
    """
    from trendconv import inspection

    # written shard by shard: a WORK of 100,000 shards is not held in memory as one document
    try:
        inspection.write_inspection(work, input_format, sys.stdout.write, as_json=as_json)
        sys.stdout.write("\n")
        sys.stdout.flush()
    except BrokenPipeError:  # the reader stopped reading (`| head`): not a failure, and nothing left to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so that the exit's flush is quiet too


@app.command()
@_handles_errors
def diff(
    sides: Annotated[
        list[Path],
        typer.Argument(
            metavar="A B",
            help="Two trend databases; either may be a set of them (a split output): a directory of one run's files "
            "or a quoted glob pattern.",
        ),
    ],
    limit: Annotated[int, typer.Option("--limit", min=1, help="Examples shown per table and side.")] = 5,
    ids: Annotated[
        bool,
        typer.Option(
            "--ids", help="Also compare target and metric ids, each metric's tag ids, sqlite_sequence (no sets)."
        ),
    ] = False,
) -> None:
    """Compare two trend databases by names (ids ignored unless --ids); exit 0 when equal, 1 otherwise.

    Example: trendconv diff msprobe_out/dump_data.trend.db out/dump_data.trend.db
    """
    import trendconv

    if len(sides) != 2:
        raise UsageError(
            f"diff compares two sides, A and B, not {len(sides)} paths; give a set of databases as a directory or "
            "as a quoted pattern ('out/*.trend.db')"
        )
    found = trendconv.diff(*sides, limit=limit, ids=ids)
    typer.echo(found.format())
    if not found.equal:
        raise typer.Exit(int(ExitStatus.DATA_ERROR))


def _msprobe_bool(value: str) -> bool:
    lowered = value.lower()
    if lowered not in ("true", "false"):
        raise typer.BadParameter(f"{value!r} is not one of 'true', 'false'", param_hint="'--micro_step'")
    return lowered == "true"


@app.command()
@_handles_errors
def data2db(
    data: Annotated[
        Path, typer.Option("--data", help="Input data directory (parent of step*, or of the monitor run directories).")
    ],
    db: Annotated[Path, typer.Option("--db", help="Output directory for dump_data.trend.db / monitor_data.trend.db.")],
    input_format: Format = "auto",
    mapping: Mapping = None,
    micro_step: Annotated[
        str, typer.Option("--micro_step", help="true or false, any letter case (msprobe's spelling).")
    ] = "true",
    process_num: Annotated[
        int, typer.Option("--process_num", min=1, max=MAX_WORKERS, help="Parallel workers, 1..128.")
    ] = 1,
    split_steps: SplitSteps = None,
    max_db_size: MaxDbSize = None,
    load_workers: LoadWorkers = None,
    name: RunName = None,
    steps: Steps = None,
    ranks: Ranks = None,
) -> None:
    """msprobe data2db's flags and spelling, so existing scripts switch by changing one word.

    Example: trendconv data2db --data ./dump --db ./out --micro_step true --process_num 4
    """
    prestart(process_num, data)
    micro_step_mode = _msprobe_bool(micro_step)
    _convert(
        data,
        db,
        format=input_format,
        workers=process_num,
        micro_step=micro_step_mode,
        mapping=_mapping(mapping),
        split_steps=split_steps,
        max_db_size=max_db_size,
        load_workers=load_workers,
        name=name,
        quiet=False,
        steps=steps,
        ranks=ranks,
    )


def main(argv: list[str] | None = None) -> None:
    """Console entry point."""
    as_command()
    app(args=argv, prog_name="trendconv")


if __name__ == "__main__":
    main()
