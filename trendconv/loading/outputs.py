"""Which databases in an output directory are one output's, so that a new output replaces the whole previous set.

A split output is several files, and the next one may be divided otherwise: files of the old division that the new
one does not have would stay in the directory, where the Trend Analyzer lists them beside the new ones. Each
output records its files (`.<name>.files.json`, hidden from the plugin, which lists only `*.trend.db`), and the
next output of the same name removes those of them it did not write again. An unsplit output is recorded too, so
that a split made after it removes it (without a record, trendconv could not tell its own database from one
msprobe wrote under the same name). A file of the same family that no record names, or that changed since it
was recorded, is not trendconv's to remove: it is named in a warning.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path

from trendconv.loading.split import DB_SUFFIX


def record_path(out_dir: Path, stem: str) -> Path:
    return out_dir / f".{stem}.files.json"


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
    path = record_path(out_dir, stem)
    document = {"files": {name: _identity(out_dir / name) for name in names}}
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError:  # a record is a convenience for the next output: without it, nothing is ever removed
        with contextlib.suppress(OSError):
            tmp.unlink()
