"""Shared test helpers: write small dumps the way msprobe does (Python json, bare NaN/Infinity)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from trendconv import native


def T(norm, mx, mn, mean, *, dtype="torch.float32", type_="torch.Tensor"):  # noqa: N802 - the name docs/dump-format.md uses
    return {"type": type_, "dtype": dtype, "shape": [2], "Max": mx, "Min": mn, "Mean": mean, "Norm": norm}


def V(value, **kwargs):  # noqa: N802
    return T(value, value, value, value, **kwargs)


def write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1))


def write_file_set(item_dir: Path, data: dict, construct: dict | None = None) -> None:
    write_json(item_dir / "dump.json", {"task": "statistics", "level": "mix", "framework": "pytorch", "data": data})
    if construct is not None:
        write_json(item_dir / "construct.json", construct)


A1_DATA = {
    "Module.net.Net.forward.0": {
        "input_args": [T(2, 1, 0, 0.5)],
        "output": [T(3, 2, -1, 0.25)],
        "parameters": {"weight": T(9, 9, 9, 9)},
        "is_recompute": False,
    },
    "Functional.linear.0.forward": {
        "input_args": [T(2, 1, 0, 0.5), None],
        "output": [T(4, 3, -3, 0)],
        "is_recompute": False,
    },
    "Module.net.Net.forward.1": {"input_args": [T(2.5, 1.5, 0, 0.5)], "output": [T(3.5, 2.5, -1, "inf")]},
    "Functional.linear.1.forward": {
        "input_args": [T(2.5, 1.5, 0, 0.5)],
        "output": [T(5, 4, -4, float("nan"))],
        "is_recompute": True,
    },
    "Module.net.Net.backward.0": {"input": [T(0.3, 0.2, -0.2, 0)], "output": [T(0.4, 0.1, -0.1, 0)]},
    "Functional.linear.0.backward": {"input": [T(0.3, 0.2, -0.2, 0)], "output": [T(1, 1, 1, 1, dtype="torch.int64")]},
    "Module.net.Net.parameters_grad.0": {"weight": [T(0.05, 0.01, -0.01, 0)]},
}
A1_CONSTRUCT = {
    "Module.net.Net.forward.0": None,
    "Functional.linear.0.forward": "Module.net.Net.forward.0",
    "Module.net.Net.forward.1": None,
    "Functional.linear.1.forward": "Module.net.Net.forward.1",
    "Module.net.Net.backward.0": None,
    "Functional.linear.0.backward": "Module.net.Net.backward.0",
}


@pytest.fixture
def a1_data(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    write_file_set(data / "step0" / "rank0", A1_DATA, A1_CONSTRUCT)
    write_file_set(data / "step1" / "proc4242", A1_DATA, A1_CONSTRUCT)
    return data


def query(db: Path, sql: str) -> list[tuple]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


TREND_BY_NAME = """
SELECT t.rank, t.step, m.target_name, m.micro_step, k.metric_name, t.norm, t.max, t.min, t.mean
FROM trend_data t JOIN monitoring_targets m USING (target_id) JOIN monitoring_metrics k USING (metric_id)
ORDER BY t.rank, t.step, k.metric_id, m.target_name, m.micro_step
"""

TAGS_BY_NAME = """
SELECT k.metric_name, g.tag_name, g.category, group_concat(m.target_name || '#' || m.micro_step, ' ')
FROM tag_target_mapping x JOIN monitoring_tags g USING (tag_id) JOIN monitoring_targets m USING (target_id)
JOIN monitoring_metrics k ON k.metric_id = g.metric_id
GROUP BY g.tag_id ORDER BY k.metric_id, g.tag_name, g.category
"""


def pytest_collection_modifyitems(config, items):
    """Tests of a C part itself (marked `c_parts`) have nothing to test when TRENDCONV_PURE=1 turns them off."""
    if not native.pure():
        return
    skip = pytest.mark.skip(reason=f"tests a C part, which {native.PURE_ENV}=1 turns off")
    for item in items:
        if item.get_closest_marker("c_parts"):
            item.add_marker(skip)
