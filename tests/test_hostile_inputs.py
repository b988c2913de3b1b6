"""Issue 18: errors that blame the right thing, and bad input accepted or refused as it should be.

Unreadable directories (simulated for root, real for an unprivileged user where one can be used), trendconv's own
failures (never a data error), a full WORK disk, integers at and beyond 64 bits in construct.json, directory
names and monitor CSV files, long CSV lines, --mapping values, deep construct.json chains. Where msprobe data2db
converts an input, the database is compared with the reference (`trendconv diff`).
"""

from __future__ import annotations

import errno
import json
import os
import pickle
import shutil
import stat
import subprocess
import sys
import tempfile
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pyarrow as pa
import pytest
from helpers import (
    A1_CONSTRUCT,
    A1_DATA,
    GRAD,
    RUN,
    STEP_MODE,
    both_readers,
    file_set_of,
    query,
    run_cli,
    write_file_set,
    write_run,
)
from reference import run_msprobe
from typer.testing import CliRunner

import trendconv
from datagen.dump import generate as generate_dump
from trendconv import api, parsing
from trendconv.cli import app
from trendconv.comparison import diff_databases
from trendconv.errors import InternalError, UsageError
from trendconv.executors import Outcome
from trendconv.formats import FORMATS
from trendconv.formats.dump import builder as dump_builder
from trendconv.formats.dump import construct
from trendconv.formats.dump import shard as dump_shard
from trendconv.formats.monitor import rules
from trendconv.formats.monitor.parse import MonitorRows
from trendconv.loading import table
from trendconv.loading.stage import Feeder
from trendconv.parsing import runner as parse_stage

INT64_MAX = 2**63 - 1
DENIED = "cannot read: Permission denied"


def invoke(*args, env=None):
    return CliRunner().invoke(app, [str(arg) for arg in args], env=env)


def same_as_reference(data: Path, root: Path, *, micro_step: bool = True, input_format: str = "dump") -> None:
    reference = run_msprobe(data, root / "reference", micro_step=micro_step, input_format=input_format)
    options = api.ParseOptions(micro_step=micro_step)
    ours = api.run(data, root / "ours", options, workers=1, input_format=input_format).load.db
    report = diff_databases(reference, ours)
    assert report.equal, report.format()


def megatron(root) -> dict:
    """A1's construct.json in the Megatron form, its two roots' parents set to ROOT (a micro step)."""
    parents = {key: root if value is None and ".backward" not in key else value for key, value in A1_CONSTRUCT.items()}
    return {"megatron_micro_step_number": 1, **{key: [parent, 0] for key, parent in parents.items()}}


# --- unreadable directories --------------------------------------------------------------------------------------


@pytest.fixture
def deny(monkeypatch):
    """deny(DIR) makes DIR as `chmod 000` makes it for a user that is not root: it cannot be listed, and nothing
    in it can be looked at. (Root reads through chmod 000, and the suite runs as root in CI.)"""
    listdir, stat = os.listdir, os.stat

    def denied(path) -> PermissionError:
        return PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))

    def make(directory: Path) -> None:
        def fake_listdir(path="."):
            if Path(path) == directory:
                raise denied(path)
            return listdir(path)

        def fake_stat(path, *args, **kwargs):
            if Path(path).parent == directory:
                raise denied(path)
            return stat(path, *args, **kwargs)

        monkeypatch.setattr(os, "listdir", fake_listdir)
        monkeypatch.setattr(os, "stat", fake_stat)

    return make


@pytest.fixture
def dump_and_monitor(tmp_path) -> Path:
    data = tmp_path / "data"
    write_file_set(data / "step0" / "rank0", A1_DATA, A1_CONSTRUCT)
    write_run(data, {"grad_reduced_0-1.csv": GRAD})
    return data


@pytest.mark.parametrize(
    ("denied", "input_format"),
    [
        ("step0", "dump"),
        ("step0/rank0", "dump"),
        (".", "dump"),
        (RUN, "monitor"),
        (".", "monitor"),
        (".", "auto"),
    ],
)
def test_an_unreadable_directory_is_one_line_naming_it(dump_and_monitor, tmp_path, deny, denied, input_format):
    directory = dump_and_monitor / denied if denied != "." else dump_and_monitor
    deny(directory)
    result = invoke("run", dump_and_monitor, "--db", tmp_path / "out", "--format", input_format, "-j", "1")
    assert (result.exit_code, result.stderr) == (1, f"error: {directory}: {DENIED}\n")
    assert not (tmp_path / "out" / "dump_data.trend.db").exists()


def test_an_unreadable_older_run_of_a_rank_is_only_named(tmp_path, deny):
    data = tmp_path / "data"
    write_run(data, {"grad_reduced_0-1.csv": GRAD})
    old = write_run(data, {"grad_reduced_0-1.csv": GRAD}, "Feb19_16-27-56-rank0-00000000")
    deny(old)
    result = invoke("run", data, "--db", tmp_path / "out", "-j", "1", "-q")
    assert (result.exit_code, result.stderr) == (
        0,
        f"warning: {old}: another run of rank0; using the newer {RUN} only, the CSV files (the directory cannot be "
        "read) of this run left out (msprobe data2db also keeps one run per rank)\n",
    )


