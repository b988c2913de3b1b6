"""`trendconv run --follow` (docs/live.md): a simulated training job writes steps while the follower runs; a reader
connection opened once and kept sees each batch; SIGKILL and a restart, Ctrl-C, arrivals out of order; and when the
follower stops, the database equals a batch `trendconv run` of the same data."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import PLUGIN_STATEMENTS, invoke, query, run_cli

from datagen.dump import generate as generate_dump
from datagen.monitor import generate as generate_monitor

WAIT = 60
POLL = "0.2"


class Follower:
    """`trendconv run DATA --db OUT --follow` in a session of its own, as from a terminal."""

    def __init__(self, tmp: Path, data: Path, out: Path, *args: str, fault: str | None = None):
        self.marker, self.out, self.err = tmp / "paused", tmp / "follow.stdout", tmp / "follow.stderr"
        env = {**os.environ, "TRENDCONV_FAULT_MARKER": str(self.marker)}
        env.pop("TRENDCONV_FAULT", None)
        if fault:
            env["TRENDCONV_FAULT"] = fault
        command = [sys.executable, "-m", "trendconv", "run", str(data), "--db", str(out), "--follow", "--poll", POLL]
        with open(self.out, "w") as stdout, open(self.err, "w") as stderr:
            self.process = subprocess.Popen(
                [*command, *args], env=env, stdout=stdout, stderr=stderr, start_new_session=True
            )

    def stop(self) -> int:
        """Ctrl-C, as a terminal sends it (to the whole process group)."""
        os.killpg(self.process.pid, signal.SIGINT)
        return self.process.wait(WAIT)

    def paused(self) -> None:
        wait_for(lambda: self.marker.is_file() and self.marker.read_text(), self)

    @property
    def stdout(self) -> str:
        return self.out.read_text()

    @property
    def stderr(self) -> str:
        return self.err.read_text()


def following(tmp_path: Path, *args: str, **kwargs) -> tuple[Path, Path, Follower]:
    """An empty DATA, the output directory beside it, and a follower of the two (ARGS and KWARGS: the Follower's)."""
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    return data, out, Follower(tmp_path, data, out, *args, **kwargs)


def wait_for(condition, follower: Follower | None = None) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, follower.stderr if follower else "timed out"
        if follower is not None:
            assert follower.process.poll() is None, follower.stderr
        time.sleep(0.05)


def mark(db: Path) -> int:
    """The batch the database holds (docs/live.md §4); 0 where there is none. Opened read-only: the follower may
    rename the file between a listing and this open, and a plain connect would create an empty file at the old
    name, which the next listing then shows."""
    try:
        with contextlib.closing(sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)) as conn:
            return conn.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.OperationalError:  # not there (any more)
        return 0


def write_step(full: Path, data: Path, step: int) -> None:
    """The training job writes step STEP of every rank."""
    shutil.copytree(full / f"step{step}", data / f"step{step}")


def batch_db(full: Path, out: Path, *args: str) -> Path:
    assert run_cli("run", full, "--db", out, "-q", *args).returncode == 0
    return out / "dump_data.trend.db"


def diff_ids(a: Path, b: Path) -> subprocess.CompletedProcess:
    return run_cli("diff", "--ids", a, b)


