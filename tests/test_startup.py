"""Start-up: a command imports only what it uses, small inputs are parsed without a pool, and no helper process
(forkserver, resource tracker) is left when a command ends, not even as a zombie."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from helpers import A1_CONSTRUCT, A1_DATA, ACTV, write_file_set, write_run

from trendconv import __version__
from trendconv.executors import (
    POOL_MIN_BYTES_ENV,
    InlineExecutor,
    ProcessExecutor,
    local_executor,
    pool_pays,
)

HEAVY = ("pyarrow", "numpy", "msgspec", "apsw", "rich", "trendconv.loading", "trendconv.executors.pool")

# The command in this interpreter, then which of the modules named in argv[1] it imported.
_COMMAND = """
import sys
watched = sys.argv[1].split(",")
sys.argv = ["trendconv", *sys.argv[2:]]
from trendconv.__main__ import main
try:
    main()
except SystemExit as exc:
    print("exit", exc.code)
print(sorted(name for name in watched if name in sys.modules))
"""


def _imported(*args: str, watched=HEAVY, env: dict | None = None) -> str:
    command = [sys.executable, "-c", _COMMAND, ",".join(watched), *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120).stdout


def _without_pool_setting() -> dict:
    return {name: value for name, value in os.environ.items() if name != POOL_MIN_BYTES_ENV}


def test_version_imports_no_library(monkeypatch):
    monkeypatch.delenv("TRENDCONV_PURE", raising=False)
    lines = _imported("--version").splitlines()
    assert lines[1:] == ["exit 0", "[]"]
    assert lines[0].startswith(f"trendconv {__version__} (C parts: ")


def test_a_command_imports_no_option_validator_and_no_web_client(tmp_path):
    # pydantic (typer 0.29's option checks) and urllib.request (http.client, email) each cost tens of milliseconds
    # at the start of every command; a run uses neither
    data = tmp_path / "data"
    write_file_set(data / "step0" / "rank0", A1_DATA, A1_CONSTRUCT)
    args = ("run", str(data), "--db", str(tmp_path / "out"), "-j2", "-q")
    assert _imported(*args, watched=("pydantic", "urllib.request")) == "exit 0\n[]\n"


# A numpy that notes which process imported it, then fails as an absent one would: pyarrow goes on without it.
_FAKE_NUMPY = """
import os
with open(os.path.join(os.environ["NUMPY_MARKS"], str(os.getpid())), "w"):
    pass
raise ImportError("a fake numpy")
"""


def _numpy_imports(tmp_path: Path, command: list[str]) -> list:
    """The processes of COMMAND (its exit status 0) that imported numpy, with numpy importable."""
    (tmp_path / "fake" / "numpy").mkdir(parents=True)
    (tmp_path / "fake" / "numpy" / "__init__.py").write_text(_FAKE_NUMPY)
    (tmp_path / "marks").mkdir()
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "fake"), "NUMPY_MARKS": str(tmp_path / "marks")}
    env[POOL_MIN_BYTES_ENV] = "0"
    process = subprocess.Popen(command, env=env)
    assert process.wait(120) == 0
    marks = sorted(os.listdir(tmp_path / "marks"), key=lambda name: int(name) != process.pid)
    return [int(name) if int(name) != process.pid else "the command" for name in marks]


def _two_steps(tmp_path: Path) -> Path:
    for step in range(2):
        write_file_set(tmp_path / "data" / f"step{step}" / "rank0", A1_DATA, A1_CONSTRUCT)
    return tmp_path / "data"


def test_the_command_and_its_workers_leave_numpy_alone(tmp_path):
    """pyarrow imports numpy where it is installed (~50 ms a process), and trendconv gives it nothing to do:
    neither the command's process nor the pool's forkserver and workers import it (trendconv.executors.numpyless)."""
    data, out = _two_steps(tmp_path), tmp_path / "out"
    command = [sys.executable, "-m", "trendconv", "run", str(data), "--db", str(out), "-j2", "-q", "--split-steps", "1"]
    assert _numpy_imports(tmp_path, command) == []
    assert sorted(path.name for path in out.glob("*.trend.db")) == [
        "dump_data.steps-000000-000000.trend.db",
        "dump_data.steps-000001-000001.trend.db",
    ]


def test_a_program_calling_the_library_keeps_its_numpy(tmp_path):
    """Only the pool's processes, which are trendconv's alone, go without numpy."""
    data, out = _two_steps(tmp_path), tmp_path / "out"
    code = f"import trendconv; trendconv.convert({str(data)!r}, {str(out)!r}, workers=2)"
    assert _numpy_imports(tmp_path, [sys.executable, "-c", code]) == ["the command"]


def test_a_small_input_is_parsed_in_the_main_process_whatever_the_workers(tmp_path):
    data = tmp_path / "data"
    for step in range(2):
        write_file_set(data / f"step{step}" / "rank0", A1_DATA, A1_CONSTRUCT)
    watched = ("multiprocessing.forkserver", "trendconv.executors.pool", "pyarrow")
    args = ("run", str(data), "--db", str(tmp_path / "out"), "-j2", "-q")
    assert _imported(*args, watched=watched, env=_without_pool_setting()) == "exit 0\n['pyarrow']\n"
    # the same command, told that every input is worth a pool
    again = ("run", str(data), "--db", str(tmp_path / "again"), "-j2", "-q")
    env = {**os.environ, POOL_MIN_BYTES_ENV: "0"}
    expected = "exit 0\n['multiprocessing.forkserver', 'pyarrow', 'trendconv.executors.pool']\n"
    assert _imported(*again, watched=watched, env=env) == expected
    ours = (tmp_path / "out" / "dump_data.trend.db").read_bytes()
    assert ours == (tmp_path / "again" / "dump_data.trend.db").read_bytes()


def test_a_pool_pays_for_more_than_one_worker_and_enough_input(monkeypatch):
    monkeypatch.delenv(POOL_MIN_BYTES_ENV)
    mib = 1024 * 1024
    assert [pool_pays(2, size) for size in (0, 8 * mib - 1, 8 * mib, None)] == [False, False, True, True]
    assert [pool_pays(1, size) for size in (0, 8 * mib, None)] == [False, False, False]
    assert type(local_executor(2, 100)) is InlineExecutor
    assert (type(local_executor(4, 8 * mib)), local_executor(4, 8 * mib).workers) == (ProcessExecutor, 4)
    monkeypatch.setenv(POOL_MIN_BYTES_ENV, "100")
    assert [pool_pays(2, 99), pool_pays(2, 100)] == [False, True]
    monkeypatch.setenv(POOL_MIN_BYTES_ENV, "lots")  # not a count of bytes: the default
    assert [pool_pays(2, 8 * mib - 1), pool_pays(2, 8 * mib)] == [False, True]


# prestart in a fresh interpreter, then whether it started the forkserver.
_PRESTART = """
import sys
from trendconv.executors import prestart
prestart(2, sys.argv[1])
print("multiprocessing.forkserver" in sys.modules)
"""


def test_prestart_looks_at_the_size_of_data(tmp_path):
    small, large = tmp_path / "small", tmp_path / "large"
    write_file_set(small / "step0" / "rank0", A1_DATA, A1_CONSTRUCT)
    (large / "step0" / "rank0").mkdir(parents=True)
    with open(large / "step0" / "rank0" / "dump.json", "wb") as file:
        file.truncate(8 * 1024 * 1024)  # sparse: the size is what counts

    def started(data: Path) -> str:
        command = [sys.executable, "-c", _PRESTART, str(data)]
        return subprocess.run(command, capture_output=True, text=True, env=_without_pool_setting()).stdout

    assert [started(small), started(large), started(tmp_path / "missing")] == ["False\n", "True\n", "False\n"]


# prestart in a fresh interpreter for the formats named in argv[2:], then the modules its forkserver imports.
_PRELOADED = """
import ast, os, re, sys, time
from trendconv.executors import prestart
prestart(2, sys.argv[1], sys.argv[2:])
pid = os.getpid()
deadline = time.monotonic() + 30  # a child between fork and exec shows an empty command line for a moment
while time.monotonic() < deadline:
    children = open(f"/proc/{pid}/task/{pid}/children").read().split()
    lines = [open(f"/proc/{child}/cmdline").read() for child in children]
    if (line := next((line for line in lines if "forkserver" in line), None)) is not None:
        break
    time.sleep(0.01)
