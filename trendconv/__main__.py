"""The `trendconv` command (and `python -m trendconv`): signals are routed before the command line is imported."""

from __future__ import annotations

import sys

from trendconv import interrupt


def main() -> None:
    interrupt.install()
    # imported once the signals are routed, as is everything else
    from trendconv.errors import ExitStatus
    from trendconv.faults import fault_point

    fault_point("start")
    try:
        from trendconv import cli

        cli.main()
        status = 0
    except SystemExit as exc:
        status = exc.code
    finally:
        _end()
    interrupt.ignore()  # the exit status is decided: Python's own teardown follows, and may take a moment
    if interrupt.received() and status != ExitStatus.INTERRUPTED:
        cli.report.print_error("interrupted")
        status = ExitStatus.INTERRUPTED
    # A KeyboardInterrupt that ended code run from a string (a dataclass being made during an import, say) leaves a
    # mark in CPython, caught or not, that makes `python -m` die of SIGINT at exit instead of exiting with STATUS;
    # running a string clears it.
    exec("")
    sys.exit(status)


def _end() -> None:
    """Nothing of this command outlives it: not the forkserver or resource tracker multiprocessing would keep, nor
    a temporary file."""
    executors = sys.modules.get("trendconv.executors")
    if executors:
        executors.stop_helpers()
    interrupt.remove_unfinished()


if __name__ == "__main__":
    main()
