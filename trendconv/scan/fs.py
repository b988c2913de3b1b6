"""Looking at DATA's directories: a directory that cannot be read is the same one-line `cannot read` data error
as a file that cannot be read, never a traceback."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from trendconv.errors import UsageError, cannot_read

# What pathlib's is_dir/is_file take for "not there" (a dangling or looping link, a file on the way).
_ABSENT = (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP)


def list_dir(path: Path) -> list[str]:
    """The names in PATH, sorted."""
    try:
        return sorted(os.listdir(path))
    except OSError as exc:
        raise cannot_read(path, exc) from None


def is_dir(path: Path) -> bool:
    return _is(path, stat.S_ISDIR)


def is_file(path: Path) -> bool:
    return _is(path, stat.S_ISREG)


def file_size(path: Path | str) -> int | None:
    """PATH's size when it is a regular file, else None (`is_file` with the size it looked at)."""
    found = _stat(path)
    return found.st_size if found is not None and stat.S_ISREG(found.st_mode) else None


def _is(path: Path, kind) -> bool:
    found = _stat(path)
    return found is not None and kind(found.st_mode)


def _stat(path: Path | str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError as exc:
        if exc.errno in _ABSENT:
            return None
        # Looking at PATH needs search permission on its directory: that directory is what cannot be read.
        raise cannot_read(Path(path).parent if exc.errno == errno.EACCES else path, exc) from None


def check_data(data: Path) -> None:
    """DATA must be a directory."""
    if not is_dir(data):
        exists = _is(data, lambda mode: True)
        raise UsageError(f"{data}: DATA is not a directory" if exists else f"{data}: DATA does not exist")