def test_an_unreadable_mapping_directory_is_a_usage_error(a1_data, tmp_path, deny):
    mapping = tmp_path / "maps" / "mapping.json"
    mapping.parent.mkdir()
    mapping.write_text("{}")
    deny(mapping.parent)
    with pytest.raises(UsageError) as raised:
        api.load_mapping(mapping)
    assert str(raised.value) == f"{mapping.parent}: {DENIED}"


NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


@pytest.fixture
def unprivileged():
    """A command prefix that runs as an unprivileged user (nobody), and a directory it may use; skipped where
    there is none (not root, no setpriv, or nobody cannot run this Python)."""
    prefix = NOBODY if os.geteuid() == 0 else []
    if prefix and shutil.which("setpriv") is None:
        pytest.skip("no setpriv to run as an unprivileged user")
    directory = Path(tempfile.mkdtemp(prefix="trendconv-nobody-"))
    directory.chmod(0o777)  # tmp_path's parents are root's alone
    try:
        probe = subprocess.run([*prefix, sys.executable, "-c", "import trendconv"], capture_output=True, cwd=directory)
        if probe.returncode != 0:
            pytest.skip(f"an unprivileged user cannot run {sys.executable}")
        yield prefix, directory
    finally:
        shutil.rmtree(directory)


@pytest.mark.parametrize(
    "denied",
    ["data/step0", "data/step0/rank0", "data/step0/rank0/dump.json", f"data/{RUN}", f"data/{RUN}/grad_reduced_0-1.csv"],
)
def test_chmod_000_as_an_unprivileged_user(unprivileged, denied):
    prefix, root = unprivileged
    write_file_set(root / "data" / "step0" / "rank0", A1_DATA, A1_CONSTRUCT)
    write_run(root / "data", {"grad_reduced_0-1.csv": GRAD})
    for path in [root / "data", *(root / "data").rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    (root / denied).chmod(0o000)
    command = [sys.executable, "-m", "trendconv", "run", "data", "--db", "out", "-j", "1", "-q"]
    try:
        done = subprocess.run([*prefix, *command], capture_output=True, text=True, cwd=root)
    finally:
        (root / denied).chmod(0o755)
    # dump data comes first: when the monitor data fails, its database is built but not put in place
    unwritten = "" if "step0" in denied else f"warning: out/dump_data.trend.db: not written: {MONITOR_FAILED}\n"
    assert (done.returncode, done.stderr) == (1, f"{unwritten}error: {denied}: {DENIED}\n")


def test_an_unreadable_shard_is_named_in_the_systems_words(unprivileged):
    prefix, root = unprivileged
    write_file_set(root / "data" / "step0" / "rank0", A1_DATA, A1_CONSTRUCT)
    command = [sys.executable, "-m", "trendconv", "run", "data", "--db", "out", "-j", "1", "-q"]
    subprocess.run([*prefix, *command], check=True, cwd=root)
    shard = Path("out/.trendconv/dump/shards/step0_rank0.parquet")
    (root / shard).chmod(0o000)
    load = [sys.executable, "-m", "trendconv", "load", "out/.trendconv", "--db", "out", "-q"]
    done = subprocess.run([*prefix, *load], capture_output=True, text=True, cwd=root)
    message = f"error: {shard}: not a readable trendconv shard (Permission denied); run `trendconv parse` again\n"
    assert (done.returncode, done.stderr) == (1, message)


def test_inspect_of_a_work_it_may_not_write_to_looks_at_its_chunks_all_the_same(unprivileged):
    """A re-run keeps the earlier chunks' metas in an unnamed file beside them; `inspect` writes nothing in WORK."""
    prefix, root = unprivileged
    write_run(root / "data", {"grad_reduced_0-1.csv": GRAD, "actv_0-1.csv": GRAD.replace("grad_reduced", "actv")})
    command = [sys.executable, "-m", "trendconv", "run", "data", "--db", "out", "-j", "1", "-q"]
    subprocess.run([*prefix, *command], check=True, cwd=root)
    work = root / "out" / ".trendconv"
    for path in [work, *work.rglob("*")]:
        if path.is_dir():
            path.chmod(0o555)
    inspect = [sys.executable, "-m", "trendconv", "inspect", "out/.trendconv", "--json"]
    try:
        done = subprocess.run([*prefix, *inspect], capture_output=True, text=True, cwd=root)
    finally:
        for path in [work, *work.rglob("*")]:
            if path.is_dir():
                path.chmod(0o755)
    assert (done.returncode, done.stderr) == (0, "")
    entries = json.loads(done.stdout)["shards"]
    assert [(entry["file"], entry["status"]) for entry in entries] == [
        (f"{RUN}/actv_0-1.csv", "ok"),
        (f"{RUN}/grad_reduced_0-1.csv", "ok"),
    ]


MONITOR_FAILED = "the monitor data failed, and the databases of all formats are replaced together or not at all"


# --- trendconv's own failures ------------------------------------------------------------------------------------


def line_of(module, text: str) -> int:
    """The line of MODULE's source that holds TEXT (the error names the innermost line of trendconv's code)."""
    lines = Path(module.__file__).read_text().splitlines()
    (number,) = [number for number, line in enumerate(lines, start=1) if text in line]
    return number


@pytest.fixture
def arrow_bug(monkeypatch):
    """A bug in the parse worker: an Arrow conversion that overflows, as a shard's int32 column once did."""

    def overflowing(*args, **kwargs):
        return pa.array([3000000000], pa.int32())

    monkeypatch.setattr(dump_shard, "build_table", overflowing)
    return (
        f"internal error while parsing {{}}/step0/rank0/dump.json, step 0, rank 0: ArrowInvalid: Value 3000000000 "
        f"too large to fit in C integer type (at trendconv/formats/dump/shard.py:"
        f"{line_of(dump_shard, 'table = build_table(')}); a trendconv bug, not a data error: please "
        "report it with the traceback `trendconv --debug ...` shows"
    )


LIBRARY_REPORT = "report it with its traceback (the error's `detail`)"  # the CLI: "... `trendconv --debug ...` shows"


def test_a_bug_in_a_worker_is_an_internal_error_not_a_data_error(a1_data, tmp_path, arrow_bug):
    result = invoke("run", a1_data, "--db", tmp_path / "out", "-j", "1")
    assert (result.exit_code, result.stderr) == (1, f"error: {arrow_bug.format(a1_data)}\n")


@pytest.mark.parametrize(("flag", "env"), [(["--debug"], None), ([], {"TRENDCONV_DEBUG": "1"})])
def test_debug_shows_the_traceback_from_the_worker(a1_data, tmp_path, arrow_bug, flag, env):
    result = invoke(*flag, "run", a1_data, "--db", tmp_path / "out", "-j", "1", env=env)
    split = result.stderr.index("error: internal error")
    traceback, error = result.stderr[:split], result.stderr[split:]
    assert (result.exit_code, error) == (1, f"error: {arrow_bug.format(a1_data)}\n")
    assert traceback.startswith("Traceback (most recent call last):\n")
    assert 'trendconv/parsing/tasks.py", line' in traceback and "in parse_chunk\n" in traceback
    assert traceback.endswith("pyarrow.lib.ArrowInvalid: Value 3000000000 too large to fit in C integer type\n")


def test_an_internal_error_travels_from_a_worker_with_its_traceback(a1_data, tmp_path, arrow_bug):
    _, tasks = parsing.plan(a1_data, tmp_path / "work", api.ParseOptions(), FORMATS["dump"])
    [(task, meta, error)] = parsing.parse_chunk((tasks[0],))
    assert (task, meta, type(error)) == (tasks[0], None, InternalError)
    copy = pickle.loads(pickle.dumps(error))
    library = arrow_bug.format(a1_data).replace(
        "report it with the traceback `trendconv --debug ...` shows", LIBRARY_REPORT
    )
    assert (str(copy), copy.detail) == (library, error.detail)
    assert "in parse_chunk\n" in copy.detail


class BrokenPool:
    """An executor whose worker pool broke: no task's fault."""

    workers = 2

    def imap_unordered(self, fn, chunks):
        for chunk in chunks:
            yield Outcome(chunk, error=BrokenProcessPool("A child process terminated abruptly"))


def test_a_broken_pool_names_no_input_file(a1_data, tmp_path):
    with pytest.raises(InternalError) as raised:
        api.parse(a1_data, tmp_path / "work", api.ParseOptions(), executor=BrokenPool(), input_format="dump")
    assert str(raised.value) == (
        "internal error while running the parse workers: BrokenProcessPool: A child process terminated abruptly; a "
        f"trendconv bug, not a data error: please {LIBRARY_REPORT}"
    )


def test_a_bug_in_the_main_process_is_one_line(a1_data, tmp_path, monkeypatch):
    def broken(self):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(Feeder, "finish", broken)
    result = invoke("run", a1_data, "--db", tmp_path / "out", "-j", "1", "-q")
    assert (result.exit_code, result.stderr) == (
        1,
        "error: internal error while running `trendconv run`: ZeroDivisionError: division by zero (at "
        f"trendconv/api.py:{line_of(api, 'output = feeder.finish()')}); a trendconv bug, not a data error: please "
        "report it with the traceback `trendconv --debug ...` shows\n",
    )
    assert list((tmp_path / "out").iterdir()) == [tmp_path / "out" / ".trendconv"]  # no database, no temporary


def test_a_system_error_on_a_named_file_is_that_file_in_the_systems_words(a1_data, tmp_path, deny):
    """An OSError trendconv did not expect (an unreadable WORK) names its file, and claims no bug."""
    work = tmp_path / "work"
    assert invoke("parse", a1_data, "--work", work, "-j", "1", "-q").exit_code == 0
    deny(work / "dump" / "shards")
    result = invoke("load", work, "--db", tmp_path / "out", "-q")
    assert (result.exit_code, result.stderr) == (
        1,
        f"error: {work / 'dump' / 'shards' / 'step0_rank0.parquet'}: Permission denied "
        "(while running `trendconv load`)\n",
    )


# --- a full disk under WORK ----------------------------------------------------------------------------------------


def full_disk_at(path: Path) -> Path:
    """Writing PATH's temporary file fails as on a full disk: it is a link to /dev/full (whose writes fail)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.parent.mkdir(parents=True, exist_ok=True)
    tmp.symlink_to("/dev/full")
    return tmp


@pytest.mark.parametrize("input_format", ["dump", "monitor"])
def test_a_full_disk_under_work_names_the_shard(dump_and_monitor, tmp_path, input_format):
    work = tmp_path / "work"
    if input_format == "dump":
        shard = work / "dump" / "shards" / "step0_rank0.parquet"
    else:  # the chunk file of the monitor shards, named by a digest of its units
        fmt = FORMATS["monitor"]
        _, tasks = parse_stage.plan(dump_and_monitor, work, api.ParseOptions(), fmt)
        [job] = parse_stage.chunk_jobs(tasks, set())
        shard = job.path
    full_disk_at(shard)
    result = invoke("parse", dump_and_monitor, "--work", work, "--format", input_format, "-j", "1", "-q")
    assert (result.exit_code, result.stderr) == (1, f"error: {shard}: cannot write: No space left on device\n")
    assert sorted(path.name for path in shard.parent.iterdir()) == []
    resumed = invoke("parse", dump_and_monitor, "--work", work, "--format", input_format, "-j", "1", "-q")
    assert (resumed.exit_code, shard.is_file()) == (0, True)


def test_a_work_directory_that_cannot_be_made_is_an_output_error(dump_and_monitor, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "monitor").write_text("a file where a directory must be")
    result = invoke("parse", dump_and_monitor, "--work", work, "--format", "monitor", "-q")
    assert (result.exit_code, result.stderr) == (
        1,
        f"error: {work / 'monitor'}: cannot use it as the WORK directory: Not a directory\n",
    )


@pytest.mark.parametrize("command", [("run",), ("data2db",), ("run", "--follow")])
def test_a_document_with_the_databases_name_is_not_replaced(a1_data, tmp_path, command):
    out = tmp_path / "out"
    out.mkdir()
    document = out / "dump_data.trend.db"
    document.write_bytes(b"notes a user keeps here\n")
    follow = ("--stop-after-idle", "0.1", "--poll", "0.1") if "--follow" in command else ()
    if command[0] == "data2db":
        result = invoke("data2db", "--data", a1_data, "--db", out)
    else:
        result = invoke(*command, a1_data, "--db", out, "-q", *follow)
    assert result.exit_code == 1, result.output
    assert result.stderr.splitlines()[-1] == (
        f"error: {document}: cannot write the database: a file that is not a SQLite database has its name; "
        f"move it away (`mv '{document}' '{document}.bak'`) or choose another --db"
    )
    assert document.read_bytes() == b"notes a user keeps here\n"
    assert sorted(path.name for path in out.iterdir() if not path.name.startswith(".")) == ["dump_data.trend.db"]


def test_a_fifo_with_the_databases_name_is_neither_read_nor_replaced(a1_data, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "dump_data.trend.db")
    result = invoke("run", a1_data, "--db", out, "-q")
    assert (result.exit_code, result.stderr) == (
        1,
        f"error: {out / 'dump_data.trend.db'}: cannot write the database: something that is not a file has its name\n",
    )
    assert stat.S_ISFIFO((out / "dump_data.trend.db").lstat().st_mode)


def test_a_split_output_leaves_a_document_with_the_unsplit_name_in_place(a1_data, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    document = out / "dump_data.trend.db"
    document.write_bytes(b"notes a user keeps here\n")
    result = invoke("run", a1_data, "--db", out, "-q", "--split-steps", "1")
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[0] == (
        f"warning: {document}: left in place, though this output does not include it: trendconv did not write it, "
        "or it changed since; the Trend Analyzer lists it beside the new databases "
        f"(`rm '{document}'` if it is stale)"
    )
    assert document.read_bytes() == b"notes a user keeps here\n"


@pytest.mark.parametrize("content", [b"", b"SQLite format 3\x00"])
def test_an_empty_file_or_a_database_with_the_databases_name_is_replaced(a1_data, tmp_path, content):
    out = tmp_path / "out"
    out.mkdir()
    (out / "dump_data.trend.db").write_bytes(content)
    result = invoke("run", a1_data, "--db", out, "-q")
    assert (result.exit_code, result.stderr) == (0, "")
    assert diff_databases(out / "dump_data.trend.db", trendconv.convert(a1_data, tmp_path / "fresh")[0].load.db).equal


@pytest.mark.parametrize("follow", [False, True])
def test_a_directory_with_the_outputs_lock_name_stops_the_output(a1_data, tmp_path, follow):
    """Without its lock another process could write the output at the same time (docs/user-guide.md)."""
    out = tmp_path / "out"
    lock = out / ".dump_data.trend.db.lock"
    lock.mkdir(parents=True)
    args = ["--follow", "--poll", "0.2", "--stop-after-idle", "0.5"] if follow else []
    result = run_cli("run", a1_data, "--db", out, *args)
    assert (result.returncode, result.stdout, result.stderr) == (
        1,
        "",
        f"error: {lock}: cannot use it as the lock of the output (Is a directory); it is trendconv's name for that "
        f"lock: move it away (`mv '{lock}' '{lock}.bak'`)\n",
    )
    assert sorted(path.name for path in out.iterdir()) == [".dump_data.trend.db.lock", ".trendconv"]


KILLED_WRITER = """import os, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA cache_size = 1")  # every changed page goes to the file before the commit
conn.execute("BEGIN")
conn.execute("UPDATE trend_data SET norm = -1")
os._exit(0)  # no commit, no rollback: the journal stays, hot
"""


@pytest.mark.parametrize("command", ["run", "load", "follow"])
@pytest.mark.parametrize("database", ["there", "gone"])
def test_a_journal_a_killed_writer_left_is_not_rolled_into_the_new_database(tmp_path, command, database):
    """SQLite rolls a hot journal into whatever file has its database's name: a new database renamed into place
    would be corrupted (a follower SIGKILLed in a commit leaves one)."""
    data, out = tmp_path / "data", tmp_path / "out"
    generate_dump(data, steps=2, ranks=2, layers=1)
    db, journal = out / "dump_data.trend.db", out / "dump_data.trend.db-journal"
    assert run_cli("run", data, "--db", out, "-q").returncode == 0
    subprocess.run([sys.executable, "-c", KILLED_WRITER, db], check=True)
    assert journal.stat().st_size > 0
    if database == "gone":
        db.unlink()
    args = {
        "run": ["run", data, "--db", out, "-q"],
        "load": ["load", out / ".trendconv", "--db", out, "-q"],
        "follow": ["run", data, "--db", out, "--follow", "--poll", "0.2", "--stop-after-idle", "0.5", "-q"],
    }[command]
    again = run_cli(*args)
    assert (again.returncode, again.stderr) == (0, "")
    assert not journal.exists()
    assert query(db, "PRAGMA integrity_check") == [("ok",)]
    assert query(db, "SELECT count(*) FROM trend_data WHERE norm = -1") == [(0,)]
    assert diff_databases(db, trendconv.convert(data, tmp_path / "fresh")[0].load.db).equal


# --- integers in construct.json, directory names and dump keys ---------------------------------------------------


def test_construct_micro_steps_beyond_int32_and_negative_match_the_reference(tmp_path):
    data = tmp_path / "data"
    write_file_set(data / "step0" / "rank0", A1_DATA, megatron(3000000000))  # the example
    write_file_set(data / "step1" / "rank0", A1_DATA, A1_CONSTRUCT)
    write_file_set(data / "step2" / "rank0", A1_DATA, megatron(-5))  # a step of -4 micro steps
    write_file_set(data / "step2" / "rank1", A1_DATA, megatron(-9))
    write_file_set(data / "step3" / "rank0", A1_DATA, A1_CONSTRUCT)
    same_as_reference(data, tmp_path)
    db = tmp_path / "ours" / "dump_data.trend.db"
    assert query(db, "SELECT max_step FROM global_stats") == [(3000000000 + 1 + 2 - 4 + 2 - 1,)]


def test_negative_micro_step_counts_hand_the_rows_to_sqlite_which_gives_the_same_table(tmp_path, monkeypatch):
    # A step of -4 micro steps brings the next step's global steps back below its own: rank 0's rows stop coming in
    # key order, so the rows written as pages so far go to SQLite, which inserts the rest (docs/architecture.md,
    # "Table pages"). The reference test above compares such a database with msprobe's.
    data = tmp_path / "data"
    write_file_set(data / "step0" / "rank0", A1_DATA, A1_CONSTRUCT)
    write_file_set(data / "step1" / "rank0", A1_DATA, megatron(-5))
    write_file_set(data / "step2" / "rank0", A1_DATA, A1_CONSTRUCT)
    handed = []
    hand_over = table.TablePages.hand_over
    monkeypatch.setattr(table.TablePages, "hand_over", lambda pages, *args: handed.append(hand_over(pages, *args)))
    with_pages = trendconv.convert(data, tmp_path / "pages", work=tmp_path / "work", workers=1)[0].load
    monkeypatch.setattr(dump_builder, "_pages", lambda conn, path: None)
    by_sqlite = trendconv.load(tmp_path / "work", tmp_path / "sqlite")[0]
    order = "rank, step, target_id, metric_id"
    assert (len(handed), with_pages.rows) == (1, by_sqlite.rows)
    assert query(with_pages.db, f"SELECT * FROM trend_data ORDER BY {order}") == query(
        by_sqlite.db, f"SELECT * FROM trend_data ORDER BY {order}"
    )
    assert query(with_pages.db, "SELECT min(step) FROM trend_data") == [(-3,)]


def test_the_largest_micro_step_matches_the_reference(tmp_path):
    write_file_set(tmp_path / "data" / "step0" / "rank0", A1_DATA, megatron(INT64_MAX))
    same_as_reference(tmp_path / "data", tmp_path)
    assert query(tmp_path / "ours" / "dump_data.trend.db", "SELECT max(step) FROM trend_data") == [(INT64_MAX,)]


@pytest.mark.parametrize(
    ("construct_json", "message"),
    [
        (
            json.dumps(megatron(2**64)),
            "{construct}: key 'Module.net.Net.forward.0': micro step 18446744073709551616 (where its parent chain "
            "ends) does not fit a 64-bit integer",
        ),
        (
            json.dumps(megatron(-(2**63) - 1)),
            "{construct}: key 'Module.net.Net.forward.0': micro step -9223372036854775809 (where its parent chain "
            "ends) does not fit a 64-bit integer",
        ),
        (
            '{"Module.net.Net.forward.0": ' + "9" * 5000 + "}",
            "{construct}: unreadable JSON: Exceeds the limit (4300 digits) for integer string conversion: value has "
            "5000 digits",
        ),
    ],
)
def test_construct_integers_beyond_64_bits_are_data_errors(tmp_path, construct_json, message):
    """msprobe ends these in an OverflowError traceback (or cannot read the file); orjson would read them as floats,
    which are no micro step, and convert the file without a word."""
    item = tmp_path / "data" / "step0" / "rank0"
    write_file_set(item, A1_DATA)
    (item / "construct.json").write_text(construct_json)
    result = invoke("run", tmp_path / "data", "--db", tmp_path / "out", "-j", "1")
    expected = message.format(construct=item / "construct.json")
    assert (result.exit_code, result.stderr) == (1, f"error: {expected}\n")


def test_micro_steps_adding_up_beyond_64_bits_name_the_file(tmp_path):
    for step in (0, 1, 2):
        write_file_set(tmp_path / "data" / f"step{step}" / "rank0", A1_DATA, megatron(2**62))
    result = invoke("run", tmp_path / "data", "--db", tmp_path / "out", "-j", "1")
    assert (result.exit_code, result.stderr) == (
        1,
        "error: step1/rank0/construct.json, step 1, rank 0: micro step 4611686018427387904 lands on global step "
        "9223372036854775809, which does not fit a 64-bit integer (--no-micro-step keeps the original step "
        "numbers)\n",
    )
    assert not (tmp_path / "out" / "dump_data.trend.db").exists()


def test_a_last_micro_step_beyond_64_bits_names_the_widest_file(tmp_path):
    """No row lands beyond 64 bits, but global_stats.max_step would: the key of micro step 2**63 - 1 has no rows."""
    write_file_set(tmp_path / "data" / "step0" / "rank0", A1_DATA, A1_CONSTRUCT)
    write_file_set(tmp_path / "data" / "step1" / "rank0", A1_DATA, {**A1_CONSTRUCT, "Module.x.forward.0": INT64_MAX})
    result = invoke("run", tmp_path / "data", "--db", tmp_path / "out", "-j", "1")
    assert (result.exit_code, result.stderr) == (
        1,
        "error: step1/rank0/construct.json: 9223372036854775808 micro steps; with those of the other file sets the "
        "last global step, 9223372036854775809, does not fit a 64-bit integer (--no-micro-step keeps the original "
        "step numbers)\n",
    )


def test_directory_numbers_at_the_ends_of_64_bits_match_the_reference(tmp_path):
    data = tmp_path / "data"
    write_file_set(data / f"step-{2**63}" / f"rank-{2**63}", A1_DATA, A1_CONSTRUCT)
    write_file_set(data / f"step{INT64_MAX}" / f"rank{INT64_MAX}", A1_DATA, A1_CONSTRUCT)
    same_as_reference(data, tmp_path, micro_step=False)


def test_a_proc_numbered_beyond_64_bits_is_a_data_error(tmp_path):
    step = tmp_path / "data" / "step0"
    write_file_set(step / f"rank{INT64_MAX}", A1_DATA, A1_CONSTRUCT)
    write_file_set(step / "proc0", A1_DATA, A1_CONSTRUCT)
    result = invoke("run", tmp_path / "data", "--db", tmp_path / "out", "--no-micro-step", "-j", "1")
    assert (result.exit_code, result.stderr) == (
        1,
        f"error: {step / 'proc0'}: numbered after rank{INT64_MAX}, this proc directory would be rank {2**63}, which "
        "does not fit a 64-bit integer\n",
    )


def test_a_step_file_beyond_64_bits_is_not_a_step(tmp_path):
    write_file_set(tmp_path / "data" / "step0" / "rank0", A1_DATA, A1_CONSTRUCT)
    (tmp_path / "data" / f"step{2**64}").write_text("a file, not a step directory")
    result = invoke("run", tmp_path / "data", "--db", tmp_path / "out", "-j", "1", "-q")
    assert (result.exit_code, result.stderr) == (0, "")


def test_a_dump_key_index_of_5000_digits_is_a_data_error(tmp_path):
    key = "Functional.linear.0.forward." + "9" * 5000
    write_file_set(tmp_path / "data" / "step0" / "rank0", {key: A1_DATA["Functional.linear.0.forward"]})
    result = invoke("run", tmp_path / "data", "--db", tmp_path / "out", "--no-micro-step", "-j", "1")
    dump = tmp_path / "data" / "step0" / "rank0" / "dump.json"
    assert (result.exit_code, result.stderr) == (
        1,
        f"error: {dump}, step 0, rank 0, key {key!r}: target index of 5000 digits does not fit a 64-bit integer\n",
    )


def test_statistics_of_5000_digits_are_clipped_by_both_readers(tmp_path):
    """msprobe cannot read such a file (Python's int() reads 4300 digits); both readers clip them as any integer
    beyond float range, to the same shard."""
    digits = "9" * 5000
    tensor = f'{{"type": "torch.Tensor", "dtype": "torch.float32", "Norm": {digits}, "Max": -{digits}, "Min": 1}}'
    text = f'{{"data": {{"F.f.0.forward": {{"output": [{tensor[:-1]}, "Mean": 2}}]}}}}}}'
    file_set = file_set_of(tmp_path, text)
    both_readers(file_set, STEP_MODE, tmp_path)
    table, _ = FORMATS["dump"].parse(file_set, STEP_MODE)
    largest = sys.float_info.max
    assert table.select(["norm", "max", "min", "mean"]).to_pylist() == [
        {"norm": largest, "max": -largest, "min": 1.0, "mean": 2.0}
    ]


def test_deep_construct_chains_resolve():
    """200,000 parents deep, listed leaf first: each node is resolved once (a list scan per node took minutes)."""
    depth = 200_000
    chain = {f"Module.m{index}.forward.0": f"Module.m{index + 1}.forward.0" for index in range(depth)}
    chain[f"Module.m{depth}.forward.0"] = None
    steps = construct.micro_steps(chain, Path("construct.json"))
    assert (len(steps), set(steps.values())) == (depth + 1, {0})


# --- monitor CSV files: integers and long lines -------------------------------------------------------------------

HEADER = "vpp_stage,name,step,micro_step,norm\n"


def test_monitor_micro_steps_at_the_ends_of_64_bits_match_the_reference(tmp_path):
    data = tmp_path / "data"
    write_run(data, {"actv_0-0.csv": HEADER + f"0,a,0,{INT64_MAX},1.0\n0,b,0,0,2.0\n"})
    write_run(data, {"actv_0-0.csv": HEADER + f"0,a,0,{-(2**63)},1.0\n"}, "Feb20_16-27-56-rank1-b2f0e6a1")
    same_as_reference(data, tmp_path, input_format="monitor")
    db = tmp_path / "ours" / "monitor_data.trend.db"
    assert query(db, "SELECT min_step, max_step FROM global_stats") == [(0, INT64_MAX)]


def test_monitor_negative_micro_steps_only_match_the_reference(tmp_path):
    write_run(tmp_path / "data", {"actv_0-0.csv": HEADER + f"0,a,0,{-(2**63)},1.0\n0,a,1,-5,2.0\n"})
    same_as_reference(tmp_path / "data", tmp_path, input_format="monitor")
    db = tmp_path / "ours" / "monitor_data.trend.db"
    assert query(db, "SELECT min_step, max_step FROM global_stats") == [(0, -1)]


@pytest.mark.parametrize(
    ("rows", "step", "micro_step", "reached"),
    [
        (f"0,a,0,{INT64_MAX},1.0\n0,a,1,0,1.0\n", 0, INT64_MAX, 2**63),  # the next step starts beyond
        (f"0,a,0,0,1.0\n0,a,1,{INT64_MAX},1.0\n", 1, INT64_MAX, 2**63),  # the last slot is beyond
        ("".join(f"0,a,{step},{2**62},1.0\n" for step in range(3)), 1, 2**62, 2**63 + 2),
    ],
)
def test_monitor_micro_step_slots_beyond_64_bits_name_the_file(tmp_path, rows, step, micro_step, reached):
    """msprobe ends these in an OverflowError traceback; Arrow's int64 once wrapped the count around silently."""
    write_run(tmp_path / "data", {"actv_0-0.csv": HEADER + rows})
    result = invoke("run", tmp_path / "data", "--db", tmp_path / "out", "-j", "1")
    assert (result.exit_code, result.stderr) == (
        1,
        f"error: {RUN}/actv_0-0.csv: step {step}, micro_step {micro_step}: with the micro-step slots of the steps "
        f"before, the global steps reach {reached}, beyond a 64-bit integer (--no-micro-step keeps the original "
        "step numbers)\n",
    )
    plain = invoke("run", tmp_path / "data", "--db", tmp_path / "plain", "--no-micro-step", "-j", "1", "-q")
    assert (plain.exit_code, plain.stderr) == (0, "")


def test_micro_step_counts_do_not_wrap_around():
    columns = {
        "target_name": pa.array(["a", "a", "b"]),
        "step": pa.array([0, 1, 1], pa.int64()),
        "micro_step": pa.array([INT64_MAX, -(2**63), 3], pa.int64()),
    }
    assert MonitorRows(columns, [], True).micro_steps_per_step() == [[0, 2**63], [1, 4]]


def test_long_monitor_lines_match_the_reference(tmp_path):
    """A 5 MB name (longer than Arrow's block), one with a short row too (Python csv's 128 KiB field limit), a
    300 KB header, a number of 5 million digits (more than Python's int() reads: pandas keeps the column as text),
    lines ended by a bare carriage return (pandas ends lines there too)."""
    name = "x" * 5_000_000
    write_run(
        tmp_path / "data",
        {
            "actv_0-0.csv": HEADER + f"0,a,0,0,1.0\n0,{name},0,0,2.0\n0,b,1,0,3.0\n",
            "actv_1-1.csv": HEADER + f"0,a,1,0,1.0\n0,{name}y,1,0,2.0\n0,b,1\n",
            "grad_reduced_0-0.csv": "vpp_stage,name,step,norm," + "y" * 300_000 + "\n0,w,0,1.0,2\n",
            "grad_reduced_1-1.csv": f"vpp_stage,name,step,norm\n0,w,{'9' * 5_000_000},1.0\n0,v,1,2.0\n",
            "other_0-0.csv": "vpp_stage,name,step,norm\r0,m,0,1.0\r",
        },
    )
    same_as_reference(tmp_path / "data", tmp_path, input_format="monitor")
    rows = query(tmp_path / "ours" / "monitor_data.trend.db", "SELECT count(*) FROM trend_data")
    assert rows == [(8,)]


def test_integer_cells_beyond_python_int_are_text():
    column = pa.array(["1", "9" * 4301])
    assert (rules.column_kind(column), rules.integer_values(column).to_pylist()) == (rules.TEXT, [1, None])
    assert rules.column_kind(pa.array(["1", "-" + "9" * 4300])) == rules.INT


# --- --mapping values ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_a_mapping_value_that_is_a_bare_token_is_a_usage_error(a1_data, tmp_path, value):
    mapping = tmp_path / "mapping.json"
    mapping.write_text(f'{{".TE": ".", "a": {value}}}')
    result = invoke("run", a1_data, "--db", tmp_path / "out", "--mapping", mapping)
    assert (result.exit_code, result.stderr) == (
        2,
        f'error: {mapping}: a mapping must be a JSON object of strings, like {{".TE": "."}}\n',
    )


def test_a_mapping_value_that_is_the_string_nan_is_a_string(a1_data, tmp_path):
    mapping = tmp_path / "mapping.json"
    mapping.write_text('{"a": "NaN"}')
    assert api.load_mapping(mapping) == (("a", "NaN"),)


# --- names that are not UTF-8 ---------------------------------------------------------------------------------------

NOT_UTF8 = "not a UTF-8 path (the bytes shown as \\udcXX); rename it"


def shown(path: Path) -> str:
    """PATH as stderr shows it: byte 0xff, \\udcff to Python, as those six characters."""
    return str(path).encode(errors="backslashreplace").decode()


@pytest.mark.parametrize(
    ("command", "named"),
    [
        ("run DATA --db out -q", "DATA"),
        ("run data --db OUT -q", "OUT"),
        ("parse data --work OUT -q", "OUT"),
        ("load out/.trendconv --db OUT -q", "OUT"),
        ("data2db --data DATA --db out", "DATA"),
    ],
)
def test_a_path_argument_that_is_not_utf8_is_a_usage_error(dump_and_monitor, tmp_path, command, named):
    """Byte 0xff in a name (Python's \\udcff): Arrow and SQLite take UTF-8 paths only, and work.json records DATA."""
    invoke("run", dump_and_monitor, "--db", tmp_path / "out", "-j", "1", "-q")
    odd = {"DATA": tmp_path / "dat\udcffa", "OUT": tmp_path / "ou\udcfft"}
    shutil.copytree(dump_and_monitor, odd["DATA"])
    paths = {"data": dump_and_monitor, "out": tmp_path / "out", "out/.trendconv": tmp_path / "out" / ".trendconv"}
    result = invoke(*(odd.get(word) or paths.get(word, word) for word in command.split()))
    assert (result.exit_code, result.stderr) == (2, f"error: {shown(odd[named])}: {NOT_UTF8}\n")
    assert not odd["OUT"].exists()


@pytest.mark.parametrize(
    ("run", "name"), [(f"{RUN[:-1]}\udcff", "grad_reduced_0-1.csv"), (RUN, "grad_reduced_0-1.csv.bak\udcff")]
)
def test_a_monitor_name_that_is_not_utf8_is_a_data_error(tmp_path, run, name):
    """msprobe data2db fails on these too; a name that is no metric CSV file's is skipped, whatever its bytes."""
    write_run(tmp_path / "data", {name: GRAD, "grad_reduced\udcff_0-1.csv": GRAD}, run=run)
    result = invoke("run", tmp_path / "data", "--db", tmp_path / "out", "-j", "1", "-q")
    named = tmp_path / "data" / run / name if run == RUN else tmp_path / "data" / run
    assert (result.exit_code, result.stderr) == (1, f"error: {shown(named)}: {NOT_UTF8}\n")


@pytest.mark.parametrize("text", ['{"net": "\\ud800"}', '{"n\\udfffet": "."}'])
def test_a_mapping_string_with_a_lone_surrogate_is_a_usage_error(a1_data, tmp_path, text):
    """Python's JSON reader takes the escape; encoding the string later failed as an internal error (msprobe fails
    with a UnicodeEncodeError)."""
    mapping = tmp_path / "mapping.json"
    mapping.write_text(text)
    result = invoke("run", a1_data, "--db", tmp_path / "out", "--mapping", mapping)
    assert (result.exit_code, result.stderr) == (
        2,
        f"error: {mapping}: a mapping string holds a lone surrogate escape (\\ud800 to \\udfff)\n",
    )
