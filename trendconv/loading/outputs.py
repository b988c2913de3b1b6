"""Which databases in an output directory are one output's, so that a new output replaces the whole previous set.

A split output is several files, and the next one may be divided otherwise: files of the old division that the new
one does not have would stay in the directory, where the Trend Analyzer lists them beside the new ones. Each
output records its files (`.<name>.files.json`, hidden from the plugin, which lists only `*.trend.db`), and the
next output of the same name removes those of them it did not write again. An unsplit output is recorded too, so
that a split made after it removes it (without a record, trendconv could not tell its own database from one
msprobe wrote under the same name). A file of the same family that no record names, or that changed since it
was recorded, is not trendconv's to remove: it is named in a warning.

One process at a time writes an output: `writing` holds `.<name>.lock` (flock; the file is removed again) while a
batch output moves its databases into place, and for as long as a follower runs. WORK's lock does not cover it:
two commands with different WORKs may name one output, and a follower's appends mixed with another's would give
wrong rows.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from trendconv.errors import OutputError, UsageError, os_reason
from trendconv.loading.split import DB_SUFFIX


def record_path(out_dir: Path, stem: str) -> Path:
    return out_dir / f".{stem}.files.json"


class OutputInUse(UsageError):
    """Another process holds the output's lock."""


@contextlib.contextmanager
def writing(outputs: Iterable[Path]) -> Iterator[None]:
    """The OUTPUTS (each OUT_DIR/<name>, a database's unsplit path) written by this process alone; another that
    writes one of them now fails at once."""
    with contextlib.ExitStack() as stack:
        for output in sorted(set(outputs)):
            stack.enter_context(_locked(output))
        yield


@contextlib.contextmanager
def _locked(output: Path) -> Iterator[None]:
    path = output.with_name(f".{output.name}.lock")
    held = _lock(path, output)
    try:
        yield
    finally:
        if held is not None:
            if os.fstat(held).st_size == 0:  # ours, or one a killed process of ours left; a file with data is not
                path.unlink(missing_ok=True)
            os.close(held)


def _lock(path: Path, output: Path) -> int | None:
    """PATH's lock held: its descriptor; None when no file can be made at PATH (then no database can be made
    either, and the write that follows says why). A lock taken on a file that its holder removed meanwhile is no
    lock: then again."""
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            if not os.path.lexists(path):  # no file can be made there: no database either, and its write says why
                return None
            raise _unusable(path, exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OutputInUse(
                f"{output}: another trendconv process is writing this output (a follower, or a run with another "
                "WORK); wait until it stops, or choose another `out` or `name`"
            ) from None
        if _same_file(fd, path):
            return fd
        os.close(fd)


def _unusable(path: Path, exc: OSError) -> OutputError:
    """Something at PATH that cannot be the lock: without it, another process could write the output at the same
    time, so no lock, no output."""
    what = "a symbolic link" if path.is_symlink() else os_reason(exc, path)
    return OutputError(
        f"{path}: cannot use it as the lock of the output ({what}); it is trendconv's name for that lock: move it "
        f"away (`mv '{path}' '{path}.bak'`)"
    )


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = path.lstat()
    except OSError:
        return False
    held = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (held.st_dev, held.st_ino)


def replace_set(out_dir: Path, stem: str, names: list[str]) -> list[str]:
    """NAMES (of the family STEM) are now in OUT_DIR: record them, remove the previous output's other files,
    and return warnings for the family's files that are not ours to remove."""
    record = record_path(out_dir, stem)
    old = _read_record(record)
    _write_record(out_dir, stem, names)
    warnings = []
    for path in family(out_dir, stem):
        if path.name in names:
            continue
        if old.get(path.name) == _identity(path):
            path.unlink(missing_ok=True)
        else:
            warnings.append(
                f"{path}: left in place, though this output does not include it: trendconv did not write it, or it "
                f"changed since; the Trend Analyzer lists it beside the new databases (`rm '{path}'` if it is stale)"
            )
    return warnings


def renamed(out_dir: Path, stem: str, was: str, name: str) -> None:
    """A recorded file of STEM's output was renamed WAS -> NAME (a follower's, docs/live.md §7): recorded so, so
    that an output stopped before its next record still knows the file as its own."""
    files = _read_record(record_path(out_dir, stem))
    if was in files:
        files[name] = files.pop(was)
        _write_files(out_dir, stem, files)


def family(out_dir: Path, stem: str) -> list[Path]:
    """The files of OUT_DIR an output named STEM may have written: STEM itself and its split parts."""
    base = re.escape(stem.removesuffix(DB_SUFFIX))
    pattern = re.compile(rf"{re.escape(stem)}|{base}\.steps-\d+-\d+{re.escape(DB_SUFFIX)}")
    try:
        names = sorted(os.listdir(out_dir))
    except OSError:
        return []
    return [out_dir / name for name in names if pattern.fullmatch(name)]


def _identity(path: Path) -> list[int] | None:
    """What tells a file we recorded from one put in its place since: inode, size and modification time."""
    try:
        st = path.lstat()
    except OSError:
        return None
    if not path.is_file() or path.is_symlink():
        return None
    return [st.st_ino, st.st_size, st.st_mtime_ns]


def _read_record(path: Path) -> dict:
    """The recorded files; an unreadable or altered record names none (then nothing is removed)."""
    try:
        files = json.loads(path.read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return files if isinstance(files, dict) else {}


def _write_record(out_dir: Path, stem: str, names: list[str]) -> None:
    _write_files(out_dir, stem, {name: _identity(out_dir / name) for name in names})


def _write_files(out_dir: Path, stem: str, files: dict) -> None:
    path = record_path(out_dir, stem)
    document = {"files": files}
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError:  # a record is a convenience for the next output: without it, nothing is ever removed
        with contextlib.suppress(OSError):
            tmp.unlink()
