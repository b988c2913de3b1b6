"""Fixtures and hooks of the test suite; the helpers test modules share are in helpers.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import A1_CONSTRUCT, A1_DATA, write_file_set

from trendconv import native
from trendconv.executors import POOL_MIN_BYTES_ENV

# The tests' inputs are small, which trendconv would parse in its main process whatever the worker count; with
# this, "two workers" in a test means a pool, as it does for large inputs. The commands tests start inherit it.
os.environ[POOL_MIN_BYTES_ENV] = "0"


@pytest.fixture
def a1_data(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    write_file_set(data / "step0" / "rank0", A1_DATA, A1_CONSTRUCT)
    write_file_set(data / "step1" / "proc4242", A1_DATA, A1_CONSTRUCT)
    return data


def pytest_collection_modifyitems(config, items):
    """Tests of a C part itself (marked `c_parts`) have nothing to test when TRENDCONV_PURE=1 turns them off."""
    if not native.pure():
        return
    skip = pytest.mark.skip(reason=f"tests a C part, which {native.PURE_ENV}=1 turns off")
    for item in items:
        if item.get_closest_marker("c_parts"):
            item.add_marker(skip)