def rows(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT count(*) FROM trend_data").fetchone()[0]


@pytest.fixture(scope="module")
def dump_full(tmp_path_factory) -> Path:
    full = tmp_path_factory.mktemp("job") / "full"
    generate_dump(full, steps=3, ranks=2, layers=1)
    return full


@pytest.mark.parametrize("mode", ["--micro-step", "--no-micro-step"])
def test_steps_appended_in_place_are_seen_by_a_kept_reader(tmp_path, dump_full, mode):
    data, out, follower = following(tmp_path, mode)
    db = out / "dump_data.trend.db"
    write_step(dump_full, data, 0)
    wait_for(lambda: mark(db) == 1, follower)
    reader = sqlite3.connect(db)  # the plugin's one connection, opened at start-up and kept
    inode = db.stat().st_ino
    first_rows = reader.execute("SELECT count(*) FROM trend_data").fetchone()[0]
    bounds = [reader.execute(PLUGIN_STATEMENTS["S3"][0]).fetchone()]
    for step in (1, 2):
        write_step(dump_full, data, step)
        wait_for(lambda step=step: mark(db) == step + 1, follower)
        bounds.append(reader.execute(PLUGIN_STATEMENTS["S3"][0]).fetchone())
        last_step = bounds[-1][2]
        heat_map = reader.execute(
            "SELECT count(*) FROM trend_data t JOIN monitoring_targets m ON t.target_id = m.target_id "
            "WHERE t.metric_id = 1 AND t.step = ?",
            (last_step,),
        ).fetchone()[0]
        assert heat_map > 0
        assert reader.execute("SELECT count(*) FROM global_stats").fetchone() == (1,)
    total = reader.execute("SELECT count(*) FROM trend_data").fetchone()[0]
    assert follower.stop() == 0
    # micro-step mode: 2 micro steps + the step's own slot per step (datagen's megatron model); else the steps
    if mode == "--micro-step":
        assert [bound[:2] for bound in bounds] == [(1, 0)] * 3
        assert [bound[2] for bound in bounds] == sorted({bound[2] for bound in bounds})
    else:
        assert bounds == [(1, 0, 0), (1, 0, 1), (1, 0, 2)]
    assert follower.stdout == (
        f"{db}: stopped following with 6 file sets in; 2 batches appended ({total - first_rows:,} rows)\n"
    )
    assert follower.stderr.splitlines()[0] == f"{db}: made from 2 file sets, {first_rows:,} rows (batch 1)"
    assert db.stat().st_ino == inode
    assert reader.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    reader.close()
    batch = batch_db(dump_full, tmp_path / "batch", mode)
    assert diff_ids(batch, db).stdout == "logically identical\n"


def test_a_step_that_comes_late_rebuilds_the_database_in_place(tmp_path, dump_full):
    data, out, follower = following(tmp_path)
    db = out / "dump_data.trend.db"
    for number, step in enumerate((0, 2, 1), start=1):
        write_step(dump_full, data, step)
        wait_for(lambda number=number: mark(db) == number, follower)
        if number == 1:
            reader = sqlite3.connect(db)
            inode = db.stat().st_ino
    assert (
        reader.execute(PLUGIN_STATEMENTS["S3"][0]).fetchone()
        == reader.execute("SELECT 1, 0, max(step) FROM trend_data").fetchone()
    )
    assert follower.stop() == 0
    lines = follower.stderr.splitlines()
    assert lines[2] == (
        f"{db}: rebuilt in place with 2 file sets more (step 1, rank 0 came after step 2, rank 1), "
        f"{rows(db):,} rows (batch 3)"
    )
    assert follower.stdout.endswith(f"1 batch appended ({rows(db) // 3:,} rows), 1 rebuild in place\n")
    assert db.stat().st_ino == inode
    reader.close()
    batch = batch_db(dump_full, tmp_path / "batch")
    assert diff_ids(batch, db).stdout == "logically identical\n"


@pytest.mark.parametrize("fault", ["follow-commit", "follow-committed"])
def test_killed_at_a_commit_the_same_command_continues(tmp_path, dump_full, fault):
    """SIGKILL just before a batch commits (rolled back) or just after (kept, never converted again)."""
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    db = out / "dump_data.trend.db"
    # follow-commit is passed by appends only; follow-committed also by the batch that made the database
    follower = Follower(tmp_path, data, out, fault=f"{fault}@1" if fault == "follow-commit" else f"{fault}@2")
    write_step(dump_full, data, 0)
    wait_for(lambda: mark(db) == 1, follower)
    first_rows = rows(db)
    write_step(dump_full, data, 1)
    assert follower.process.wait(WAIT) == -signal.SIGKILL
    expected = 1 if fault == "follow-commit" else 2
    assert mark(db) == expected  # a reader opening it now rolls back an unfinished batch
    assert rows(db) == first_rows * expected
    again = Follower(tmp_path, data, out, "--stop-after-idle", "1")
    assert again.process.wait(WAIT) == 0, again.stderr
    appended = f"1 batch appended ({first_rows:,} rows)" if expected == 1 else "0 batches appended (0 rows)"
    assert again.stdout == f"{db}: stopped following with 4 file sets in; {appended}\n"
    partial = tmp_path / "partial"
    for step in (0, 1):
        write_step(dump_full, partial, step)
    assert diff_ids(batch_db(partial, tmp_path / "batch"), db).stdout == "logically identical\n"


def test_ctrl_c_during_a_batch_stops_after_it(tmp_path, dump_full):
    data, out, follower = following(tmp_path, fault="follow-commit:pause")
    db = out / "dump_data.trend.db"
    write_step(dump_full, data, 0)
    wait_for(lambda: mark(db) == 1, follower)
    write_step(dump_full, data, 1)
    follower.paused()
    assert follower.stop() == 0
    assert mark(db) == 2
    assert "interrupted" not in follower.stderr
    assert follower.stdout.startswith(f"{db}: stopped following with 4 file sets in; 1 batch appended (")


def test_a_reader_that_holds_the_database_makes_a_batch_wait_and_ctrl_c_stops_without_it(tmp_path, dump_full):
    """A reader in a read transaction holds up a commit: the wait is said once; it ends when the reader does, or
    by Ctrl-C, which rolls the batch back (exit 0); the same command later converts it."""
    data, out, follower = following(tmp_path)
    db = out / "dump_data.trend.db"
    write_step(dump_full, data, 0)
    wait_for(lambda: mark(db) == 1, follower)
    first_rows = rows(db)
    reader = sqlite3.connect(db, isolation_level=None)
    waiting = (
        f"warning: {db}: waiting for a reader that holds the database to end its read (readers that start now "
        "wait too); Ctrl-C stops the follower without this batch"
    )
    for step, waits in ((1, 1), (2, 2)):
        reader.execute("BEGIN")
        assert reader.execute("SELECT count(*) FROM trend_data").fetchone() == (first_rows * step,)
        write_step(dump_full, data, step)
        wait_for(lambda waits=waits: follower.stderr.splitlines().count(waiting) == waits, follower)
        if step == 1:
            reader.execute("COMMIT")
            wait_for(lambda: mark(db) == 2, follower)
    assert follower.stop() == 0
    reader.execute("COMMIT")
    assert (mark(db), rows(db)) == (2, first_rows * 2)
    assert "interrupted" not in follower.stderr
    assert follower.stdout == f"{db}: stopped following with 4 file sets in; 1 batch appended ({first_rows:,} rows)\n"
    again = Follower(tmp_path, data, out, "--stop-after-idle", "1")
    assert again.process.wait(WAIT) == 0, again.stderr
    assert again.stdout == f"{db}: stopped following with 6 file sets in; 1 batch appended ({first_rows:,} rows)\n"
    assert reader.execute("SELECT count(*) FROM trend_data").fetchone() == (first_rows * 3,)
    reader.close()
    assert diff_ids(batch_db(dump_full, tmp_path / "batch"), db).stdout == "logically identical\n"


def test_stopped_while_a_reader_holds_a_renamed_file_the_output_record_knows_its_name(tmp_path, dump_full):
    """A file of a split renamed as its steps grew, then its append held up by a reader and Ctrl-C: the output's
    record names the file by its new name, so a later `run` replaces it as its own, without a warning."""
    data, out, follower = following(tmp_path, "--split-steps", "2")
    db = out / "dump_data.trend.db"
    write_step(dump_full, data, 0)
    write_rank(dump_full, data, 1, 0)
    wait_for(lambda: mark(db) == 1, follower)
    reader = sqlite3.connect(db, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM trend_data").fetchone()
    write_rank(dump_full, data, 1, 1)  # appended to the first file, renamed as step 2 starts the next one
    write_step(dump_full, data, 2)
    wait_for(lambda: "waiting for a reader" in follower.stderr, follower)
    assert follower.stop() == 0
    reader.close()
    assert databases(out) == ["dump_data.steps-000000-000001.trend.db"]
    again = run_cli("run", dump_full, "--db", out, "--work", tmp_path / "work2", "-q")
    assert (again.returncode, again.stderr) == (0, "")
    assert databases(out) == ["dump_data.trend.db"]


@pytest.mark.parametrize("name", ["dump.json", "construct.json"])
def test_a_file_set_that_does_not_parse_waits_and_the_summary_names_its_file(tmp_path, dump_full, name):
    """The warning and the stop summary name the file that does not parse (not a shard, not another file of the
    set); the file set, written again whole, goes in when the same command runs again."""
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    db = out / "dump_data.trend.db"
    write_step(dump_full, data, 0)
    broken = data / "step0" / "rank0" / name
    broken.write_bytes(broken.read_bytes()[:300])
    refused = run_cli("run", data, "--db", tmp_path / "refused", "-q")
    assert refused.returncode == 1
    assert refused.stderr.startswith(f"error: {broken}: invalid JSON: ")
    follower = Follower(tmp_path, data, out)
    wait_for(lambda: mark(db) == 1, follower)
    assert follower.stop() == 0
    assert follower.stdout == (
        f"{db}: stopped following with 1 file set in; 0 batches appended (0 rows)\n"
        f"  not converted (files that do not parse): {broken}\n"
    )
    reason = refused.stderr.removeprefix("error: ").rstrip()
    warning = f"warning: {reason}; not converted, waiting for its files to change"
    assert follower.stderr.splitlines().count(warning) == 1
    shutil.copy(dump_full / "step0" / "rank0" / name, broken)
    again = Follower(tmp_path, data, out, "--stop-after-idle", "1")
    assert again.process.wait(WAIT) == 0, again.stderr
    assert again.stdout == (
        f"{db}: stopped following with 2 file sets in; 0 batches appended (0 rows), 1 rebuild in place\n"
    )
    assert diff_ids(batch_db(data, tmp_path / "batch"), db).stdout == "logically identical\n"


def test_a_second_writer_of_a_followed_output_is_refused(tmp_path, dump_full):
    """WORK's lock does not cover a second follower or run with a WORK of its own: the output's lock does."""
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    db = out / "dump_data.trend.db"
    write_step(dump_full, data, 0)
    follower = Follower(tmp_path, data, out)
    wait_for(lambda: mark(db) == 1, follower)
    refused = (
        f"error: {db}: another trendconv process is writing this output (a follower, or a run with another WORK); "
        "wait until it stops, or choose another --db or --name\n"
    )
    other = tmp_path / "other"
    second = run_cli("run", data, "--db", out, "--work", other, "--follow", "--poll", POLL)
    assert (second.returncode, second.stdout, second.stderr) == (2, "", refused)
    batch = run_cli("run", data, "--db", out, "--work", other, "-q")
    assert (batch.returncode, batch.stdout, batch.stderr) == (2, "", refused)
    assert list(other.rglob("*.parquet")) == []  # refused before it parsed anything
    listed = [".dump_data.trend.db.files.json", ".dump_data.trend.db.lock", ".trendconv", "dump_data.trend.db"]
    assert sorted(path.name for path in out.iterdir()) == listed
    assert follower.stop() == 0
    assert mark(db) == 1
    assert sorted(path.name for path in out.iterdir()) == [name for name in listed if not name.endswith(".lock")]
    assert run_cli("run", data, "--db", out, "--work", other, "-q").returncode == 0  # the output is free again
    assert mark(db) == 0


@pytest.mark.parametrize("fmt", ["auto", "dump", "both"])
def test_data_that_goes_away_is_waited_for(tmp_path, dump_full, fmt):
    """One warning each time DATA goes, whatever the formats followed; the follower goes on when it is back."""
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    db = out / "dump_data.trend.db"
    write_step(dump_full, data, 0)
    if fmt == "both":
        generate_monitor(data, ranks=1, steps=1, layers=1)
    follower = Follower(tmp_path, data, out, "--format", "dump" if fmt == "dump" else "auto")
    wait_for(lambda: mark(db) == 1, follower)
    gone = f"warning: {data}: DATA is gone; the databases stay as they are, and the follower waits for it"
    for times in (1, 2):
        data.rename(tmp_path / "away")
        wait_for(lambda times=times: follower.stderr.splitlines().count(gone) == times, follower)
        (tmp_path / "away").rename(data)
        write_step(dump_full, data, times)
        wait_for(lambda times=times: mark(db) == times + 1, follower)
    assert follower.stop() == 0
    dump_line = f"{db}: stopped following with 6 file sets in; 2 batches appended ({rows(db) * 2 // 3:,} rows)"
    assert follower.stdout.splitlines()[0] == dump_line
    assert follower.stderr.splitlines().count(gone) == 2


def test_data_gone_before_any_data_appeared(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    follower = Follower(tmp_path, data, tmp_path / "out")
    time.sleep(0.5)
    data.rmdir()
    gone = f"warning: {data}: DATA is gone; the databases stay as they are, and the follower waits for it"
    wait_for(lambda: gone in follower.stderr.splitlines(), follower)
    assert follower.stop() == 0
    assert (
        follower.stdout == f"{data}: stopped following with nothing converted: no dump or monitor data appeared in it\n"
    )


def test_a_format_whose_output_another_process_writes_is_left_and_the_rest_followed(tmp_path, dump_full):
    """With --format auto, monitor data that appears while another follower writes the monitor output: a warning,
    and the dump data is still followed (the first format found is refused outright, as any command)."""
    data, other_data, out = tmp_path / "data", tmp_path / "other", tmp_path / "out"
    data.mkdir()
    db = out / "dump_data.trend.db"
    generate_monitor(other_data, ranks=1, steps=1, layers=1)
    (tmp_path / "second").mkdir()
    write_step(dump_full, data, 0)
    follower = Follower(tmp_path, data, out)
    wait_for(lambda: mark(db) == 1, follower)
    other = Follower(tmp_path / "second", other_data, out, "--work", tmp_path / "work2", "--format", "monitor")
    wait_for(lambda: mark(out / "monitor_data.trend.db") == 1, other)
    generate_monitor(data, ranks=1, steps=1, layers=1)
    refused = (
        f"warning: {out}/monitor_data.trend.db: another trendconv process is writing this output (a follower, or a "
        "run with another WORK); wait until it stops, or choose another --db or --name; its monitor data is not "
        "followed"
    )
    wait_for(lambda: refused in follower.stderr.splitlines(), follower)
    write_step(dump_full, data, 1)
    wait_for(lambda: mark(db) == 2, follower)
    assert follower.stop() == 0
    assert other.stop() == 0
    assert (
        follower.stdout == f"{db}: stopped following with 4 file sets in; 1 batch appended ({rows(db) // 2:,} rows)\n"
    )
    assert follower.stderr.splitlines().count(refused) == 1


def test_a_follower_that_finds_nothing_says_so(tmp_path, dump_full):
    empty, out = tmp_path / "empty", tmp_path / "out"
    empty.mkdir()
    idle = ("--follow", "--poll", POLL, "--stop-after-idle", "0.5")
    nothing = run_cli("run", empty, "--db", out, *idle)
    assert (nothing.returncode, nothing.stdout, nothing.stderr) == (
        0,
        f"{empty}: stopped following with nothing converted: no dump or monitor data appeared in it\n",
        "",
    )
    other = run_cli("run", dump_full, "--db", out, "--format", "monitor", *idle)
    assert (other.returncode, other.stdout, other.stderr) == (
        0,
        f"{out}/monitor_data.trend.db: stopped following with 0 monitor CSV files in; 0 batches appended (0 rows)\n",
        f"warning: {dump_full}: holds dump data, which --format monitor does not follow: use --format dump\n",
    )


def test_a_rank_directory_without_its_dump_file_is_named_when_the_follower_stops(tmp_path, dump_full):
    """As `run` warns of it; not while it follows, as a rank's directory is there before its files are."""
    data, out = tmp_path / "data", tmp_path / "out"
    shutil.copytree(dump_full, data)
    (data / "step1" / "rank1" / "dump.json").unlink()
    warning = f"warning: No 'dump.json' file found in: {data / 'step1' / 'rank1'}"
    batch = run_cli("run", data, "--db", tmp_path / "batch", "-q")
    assert (batch.returncode, batch.stderr) == (0, warning + "\n")
    followed = run_cli("run", data, "--db", out, "--follow", "--poll", POLL, "--stop-after-idle", "0.5")
    assert followed.returncode == 0
    assert followed.stderr.splitlines() == [
        f"{out}/dump_data.trend.db: made from 5 file sets, {rows(out / 'dump_data.trend.db'):,} rows (batch 1)",
        warning,
    ]


def test_poll_without_follow_is_a_usage_error(tmp_path):
    done = run_cli("run", tmp_path, "--db", tmp_path / "out", "--poll", "1")
    assert (done.returncode, done.stderr) == (2, "error: --poll and --stop-after-idle go with --follow\n")


def test_monitor_files_appended_step_by_step(tmp_path):
    full, data, out = tmp_path / "full", tmp_path / "data", tmp_path / "out"
    runs = generate_monitor(full, ranks=2, steps=3, layers=1).runs
    data.mkdir()
    db = out / "monitor_data.trend.db"
    follower = Follower(tmp_path, data, out)
    answers = []
    for step in range(3):
        for _, run in runs:
            (data / run).mkdir(exist_ok=True)
            for csv in (full / run).glob(f"*_{step}-{step}.csv"):
                shutil.copy(csv, data / run / csv.name)
        wait_for(lambda step=step: mark(db) == step + 1, follower)
        if step == 0:
            reader = sqlite3.connect(db)
        tags = reader.execute(PLUGIN_STATEMENTS["S6b"][0], {"metric": 1}).fetchall()
        answers.append((reader.execute(PLUGIN_STATEMENTS["S3"][0]).fetchone(), len(tags) > 0))
    assert follower.stop() == 0
    reader.close()
    steps = [bounds for bounds, _ in answers]
    assert [bounds[:2] for bounds in steps] == [(1, 0)] * 3 and all(found for _, found in answers)
    assert steps[0][2] < steps[1][2] < steps[2][2]
    assert run_cli("run", full, "--db", tmp_path / "batch", "-q").returncode == 0
    assert diff_ids(tmp_path / "batch" / "monitor_data.trend.db", db).stdout == "logically identical\n"


def heat_map_of_last_step(server) -> tuple[int, int]:
    """What the page shows after a refresh: the last step of its step list, and the cells of that step's heat map
    for the first metric and stat."""
    metric = server.ask("metrics")["data"][0]
    name, stat = metric["name"], metric["stats"][0]
    steps = server.ask("values", {"metric": name, "stat": stat, "dimension": "step", "tags": []})["data"]
    last = list(steps)[-1]
    body = {"metric": name, "stat": stat, "dimension": "step", "value": last, "tags": []}
    return int(last), len(server.ask("heatmap_data", body)["data"])


def last_step_in(db: Path) -> tuple[int, int]:
    """The same from the database: global_stats' last step, and the first metric's rows there."""
    with sqlite3.connect(db) as conn:
        (last,) = conn.execute(PLUGIN_STATEMENTS["S3"][0]).fetchone()[2:]
        cells = conn.execute("SELECT count(*) FROM trend_data WHERE metric_id = 1 AND step = ?", (last,)).fetchone()
    return last, cells[0]


@pytest.mark.reference
def test_the_trend_analyzer_shows_appended_steps_without_a_restart(tmp_path, dump_full):
    """The real plugin (docs/trend-db.md §6), started once on the follower's database: each refresh shows the
    steps appended since, and a rebuild in place too."""
    from reference import tensorboard_executable

    from benchmarks.plugin import PluginServer

    data, out, follower = following(tmp_path)
    db = out / "dump_data.trend.db"
    write_step(dump_full, data, 0)
    wait_for(lambda: mark(db) == 1, follower)
    shown, stored = [], []
    with PluginServer(tensorboard_executable(), out, tmp_path) as server:
        for number, step in enumerate((None, 2, 1), start=1):  # step 1 comes late: the database is rebuilt in place
            if step is not None:
                write_step(dump_full, data, step)
                wait_for(lambda number=number: mark(db) == number, follower)
            shown.append(heat_map_of_last_step(server))
            stored.append(last_step_in(db))
    assert follower.stop() == 0
    assert shown == stored
    assert stored[0][0] < stored[1][0] < stored[2][0] and all(cells for _, cells in stored)


def test_follow_refuses_load_workers(tmp_path):
    result = invoke("run", tmp_path, "--db", tmp_path / "out", "--follow", "--split-steps", "2", "--load-workers", "2")
    assert (result.exit_code, result.stderr) == (
        2,
        "error: --follow writes one database at a time: --load-workers cannot go with it\n",
    )


# ---- split output (docs/live.md §7)

SPLIT_PARTS = [
    "dump_data.steps-000000-000001.trend.db",
    "dump_data.steps-000002-000003.trend.db",
    "dump_data.steps-000004-000004.trend.db",
]


@pytest.fixture(scope="module")
def dump_five(tmp_path_factory) -> Path:
    full = tmp_path_factory.mktemp("job5") / "full"
    generate_dump(full, steps=5, ranks=2, layers=1)
    return full


def databases(out: Path) -> list[str]:
    return sorted(path.name for path in out.glob("*.trend.db"))


def last_mark(out: Path) -> int:
    """The last batch any database of OUT holds."""
    return max(map(mark, out.glob("*.trend.db")), default=0)


def write_rank(full: Path, data: Path, step: int, rank: int) -> None:
    """The training job writes one rank of step STEP."""
    shutil.copytree(full / f"step{step}" / f"rank{rank}", data / f"step{step}" / f"rank{rank}")


def same_as_batch(full: Path, out: Path, tmp: Path, *args: str) -> None:
    """The follower's files are those `trendconv run` with the same options makes of FULL: the same names, and
    `diff` of the two sets exits 0."""
    batch = tmp / "batch"
    assert run_cli("run", full, "--db", batch, "-q", *args).returncode == 0
    assert databases(out) == databases(batch)
    done = run_cli("diff", batch, out)
    assert (done.returncode, done.stdout) == (0, "logically identical\n"), done.stdout + done.stderr


def same_as_batch_of(full: Path, steps: tuple[int, ...], out: Path, tmp: Path, *args: str) -> None:
    """`same_as_batch` of a DATA that holds only STEPS of FULL."""
    partial = tmp / "partial"
    for step in steps:
        write_step(full, partial, step)
    same_as_batch(partial, out, tmp, *args)


def without_rows(line: str) -> str:
    """A batch line without its row count (which depends on datagen's model)."""
    return line.split(",")[0] if ", " in line and "rows (batch" in line else line


@pytest.mark.parametrize("mode", ["--micro-step", "--no-micro-step"])
def test_split_steps_starts_the_next_file_when_a_range_closes(tmp_path, dump_five, mode):
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    first = out / "dump_data.trend.db"
    follower = Follower(tmp_path, data, out, mode, "--split-steps", "2")
    write_step(dump_five, data, 0)
    wait_for(lambda: mark(first) == 1, follower)
    reader = sqlite3.connect(first)  # the plugin's connection to the first file, kept throughout
    inode = first.stat().st_ino
    write_step(dump_five, data, 1)
    wait_for(lambda: mark(first) == 2, follower)
    names = [databases(out)]
    for step in (2, 3, 4):
        write_step(dump_five, data, step)
        wait_for(lambda step=step: last_mark(out) == step + 1, follower)
        names.append(databases(out))
    assert follower.stop() == 0
    assert names == [["dump_data.trend.db"], SPLIT_PARTS[:1] + ["dump_data.steps-000002-000002.trend.db"]] + [
        SPLIT_PARTS[:2],
        SPLIT_PARTS,
    ]
    closed = out / SPLIT_PARTS[0]
    assert closed.stat().st_ino == inode  # renamed, never replaced: the reader still has it
    assert reader.execute("SELECT count(*) FROM trend_data").fetchone()[0] == rows(closed)
    reader.close()
    lines = [without_rows(line) for line in follower.stderr.splitlines()]
    assert lines == [
        f"{first}: made from 2 file sets",
        f"{first}: appended 2 file sets",
        f"{first}: renamed to {SPLIT_PARTS[0]}, as its steps now name it",
        f"{out}/dump_data.steps-000002-000002.trend.db: made from 2 file sets",
        f"{out}/dump_data.steps-000002-000002.trend.db: renamed to {SPLIT_PARTS[1]}, as its steps now name it",
        f"{out / SPLIT_PARTS[1]}: appended 2 file sets",
        f"{out / SPLIT_PARTS[2]}: made from 2 file sets",
    ]
    assert follower.stdout.startswith(
        f"{out / SPLIT_PARTS[0]} … {SPLIT_PARTS[2]} (3 databases): stopped following with 10 file sets in; "
        "2 batches appended ("
    )
    same_as_batch(dump_five, out, tmp_path, mode, "--split-steps", "2")


def test_a_late_rank_into_a_closed_file_rebuilds_it_in_place(tmp_path, dump_five):
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    closed = out / SPLIT_PARTS[0]
    follower = Follower(tmp_path, data, out, "--split-steps", "2")
    write_rank(dump_five, data, 0, 0)
    for step in (1, 2):
        write_step(dump_five, data, step)
    wait_for(lambda: mark(out / "dump_data.steps-000002-000002.trend.db") == 2, follower)
    reader = sqlite3.connect(closed)
    before = reader.execute("SELECT count(*) FROM trend_data WHERE rank = 1").fetchone()[0]
    write_rank(dump_five, data, 0, 1)
    wait_for(lambda: mark(closed) == 3, follower)
    after = reader.execute("SELECT count(*) FROM trend_data WHERE rank = 1").fetchone()[0]
    assert follower.stop() == 0
    reader.close()
    assert before < after
    assert follower.stderr.splitlines()[2] == (
        f"{closed}: rebuilt in place with 1 file set more (step 0, rank 1 came after step 1, rank 1), "
        f"{rows(closed):,} rows (batch 3)"
    )
    same_as_batch_of(dump_five, (0, 1, 2), out, tmp_path, "--split-steps", "2")


def test_max_db_size_closes_a_file_and_a_late_rank_regroups_the_files(tmp_path, dump_five):
    """Each step of 2 ranks is 2,654 rows, 424,640 bytes at the split's 160 a row, and a database's tables take
    77,824: 777,824 bytes hold a step and a half. Step 1's late rank makes it whole, and the files regroup as the
    batch split groups them."""
    data, out, follower = following(tmp_path, "--max-db-size", "777824")
    write_step(dump_five, data, 0)
    wait_for(lambda: mark(out / "dump_data.trend.db") == 1, follower)
    write_rank(dump_five, data, 1, 0)
    wait_for(lambda: mark(out / "dump_data.trend.db") == 2, follower)
    write_step(dump_five, data, 2)
    two = ["dump_data.steps-000000-000001.trend.db", "dump_data.steps-000002-000002.trend.db"]
    wait_for(lambda: databases(out) == two, follower)
    kept = out / two[0]
    inode = kept.stat().st_ino
    write_rank(dump_five, data, 1, 1)
    three = [f"dump_data.steps-00000{step}-00000{step}.trend.db" for step in (0, 1, 2)]
    wait_for(lambda: databases(out) == three and not kept.exists(), follower)
    assert follower.stop() == 0
    assert (out / three[0]).stat().st_ino == inode  # the file of step 0 kept its inode through the regroup
    assert follower.stderr.splitlines()[-3:] == [
        f"{kept}: renamed to {three[0]}, as its steps now name it",
        f"{out / three[0]}: rebuilt in place with 0 file sets more (step1/rank0/dump.json now belongs in another "
        f"database of the split), {rows(out / three[0]):,} rows (batch 4)",
        f"{out / three[1]}: made from 2 file sets, {rows(out / three[1]):,} rows (batch 5)",
    ]
    same_as_batch_of(dump_five, (0, 1, 2), out, tmp_path, "--max-db-size", "777824")


def test_a_lower_step_that_comes_late_regroups_the_split(tmp_path, dump_five):
    """Steps 0, 2, 3 make [0, 2] and [3]; step 1 makes the batch split [0, 1] and [2, 3]: both files renamed and
    rebuilt in place (the second because its global steps moved), none removed or made."""
    data, out, follower = following(tmp_path, "--split-steps", "2")
    for number, step in enumerate((0, 2, 3), start=1):
        write_step(dump_five, data, step)
        wait_for(lambda number=number: last_mark(out) == number, follower)
    assert databases(out) == ["dump_data.steps-000000-000002.trend.db", "dump_data.steps-000003-000003.trend.db"]
    write_step(dump_five, data, 1)
    wait_for(lambda: last_mark(out) == 5, follower)
    assert follower.stop() == 0
    assert databases(out) == SPLIT_PARTS[:2]
    first, second = (out / name for name in SPLIT_PARTS[:2])
    assert follower.stderr.splitlines()[-4:] == [
        f"{out}/dump_data.steps-000000-000002.trend.db: renamed to {first.name}, as its steps now name it",
        f"{out}/dump_data.steps-000003-000003.trend.db: renamed to {second.name}, as its steps now name it",
        f"{first}: rebuilt in place with 2 file sets more (step2/rank0/dump.json now belongs in another database "
        f"of the split), {rows(first):,} rows (batch 4)",
        f"{second}: rebuilt in place with 2 file sets more (the micro-step slots of step 3 moved (a step before it "
        f"came late or grew)), {rows(second):,} rows (batch 5)",
    ]
    same_as_batch_of(dump_five, (0, 1, 2, 3), out, tmp_path, "--split-steps", "2")


def test_killed_in_the_middle_of_a_regroup_the_restart_completes_it(tmp_path, dump_five):
    """As above, SIGKILL once the first file is rebuilt: the second still holds step 3 at its old global steps.
    Its record says which, so the restart (with no new unit) rebuilds it, and converts nothing else again."""
    data, out, follower = following(tmp_path, "--split-steps", "2", fault="follow-committed@4")
    for number, step in enumerate((0, 2, 3), start=1):
        write_step(dump_five, data, step)
        wait_for(lambda number=number: last_mark(out) == number, follower)
    write_step(dump_five, data, 1)
    assert follower.process.wait(WAIT) == -signal.SIGKILL
    first, second = (out / name for name in SPLIT_PARTS[:2])
    assert databases(out) == SPLIT_PARTS[:2] and (mark(first), mark(second)) == (4, 3)
    again = Follower(tmp_path, data, out, "--split-steps", "2", "--stop-after-idle", "1")
    assert again.process.wait(WAIT) == 0, again.stderr
    assert again.stderr == (
        f"{second}: rebuilt in place with 2 file sets more (the micro-step slots of step 3 moved (a step before it "
        f"came late or grew)), {rows(second):,} rows (batch 5)\n"
    )
    assert sorted(path.name for path in (out / ".trendconv" / "dump").glob("follow-*.json")) == [
        "follow-4.json",
        "follow-5.json",
    ]
    same_as_batch_of(dump_five, (0, 1, 2, 3), out, tmp_path, "--split-steps", "2")


def test_ctrl_c_in_the_middle_of_a_regroup_stops_once_every_file_is_done(tmp_path, dump_five):
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    # follow-commit: step 2's append, then the regroup's rebuild of the first file (a file made anew has none)
    follower = Follower(tmp_path, data, out, "--split-steps", "2", fault="follow-commit@2:pause")
    for number, step in enumerate((0, 2, 3), start=1):
        write_step(dump_five, data, step)
        wait_for(lambda number=number: last_mark(out) == number, follower)
    write_step(dump_five, data, 1)
    follower.paused()
    assert follower.stop() == 0
    first, second = (out / name for name in SPLIT_PARTS[:2])
    assert databases(out) == SPLIT_PARTS[:2] and (mark(first), mark(second)) == (4, 5)
    assert "interrupted" not in follower.stderr
    same_as_batch_of(dump_five, (0, 1, 2, 3), out, tmp_path, "--split-steps", "2")


def test_a_follower_replaces_an_earlier_split_and_leaves_what_trendconv_did_not_write(tmp_path, dump_five):
    """A batch run's split by 2 is in OUT, with a file of the same pattern that no record names: the follower's
    split by 3 replaces the run's files as a set, and names the foreign one in a warning, once."""
    data, out = tmp_path / "data", tmp_path / "out"
    assert run_cli("run", dump_five, "--db", out, "-q", "--split-steps", "2").returncode == 0
    foreign = out / "dump_data.steps-000009-000009.trend.db"
    foreign.write_bytes(b"not ours")
    data.mkdir()
    for step in range(5):
        write_step(dump_five, data, step)
    follower = Follower(tmp_path, data, out, "--split-steps", "3", "--stop-after-idle", "1")
    assert follower.process.wait(WAIT) == 0, follower.stderr
    ours = ["dump_data.steps-000000-000002.trend.db", "dump_data.steps-000003-000004.trend.db"]
    assert databases(out) == sorted([*ours, foreign.name])
    warning = (
        f"warning: {foreign}: left in place, though this output does not include it: trendconv did not write it, or "
        f"it changed since; the Trend Analyzer lists it beside the new databases (`rm '{foreign}'` if it is stale)"
    )
    assert follower.stderr.splitlines().count(warning) == 1
    foreign.unlink()
    same_as_batch(dump_five, out, tmp_path, "--split-steps", "3")


def copy_monitor_step(full: Path, data: Path, run: str, step: int) -> int:
    """The monitor of one rank writes its CSV files of step STEP; how many."""
    (data / run).mkdir(exist_ok=True)
    files = list((full / run).glob(f"*_{step}-{step}.csv"))
    for csv in files:
        shutil.copy(csv, data / run / csv.name)
    return len(files)


def test_a_late_monitor_rank_into_a_closed_file_is_appended_there(tmp_path):
    """Rank 1's files of step 0 come after step 2 closed [0, 1]: their rows take the slots step 0 has, so the
    closed file takes them in place, and the next file is left as it is."""
    full, data, out = tmp_path / "full", tmp_path / "data", tmp_path / "out"
    (rank0, run0), (rank1, run1) = generate_monitor(full, ranks=2, steps=3, layers=1).runs
    assert (rank0, rank1) == (0, 1)
    data.mkdir()
    follower = Follower(tmp_path, data, out, "--split-steps", "2")
    for step in range(3):
        copy_monitor_step(full, data, run0, step)
        if step:
            copy_monitor_step(full, data, run1, step)
        wait_for(lambda step=step: last_mark(out) == step + 1, follower)
    closed, last = out / "monitor_data.steps-000000-000001.trend.db", out / "monitor_data.steps-000002-000002.trend.db"
    before = rows(closed)
    late = copy_monitor_step(full, data, run1, 0)
    wait_for(lambda: mark(closed) == 4, follower)
    assert follower.stop() == 0
    assert follower.stderr.splitlines()[-1] == (
        f"{closed}: appended {late} monitor CSV files, {rows(closed) - before:,} rows (batch 4)"
    )
    assert rows(closed) > before and mark(last) == 3
    assert databases(out) == [closed.name, last.name]
    same_as_batch(full, out, tmp_path, "--split-steps", "2")


@pytest.mark.parametrize("mode", ["--micro-step", "--no-micro-step"])
def test_monitor_files_followed_into_a_split(tmp_path, mode):
    full, data, out = tmp_path / "full", tmp_path / "data", tmp_path / "out"
    runs = generate_monitor(full, ranks=2, steps=3, layers=1).runs
    data.mkdir()
    follower = Follower(tmp_path, data, out, mode, "--split-steps", "2")
    for step in range(3):
        for _, run in runs:
            (data / run).mkdir(exist_ok=True)
            for csv in (full / run).glob(f"*_{step}-{step}.csv"):
                shutil.copy(csv, data / run / csv.name)
        wait_for(lambda step=step: last_mark(out) == step + 1, follower)
    assert follower.stop() == 0
    assert databases(out) == [
        "monitor_data.steps-000000-000001.trend.db",
        "monitor_data.steps-000002-000002.trend.db",
    ]
    same_as_batch(full, out, tmp_path, mode, "--split-steps", "2")


@pytest.mark.parametrize("fault", ["follow-committed@1", "load-before-rename@2"])
def test_killed_between_two_files_of_a_batch_the_same_command_completes_it(tmp_path, dump_five, fault):
    """The first batch makes two files: SIGKILL once the first is in (or just before the second is moved into
    place); the restart makes the second, and converts nothing twice."""
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    for step in (0, 1, 2):
        write_step(dump_five, data, step)
    follower = Follower(tmp_path, data, out, "--split-steps", "2", fault=fault)
    assert follower.process.wait(WAIT) == -signal.SIGKILL
    assert databases(out) == SPLIT_PARTS[:1]
    again = Follower(tmp_path, data, out, "--split-steps", "2", "--stop-after-idle", "1")
    assert again.process.wait(WAIT) == 0, again.stderr
    second = out / "dump_data.steps-000002-000002.trend.db"
    assert again.stderr == f"{second}: made from 2 file sets, {rows(second):,} rows (batch 2)\n"
    assert again.stdout == (
        f"{out / SPLIT_PARTS[0]} … {second.name} (2 databases): stopped following with 6 file sets in; "
        "0 batches appended (0 rows)\n"
    )
    same_as_batch_of(dump_five, (0, 1, 2), out, tmp_path, "--split-steps", "2")


def test_name_and_a_subset_follow_only_the_selection(tmp_path, dump_five):
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    args = ("--name", "runA", "--steps", "1-3", "--ranks", "1", "--split-steps", "2")
    follower = Follower(tmp_path, data, out, *args)
    for step in range(5):
        write_step(dump_five, data, step)
        if step in (1, 2, 3):
            wait_for(lambda step=step: last_mark(out) == step, follower)
    assert follower.stop() == 0
    assert databases(out) == [
        "runA.dump_data.steps-000001-000002.trend.db",
        "runA.dump_data.steps-000003-000003.trend.db",
    ]
    ranks = {rank for db in out.glob("*.trend.db") for (rank,) in query(db, "SELECT DISTINCT rank FROM trend_data")}
    assert ranks == {1}
    same_as_batch(dump_five, out, tmp_path, *args)


@pytest.mark.reference
def test_the_trend_analyzer_lists_each_new_file_of_a_split(tmp_path, dump_five):
    """The real plugin, started once on the follower's first file: its database menu lists each file as the
    split makes or renames it, the file it opened at start-up still answers after its rename, and the newest
    file can be switched to."""
    from reference import tensorboard_executable

    from benchmarks.plugin import PluginServer

    data, out, follower = following(tmp_path, "--split-steps", "2")
    write_step(dump_five, data, 0)
    wait_for(lambda: mark(out / "dump_data.trend.db") == 1, follower)
    expected = [
        ["dump_data.trend.db"],
        ["dump_data.trend.db"],
        [SPLIT_PARTS[0], "dump_data.steps-000002-000002.trend.db"],
        SPLIT_PARTS[:2],
        SPLIT_PARTS,
    ]
    listed = []
    with PluginServer(tensorboard_executable(), out, tmp_path) as server:
        listed.append(sorted(server.ask("db_files")["data"]))
        for step in (1, 2, 3, 4):
            write_step(dump_five, data, step)
            # the whole batch, not its first file: a batch marks each file it writes, one after the other
            wait_for(lambda step=step: last_mark(out) == step + 1 and databases(out) == expected[step], follower)
            listed.append(sorted(server.ask("db_files")["data"]))
        opened = heat_map_of_last_step(server)
        switched = server.ask("switch_db", {"db_filename": SPLIT_PARTS[2]})
        assert (switched["success"], switched.get("error")) == (True, None)
        newest = heat_map_of_last_step(server)
    assert follower.stop() == 0
    assert listed == expected
    assert opened == last_step_in(out / SPLIT_PARTS[0])
    assert newest == last_step_in(out / SPLIT_PARTS[2])


def test_the_python_api_follows_into_a_split(tmp_path, dump_five):
    import trendconv

    out, batches = tmp_path / "out", []
    [summary] = trendconv.follow(
        dump_five, out, split_steps=2, poll=0.1, stop_after_idle=0.3, workers=1, on_batch=batches.append
    )
    assert summary.files == [out / name for name in SPLIT_PARTS]
    assert (summary.db, summary.units, summary.appended, summary.rebuilt) == (out / SPLIT_PARTS[0], 10, 0, 0)
    assert [(batch.db.name, batch.units, batch.mark, batch.created) for batch in batches] == [
        (name, units, mark, True) for mark, (name, units) in enumerate(zip(SPLIT_PARTS, (4, 4, 2)), start=1)
    ]
    # docs/live.md §7: a load from the same WORK with the same split makes the set byte-identical to a batch run's
    trendconv.load(out / ".trendconv", out, split_steps=2)
    trendconv.convert(dump_five, tmp_path / "batch", split_steps=2, workers=1)
    assert [(out / name).read_bytes() == (tmp_path / "batch" / name).read_bytes() for name in SPLIT_PARTS] == [True] * 3
    with pytest.raises(trendconv.UsageError, match=r"^split_steps must be a positive integer, not 0$"):
        trendconv.follow(dump_five, out, split_steps=0)
    with pytest.raises(trendconv.UsageError, match=r"^'3X' is not a size: give bytes"):
        trendconv.follow(dump_five, out, max_db_size="3X")
