"""Signals: Ctrl-C, SIGTERM and SIGHUP stop a command at any moment with exit 130 and one line; no process of
trendconv's outlives it (not after SIGKILL either), nothing half-written is left, a previous database is untouched.

Each command runs in a session of its own, as from a terminal, and is stopped at a fault point's pause
(trendconv.faults), so the moment is exact; the signal goes to the whole process group, as a terminal sends it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import ACTV, GRAD, make_data, write_run

from trendconv import api, interrupt

INTERRUPTED = "error: interrupted\n"
WAIT = 60  # seconds; generous for a loaded machine, as nothing here is a timing target
FORKSERVER = "multiprocessing.forkserver"


class Command:
    """`python -m trendconv ARGS` in a new session, with TRENDCONV_FAULT=FAULT."""

    def __init__(self, tmp: Path, *args, fault: str | None = None):
        name = args[0]
        self.marker, self.out, self.err = tmp / f"{name}.paused", tmp / f"{name}.stdout", tmp / f"{name}.stderr"
        env = {**os.environ, "TRENDCONV_FAULT_MARKER": str(self.marker)}
        env.pop("TRENDCONV_FAULT", None)
        if fault:
            env["TRENDCONV_FAULT"] = fault
        with open(self.out, "w") as out, open(self.err, "w") as err:
            command = [sys.executable, "-m", "trendconv", *map(str, args)]
            self.process = subprocess.Popen(command, env=env, stdout=out, stderr=err, start_new_session=True)
        self.session = self.process.pid

    def paused(self) -> int:
        """Wait until a process pauses at the fault point; its process id."""
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            if self.marker.is_file() and (lines := self.marker.read_text().splitlines()):
                return int(lines[0])
            assert self.process.poll() is None, self.err.read_text()
            time.sleep(0.01)
        raise AssertionError("the command did not reach its pause")

    def signal_group(self, signum: int) -> None:
        os.killpg(self.session, signum)

    def wait(self) -> int:
        return self.process.wait(WAIT)

    @property
    def stdout(self) -> str:
        return self.out.read_text()

    @property
    def stderr(self) -> str:
        return self.err.read_text()


def session_processes(session: int) -> dict[int, str]:
    """The live processes of SESSION: process id -> command line."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            line = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        state, _, _, sid = stat.rsplit(")", 1)[1].split()[:4]
        if int(sid) == session and state != "Z":
            found[int(pid)] = line
    return found


def signal_set(pid: int, field: str) -> set[int]:
    """The signals in /proc/PID/status's FIELD (SigBlk: blocked, SigIgn: ignored)."""
    line = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith(field))
    mask = int(line.split()[1], 16)
    return {signum for signum in range(1, 65) if mask >> (signum - 1) & 1}


def forkserver_pid(session: int) -> int:
    """The forkserver, before it has forked workers (which show its command line)."""
    (pid,) = [pid for pid, line in session_processes(session).items() if FORKSERVER in line]
    return pid


