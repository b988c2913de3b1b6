"""The reference converter, msprobe data2db from mindstudio-probe 26.2.0, run in its own venv.

It needs none of our dependencies and many of its own (pandas, tensorboard, ...), so it lives in
`<repo>/.venv-ref`, created on first use. `TRENDCONV_MSPROBE` may name an msprobe executable instead.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
REFERENCE_VENV = REPO / ".venv-ref"
REFERENCE_PACKAGE = "mindstudio-probe==26.2.0"
# The Trend Analyzer plugin ships in that wheel; TensorBoard runs it (tests/test_plugin.py).
VIEWER_PACKAGE = "tensorboard"


def msprobe_executable() -> Path:
    named = os.environ.get("TRENDCONV_MSPROBE")
    if named:
        return Path(named)
    executable = REFERENCE_VENV / "bin" / "msprobe"
    if not executable.exists():
        venv.create(REFERENCE_VENV, with_pip=True)
        pip = [str(REFERENCE_VENV / "bin" / "python"), "-m", "pip", "install", "-q", REFERENCE_PACKAGE, VIEWER_PACKAGE]
        subprocess.run(pip, check=True, stdout=sys.stderr)
    return executable


def tensorboard_executable() -> Path:
    """The TensorBoard installed beside the reference msprobe, which loads the Trend Analyzer plugin."""
    return msprobe_executable().parent / "tensorboard"


def run_msprobe(
    data: Path,
    out: Path,
    *,
    micro_step: bool = True,
    mapping: Path | None = None,
    hash_seed: int = 0,
    input_format: str = "dump",
    process_num: int | None = None,
) -> Path:
    """Convert DATA with the reference; returns OUT/dump_data.trend.db (or monitor_data.trend.db)."""
    command = [str(msprobe_executable()), "data2db", "--format", input_format, "--data", str(data), "--db", str(out)]
    if process_num is not None:
        command += ["--process_num", str(process_num)]
    command += ["--micro_step", "true" if micro_step else "false"]
    if mapping is not None:
        command += ["--mapping", str(mapping)]
    env = {**os.environ, "PYTHONHASHSEED": str(hash_seed)}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise AssertionError(f"msprobe data2db failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return out / ("monitor_data.trend.db" if input_format == "monitor" else "dump_data.trend.db")