print(ast.literal_eval(re.search(r"main\\(\\d+, \\d+, (\\[[^]]*\\])", line).group(1))[2:])
"""


def test_the_forkserver_imports_the_parsers_of_the_formats_to_parse_only(tmp_path):
    dump, monitor, both, neither = (tmp_path / name for name in ("dump", "monitor", "both", "neither"))
    write_file_set(dump / "step0" / "rank0", A1_DATA, A1_CONSTRUCT)
    write_run(monitor, {"actv_0-0.csv": ACTV})
    write_file_set(both / "step0" / "rank0", A1_DATA, A1_CONSTRUCT)
    write_run(both, {"actv_0-0.csv": ACTV})
    neither.mkdir()
    (neither / "notes.txt").write_text("neither format\n")

    def preloaded(data: Path, *names: str) -> str:
        command = [sys.executable, "-c", _PRELOADED, str(data), *names]
        env = {**os.environ, POOL_MIN_BYTES_ENV: "0"}
        return subprocess.run(command, capture_output=True, text=True, env=env, check=True).stdout

    dump_parser, monitor_parser = "'trendconv.formats.dump.shard'", "'trendconv.formats.monitor.shard'"
    assert preloaded(dump, "auto") == f"[{dump_parser}]\n"
    assert preloaded(monitor, "auto") == f"[{monitor_parser}]\n"
    assert preloaded(both, "monitor") == f"[{monitor_parser}]\n"
    assert preloaded(both, "auto") == f"[{dump_parser}, {monitor_parser}]\n"
    assert preloaded(both, "dump", "monitor") == f"[{dump_parser}, {monitor_parser}]\n"
    # not known (no format found, an unknown name, none named): every format's, and the run reports what is wrong
    assert preloaded(neither, "auto") == f"[{dump_parser}, {monitor_parser}]\n"
    assert preloaded(dump, "csv") == f"[{dump_parser}, {monitor_parser}]\n"
    assert preloaded(dump) == f"[{dump_parser}, {monitor_parser}]\n"


def _session_processes(session: int) -> list[str]:
    """Every process of SESSION, zombies too: state and command line."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            line = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        state, _, _, sid = stat.rsplit(")", 1)[1].split()[:4]
        if int(sid) == session:
            found.append(f"{state} {line}")
    return found


def test_no_process_of_a_pooled_run_is_left_when_it_exits(tmp_path):
    data = tmp_path / "data"
    for step in range(2):
        for rank in range(2):
            write_file_set(data / f"step{step}" / f"rank{rank}", A1_DATA, A1_CONSTRUCT)
    env = {**os.environ, POOL_MIN_BYTES_ENV: "0"}
    command = [sys.executable, "-m", "trendconv", "run", str(data), "--db", str(tmp_path / "out"), "-j2", "-q"]
    process = subprocess.Popen(command, env=env, start_new_session=True)
    assert process.wait(120) == 0
    # at once: the forkserver, the workers and the resource tracker were waited for before the command ended
    assert _session_processes(process.pid) == []
