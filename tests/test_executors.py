"""Executors: bounded submission, failures reported per task, early close."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import make_data

from trendconv.executors import InlineExecutor, ProcessExecutor, default_workers, local_executor, pool


def test_process_pool_keeps_at_most_four_tasks_per_worker_in_flight():
    consumed = [0]

    def tasks():
        for number in range(40):
            consumed[0] += 1
            yield number

    received, most_ahead = [], 0
    for outcome in ProcessExecutor(2).imap_unordered(abs, tasks()):
        received.append(outcome.value)
        most_ahead = max(most_ahead, consumed[0] - len(received))
    assert sorted(received) == list(range(40))
    assert (pool._PER_WORKER, most_ahead <= 8) == (4, True)


def test_failures_come_back_as_outcomes():
    outcomes = list(ProcessExecutor(2).imap_unordered(int, ["1", "x", "3"]))
    assert sorted((o.task, o.value) for o in outcomes if o.error is None) == [("1", 1), ("3", 3)]
    (failed,) = [o for o in outcomes if o.error is not None]
    assert (failed.task, type(failed.error), str(failed.error)) == (
        "x",
        ValueError,
        "invalid literal for int() with base 10: 'x'",
    )
    inline = list(InlineExecutor().imap_unordered(int, ["x"]))
    assert [(o.task, str(o.error)) for o in inline] == [("x", "invalid literal for int() with base 10: 'x'")]


def test_closing_early_stops_submission():
    consumed = [0]

    def tasks():
        for number in range(1000):
            consumed[0] += 1
            yield number

    outcomes = ProcessExecutor(2).imap_unordered(abs, tasks())
    next(outcomes)
    outcomes.close()
    assert consumed[0] <= 9


def test_default_workers_is_the_cpu_count_capped_by_the_task_count():
    assert default_workers(1) == 1
    assert default_workers(0) == 1
    assert default_workers(10_000) == min(os.cpu_count(), 128)


def test_one_worker_runs_in_process_without_a_pool():
    assert type(local_executor(1)) is InlineExecutor
    assert (type(local_executor(2)), local_executor(2).workers) == (ProcessExecutor, 2)


# In a fresh interpreter: the forkserver running (if any) as a child of this process, once prestart has returned.
# A child caught between fork and exec shows an empty command line for a moment, so each one is read until it
# shows its own.
_FORKSERVER_CHILDREN = """
import os, sys, time
from trendconv.executors import prestart
prestart({workers})
pid = os.getpid()

def command_line(child):
    deadline = time.monotonic() + 30
    while not (line := open(f"/proc/{{child}}/cmdline").read()) and time.monotonic() < deadline:
        time.sleep(0.01)
    return line

children = open(f"/proc/{{pid}}/task/{{pid}}/children").read().split()
print(sum("multiprocessing.forkserver" in command_line(child) for child in children))
"""


def _forkservers_after_prestart(workers) -> str:
    command = [sys.executable, "-c", _FORKSERVER_CHILDREN.format(workers=workers)]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout


def test_prestart_starts_the_pool_forkserver_only_when_a_pool_is_likely():
    assert _forkservers_after_prestart(2) == "1\n"
    assert _forkservers_after_prestart(1) == "0\n"
    assert _forkservers_after_prestart(None) == ("1\n" if os.cpu_count() > 1 else "0\n")


# A program with a forkserver of its own converts in its process: the forkserver is the program's, and stays.
_PROGRAMS_FORKSERVER = """
import multiprocessing.forkserver as forkserver, sys
from pathlib import Path
import trendconv
forkserver.ensure_running()
before = forkserver._forkserver._forkserver_pid
trendconv.convert(Path(sys.argv[1]), Path(sys.argv[2]), workers=2)
print(forkserver._forkserver._forkserver_pid == before is not None)
"""


def test_a_program_that_converts_keeps_its_forkserver(tmp_path):
    command = [sys.executable, "-c", _PROGRAMS_FORKSERVER, str(make_data(tmp_path)), str(tmp_path / "out")]
    assert subprocess.run(command, capture_output=True, text=True, check=True).stdout == "True\n"


def test_the_command_line_imports_the_library_only_when_a_command_runs():
    # So that `parse` and `run` can start the forkserver before this process imports pyarrow and the loader.
    libraries = "{'pyarrow', 'trendconv.api', 'apsw', 'sqlite3'}"
    code = f"import sys, trendconv.cli; print(sorted({libraries} & set(sys.modules)))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"


@pytest.mark.parametrize(("given", "expected"), [(None, "1 system\n"), ("4", "4 system\n")])
def test_importing_trendconv_sets_thread_and_allocator_defaults(given, expected):
    # Read by numpy's OpenBLAS and by pyarrow when first imported, so they must be set at import; workers inherit
    # them. A value the user gave wins.
    env = {name: value for name, value in os.environ.items() if name != "OPENBLAS_NUM_THREADS"}
    env.pop("ARROW_DEFAULT_MEMORY_POOL", None)
    if given:
        env["OPENBLAS_NUM_THREADS"] = given
    code = "import os, trendconv; print(os.environ['OPENBLAS_NUM_THREADS'], os.environ['ARROW_DEFAULT_MEMORY_POOL'])"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env).stdout == expected
