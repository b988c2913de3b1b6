"""Constant Arrow columns, made once per file, thousands of times a second."""

from __future__ import annotations

import functools

import pyarrow as pa


def constant(value, kind: pa.DataType, count: int) -> pa.Array:
    """COUNT times VALUE. The scalar is made once: pyarrow's conversion of a Python value tries to import dateutil
    on every call where it is not installed, which cost more than the rest of a small file's parse."""
    return pa.repeat(_scalar(value, kind), count)


@functools.lru_cache(maxsize=1024)  # ranks, metrics, 0 and True
def _scalar(value, kind: pa.DataType) -> pa.Scalar:
    return pa.scalar(value, kind)