def gone(session: int, seconds: float = WAIT) -> list[str]:
    """Wait up to SECONDS for every process of SESSION to end; the command lines of those left."""
    deadline = time.monotonic() + seconds
    while (left := session_processes(session)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return list(left.values())


def assert_nothing_outlives(command: Command) -> None:
    # The forkserver and the workers (forked from it, so with its command line) end before the command does; the
    # resource tracker when the last process holding its pipe has, a moment after.
    assert [line for line in session_processes(command.session).values() if FORKSERVER in line] == []
    assert gone(command.session) == []


def temporaries(root: Path) -> list[Path]:
    return sorted(root.rglob(".*.tmp"))


@pytest.fixture
def previous(tmp_path: Path) -> Path:
    """OUT/dump_data.trend.db from other data than the command's, so that replacing it would show."""
    data = make_data(tmp_path / "prev", steps=1, ranks=1)
    return api.run(
        data, tmp_path / "out", api.ParseOptions(), workers=1, work=tmp_path / "prev-work", input_format="dump"
    ).load.db


def assert_stopped(command: Command, out: Path, previous: Path, before: tuple[bytes, int]) -> None:
    assert (command.wait(), command.stderr, command.stdout) == (130, INTERRUPTED, "")
    assert (previous.read_bytes(), previous.stat().st_ino) == before
    assert temporaries(out) == []
    assert_nothing_outlives(command)


def run_dump(tmp_path: Path, fault: str) -> Command:
    return Command(tmp_path, "run", make_data(tmp_path), "--db", tmp_path / "out", "-j2", "-q", fault=fault)


MOMENTS = {
    "start": "start:pause",  # before the command line is imported
    "forkserver": "prestarted:pause",  # while the forkserver imports the parser
    "parse": "parse-before-write:pause",  # a worker parsing
    "shard write": "shard-before-rename:pause",  # a worker with a temporary shard file
    "load": "load-shard@2:pause",  # the main process loading, the database half built
    "rename": "load-before-rename:pause",  # the database complete but not in place
}


@pytest.mark.parametrize(
    ("moment", "signum"),
    [(moment, signal.SIGINT) for moment in MOMENTS]
    + [(moment, signum) for moment in ("parse", "load") for signum in (signal.SIGTERM, signal.SIGHUP)],
)
def test_a_signal_stops_run_at_any_moment(tmp_path, previous, moment, signum):
    before = (previous.read_bytes(), previous.stat().st_ino)
    command = run_dump(tmp_path, MOMENTS[moment])
    paused = command.paused()
    # The terminal's signals reach the whole group; they are for the main process to act on.
    if moment == "forkserver":  # it blocks them from its start, while it imports
        assert signal_set(forkserver_pid(command.session), "SigBlk") >= {*interrupt.SIGNALS}
    if moment == "parse":
        assert signal_set(paused, "SigIgn") >= {signal.SIGINT, signal.SIGHUP}
    if moment == "shard write":
        shard = temporaries(tmp_path / "out" / ".trendconv")
        assert [path.name.rsplit(".", 2)[0] for path in shard] == [".step0_rank0.parquet"]
    command.signal_group(signum)
    assert_stopped(command, tmp_path / "out", previous, before)


@pytest.mark.parametrize(("split", "kept"), [((), False), (("--split-steps", "1"), True)])
def test_the_forkserver_goes_when_the_parse_ends_unless_loader_processes_follow(tmp_path, previous, split, kept):
    # It holds the parsers' imports: gone before the index build, the peak of a run's memory. A split by steps
    # keeps it for the loader processes that build its databases.
    before = (previous.read_bytes(), previous.stat().st_ino)
    command = Command(
        tmp_path,
        "run",
        make_data(tmp_path),
        "--db",
        tmp_path / "out",
        "-j2",
        "-q",
        *split,
        fault="run-between-stages:pause",
    )
    assert command.paused() == command.process.pid
    lines = session_processes(command.session).values()
    assert sum(FORKSERVER in line for line in lines) == kept
    command.signal_group(signal.SIGINT)
    assert_stopped(command, tmp_path / "out", previous, before)


def test_a_signal_stops_the_monitor_load(tmp_path):
    data = tmp_path / "data"
    write_run(data, {"actv_0-1.csv": ACTV, "grad_reduced_0-1.csv": GRAD})
    previous = api.run(
        data,
        tmp_path / "out",
        api.ParseOptions(micro_step=False),
        workers=1,
        input_format="monitor",
        work=tmp_path / "prev-work",
    ).load.db
    before = (previous.read_bytes(), previous.stat().st_ino)
    command = Command(tmp_path, "run", data, "--db", tmp_path / "out", "-j2", "-q", fault="load-shard@2:pause")
    command.paused()
    command.signal_group(signal.SIGTERM)
    assert_stopped(command, tmp_path / "out", previous, before)


def test_a_signal_stops_parse_and_load(tmp_path, previous):
    before = (previous.read_bytes(), previous.stat().st_ino)
    out, work = tmp_path / "out", tmp_path / "work"
    parse = Command(tmp_path, "parse", make_data(tmp_path), "--work", work, "-j2", "-q", fault="parse-shard@2:pause")
    parse.paused()
    parse.signal_group(signal.SIGHUP)
    assert (parse.wait(), parse.stderr, parse.stdout) == (130, INTERRUPTED, "")
    assert temporaries(work) == [] and not (work / "dump" / "manifest.json").exists()
    # the worker parses its tasks in order: the two shards it finished are kept, to be reused
    shard_names = sorted(path.name for path in (work / "dump" / "shards").iterdir())
    assert shard_names == ["step0_rank0.parquet", "step0_rank1.parquet"]
    assert_nothing_outlives(parse)
    api.parse(tmp_path / "data", work, api.ParseOptions(), workers=1, input_format="dump")
    load = Command(tmp_path, "load", work, "--db", out, "-q", fault="load-shard@3:pause")
    load.paused()
    load.signal_group(signal.SIGINT)
    assert_stopped(load, out, previous, before)


@pytest.mark.parametrize("moment", ["parse", "shard write"])
def test_workers_stop_by_themselves_when_the_main_process_is_killed(tmp_path, moment):
    command = run_dump(tmp_path, MOMENTS[moment])
    worker = command.paused()
    assert worker != command.process.pid
    command.process.kill()
    assert command.wait() == -signal.SIGKILL
    assert gone(command.session) == []
    # no temporary database either: the first is begun once its first step directory is parsed
    assert temporaries(tmp_path / "out") == []


def test_nothing_outlives_a_normal_exit(tmp_path):
    command = Command(tmp_path, "run", make_data(tmp_path), "--db", tmp_path / "out", "-j2", "-q")
    assert (command.wait(), command.stderr, command.stdout) == (0, "", "")
    assert_nothing_outlives(command)
    # Every shard reused: the command ends while the forkserver it started still imports the parser.
    again = Command(tmp_path, "run", tmp_path / "data", "--db", tmp_path / "out", "-j2", "-q")
    assert (again.wait(), again.stderr, again.stdout) == (0, "", "")
    assert_nothing_outlives(again)


@pytest.fixture
def handlers(monkeypatch):
    """trendconv.interrupt's state, fresh, as the command sets it up (the handlers themselves are not installed)."""
    for name, value in (("_received", None), ("_armed", False), ("_deferred", 0), ("_owed", False)):
        monkeypatch.setattr(interrupt, name, value)


def test_the_first_signal_in_a_command_raises_and_later_ones_are_noted(handlers):
    interrupt._handle(signal.SIGHUP, None)  # before the command: noted only
    assert interrupt.received()
    with pytest.raises(KeyboardInterrupt), interrupt.armed():
        pass
    with pytest.raises(KeyboardInterrupt):
        interrupt.check()


def test_a_signal_in_a_command_raises_once(handlers):
    with interrupt.armed():
        with pytest.raises(KeyboardInterrupt):
            interrupt._handle(signal.SIGTERM, None)
        interrupt._handle(signal.SIGINT, None)  # the cleanup is not cut short
    assert interrupt._received == signal.SIGTERM


def test_a_deferred_step_is_finished_before_the_interruption(handlers):
    done = []
    with interrupt.armed(), pytest.raises(KeyboardInterrupt):
        with interrupt.deferred():
            interrupt._handle(signal.SIGINT, None)
            done.append("step")
    assert done == ["step"]


# A KeyboardInterrupt caught after it ended code run from a string, as when one comes while an import makes a
# dataclass: CPython then makes `python -m` die of SIGINT at exit, whatever the exit status was to be.
_CAUGHT_IN_A_STRING = """
import sys
from trendconv import __main__, cli

def command_line():
    try:
        exec("raise KeyboardInterrupt")
    except KeyboardInterrupt:
        pass
    sys.exit(3)

cli.main = command_line
__main__.main()
"""


def test_the_exit_status_survives_a_keyboard_interrupt_caught_in_a_string(tmp_path):
    (tmp_path / "caught.py").write_text(_CAUGHT_IN_A_STRING)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    assert subprocess.run([sys.executable, "-m", "caught"], env=env, timeout=WAIT).returncode == 3


def test_a_signal_stops_the_loader_processes_of_a_split(tmp_path, previous):
    """Ctrl-C while two loader processes build the databases of a split: exit 130, no temporary file, no
    process left, and the previous database in place."""
    before = (previous.read_bytes(), previous.stat().st_ino)
    out, work = tmp_path / "out", tmp_path / "work"
    api.parse(make_data(tmp_path, steps=4), work, api.ParseOptions(), workers=1, input_format="dump")
    load = Command(
        tmp_path,
        "load",
        work,
        "--db",
        out,
        "-q",
        "--split-steps",
        "1",
        "--load-workers",
        "2",
        fault="load-shard@2:pause",
    )
    paused = load.paused()
    assert paused != load.process.pid  # a loader process, not the main one
    load.signal_group(signal.SIGINT)
    assert_stopped(load, out, previous, before)
    assert sorted(path.name for path in out.glob("*.trend.db")) == ["dump_data.trend.db"]


def test_a_killed_loader_process_is_our_failure_and_leaves_nothing(tmp_path, previous):
    before = (previous.read_bytes(), previous.stat().st_ino)
    out, work = tmp_path / "out", tmp_path / "work"
    api.parse(make_data(tmp_path, steps=4), work, api.ParseOptions(), workers=1, input_format="dump")
    load = Command(
        tmp_path, "load", work, "--db", out, "-q", "--split-steps", "1", "--load-workers", "2", fault="load-shard@2"
    )
    assert load.wait() == 1
    assert load.stderr.startswith("error: internal error while running the loader processes: BrokenProcessPool")
    assert (previous.read_bytes(), previous.stat().st_ino) == before
    assert temporaries(out) == []
    assert_nothing_outlives(load)


def test_a_split_load_starts_its_loaders_server_before_its_imports_and_a_signal_stops_it(tmp_path, previous):
    before = (previous.read_bytes(), previous.stat().st_ino)
    work = tmp_path / "work"
    api.parse(make_data(tmp_path), work, api.ParseOptions(), workers=1, input_format="dump")
    load = Command(
        tmp_path, "load", work, "--db", tmp_path / "out", "--split-steps", "1", "-q", fault="prestarted:pause"
    )
    load.paused()  # the forkserver runs, importing, while the command has not yet imported the library
    assert signal_set(forkserver_pid(load.session), "SigBlk") >= {*interrupt.SIGNALS}
    load.signal_group(signal.SIGINT)
    assert_stopped(load, tmp_path / "out", previous, before)
