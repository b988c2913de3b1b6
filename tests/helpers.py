"""Helpers the test modules share: small dumps written the way msprobe writes them (Python json, bare
NaN/Infinity), monitor CSV files, the CLI in-process and as a subprocess, and the Trend Analyzer's queries.

Test modules import from here, never from one another (nor from conftest, which holds fixtures and hooks only).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trendconv import shards
from trendconv.cli import app
from trendconv.formats import FORMATS
from trendconv.formats.dump import parse as dump_parse
from trendconv.formats.dump.parse import ParseOptions, Rows, parse_file_set
from trendconv.formats.dump.scan import scan


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


def invoke(*args: str):
    return CliRunner().invoke(app, [str(arg) for arg in args])


A2_DATA = {
    "Module.m.M.forward.0": {"input_args": [V(1)], "output": [], "parameters": {"w": V(2)}},
    "Functional.relu.3.forward": {"input_args": [V(5)], "output": []},
    "Module.m.M.forward.1": {"input_args": [V(3)], "output": [], "parameters": {"w": [V(4)]}},
    "Module.m.M.parameters_grad.0": {"w": [V(0.1)]},
    "Module.m.M.parameters_grad.1": {"w": V(0.2)},
    "Module.m.M.parameters_grad.5": {"w": [V(0.5)]},
    "Module.m.M.parameters_grad": {"w": [V(0.7)]},
}


A2_CONSTRUCT = {
    "Module.m.M.forward.0": None,
    "Module.m.M.forward.1": None,
    "Functional.relu.3.forward": "Module.m.M.forward.1",
}


# Tensors whose type or dtype is a list or an object: msprobe 26.2.0 skips them (test_reference checks it).
UNHASHABLE_DATA = {
    "Module.m.M.forward.0": {
        "input_args": [V(1, type_=["torch.Tensor"]), V(2, dtype={"torch.float32": 1}), V(3)],
        "output": [V(4, dtype=["torch.float32"])],
        "parameters": {"w": V(5, type_={"t": 1})},
    },
    "Module.m.M.parameters_grad.0": {"w": [V(6, dtype=["Float32"])], "b": [V(7)]},
}


def file_set_of(root: Path, text: str | bytes, construct: dict | None = None):
    item = root / "data" / "step0" / "rank0"
    item.mkdir(parents=True, exist_ok=True)
    (item / "dump.json").write_bytes(text.encode() if isinstance(text, str) else text)
    if construct is not None:
        (item / "construct.json").write_text(json.dumps(construct))
    return scan(root / "data").file_sets[0]


ODD_DATA = {
    "Functional.f.0.forward": {
        "input_args": [V(1.0), None, [V(2.0)], {"type": "int", "value": 3}, {"no": "type"}, "text", 7, True],
        "input_kwargs": {"x": V(9.0), "deep": [[{"a": [1, {"b": None}]}]]},
        "output": [T("NaN", "Infinity", "-Infinity", 10**30, dtype="torch.bfloat16")],
        "parameters": {"w": [V(4.0), V(5.0)], "b": V(6.0), "n": None, "e": [], "l": [None, V(1.0)]},
        "is_recompute": 1,
        "extra": {"whatever": [1, 2, 3]},
    },
    "Functional.g.0.forward": {"input_args": [T(" 2.5 ", True, False, None)], "output": []},
    "Module.m.M.backward.0": {"input": [V(0.5)], "output": [V(-0.5)], "input_args": "ignored", "parameters": 3},
    "Module.m.M.parameters_grad.0": {"weight": [V(0.1)], "bias": V(0.2), "gamma": [[V(0.3)]], "x": 1},
    "not an object": [1, 2],
    "also not": "text",
    "no metric here": {"output": [V(1.0)]},
}


STEP_MODE = ParseOptions(micro_step=False)


def shard_bytes(file_set, options: ParseOptions, tmp: Path) -> tuple[bytes, type]:
    """The shard a file set gives, and the kind of rows that made it."""
    dump_parse._NAMING_CACHE.clear()
    rows = parse_file_set(file_set, options)
    table, meta = FORMATS["dump"].parse(file_set, options)
    path = tmp / "shard.parquet"
    shards.write_shard(path, table, meta)
    return path.read_bytes(), type(rows)


def both_readers(file_set, options: ParseOptions, tmp: Path) -> type:
    """The kind of rows the C reader gave, after checking its shard equals the Python path's."""
    with_c, kind = shard_bytes(file_set, options, tmp)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dump_parse, "_extract", None)
        python, python_kind = shard_bytes(file_set, options, tmp)
    assert python_kind is Rows
    assert with_c == python
    return kind


def run_cli(*args, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **(env_extra or {})}
    command = [sys.executable, "-m", "trendconv", *map(str, args)]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


def make_data(root: Path, steps: int = 2, ranks: int = 2) -> Path:
    data = root / "data"
    for step in range(steps):
        for rank in range(ranks):
            write_file_set(data / f"step{step}" / f"rank{rank}", A1_DATA, A1_CONSTRUCT)
    return data


RUN = "Feb20_16-27-56-rank0-b2f0e6a1"


QKV = "module.decoder.layers.0.self_attention.linear_qkv"


ACTV = f"""vpp_stage,name,step,micro_step,min,max,norm,zeros,nans,mean,shape,dtype
0,{QKV}.input,0,0,-4.21875,4.53125,181.022415,0.0,0.0,0.000713,"[4096, 1, 1024]",torch.bfloat16
0,{QKV}.output,0,0,-7.5625,6.90625,402.318817,0.0,0.0,-0.002179,"[4096, 1, 1536]",torch.bfloat16
0,{QKV}.input,0,1,-4.15625,4.40625,180.774902,0.0,0.0,0.000698,"[4096, 1, 1024]",torch.bfloat16
0,{QKV}.output,0,1,-7.4375,6.84375,401.966431,0.0,0.0,-0.002201,"[4096, 1, 1536]",torch.bfloat16
0,{QKV}.input,1,0,-4.25,4.5625,181.203125,0.0,0.0,0.000721,"[4096, 1, 1024]",torch.bfloat16
0,{QKV}.output,1,0,nan,nan,nan,0.0,1.0,nan,"[4096, 1, 1536]",torch.bfloat16
0,{QKV}.input,1,1,-4.1875,4.46875,180.998047,0.0,0.0,0.000705,"[4096, 1, 1024]",torch.bfloat16
0,{QKV}.output,1,1,-7.53125,6.875,402.101563,0.0,0.0,-0.002188,"[4096, 1, 1536]",torch.bfloat16
"""


FC1 = "module.decoder.layers.0.mlp.linear_fc1"


GRAD = f"""vpp_stage,name,step,min,max,norm,zeros,nans,mean,shape,dtype
0,{QKV}.weight,0,-0.000412,0.000398,0.021733,0.0,0.0,-1e-06,"[1536, 1024]",torch.float32
0,{FC1}.weight,0,-0.000367,0.000371,0.030518,0.0,0.0,0.0,"[4096, 1024]",torch.float32
0,{QKV}.weight,1,-0.000405,0.000391,0.021547,0.0,0.0,-1e-06,"[1536, 1024]",torch.float32
0,{FC1}.weight,1,-inf,inf,inf,0.0,0.0,nan,"[4096, 1024]",torch.float32
"""


def write_run(data: Path, files: dict[str, str], run: str = RUN) -> Path:
    directory = data / run
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text)
    return directory


# The Trend Analyzer's statements (docs/trend-db.md §4), with their parameters chosen from the data.
PLUGIN_STATEMENTS = {
    "S2": ("SELECT * FROM global_stats ORDER BY ROWID DESC LIMIT 1", ()),
    "S3": ("SELECT max_rank, min_step, max_step FROM global_stats ORDER BY ROWID DESC LIMIT 1", ()),
    "S5": (
        "SELECT DISTINCT mt.target_id, mt.vpp_stage, mt.target_name, mt.micro_step FROM monitoring_targets mt "
        "WHERE mt.target_id IN (SELECT DISTINCT target_id FROM trend_data WHERE metric_id = :metric) "
        "AND (mt.target_id IN (SELECT ttm.target_id FROM tag_target_mapping ttm JOIN monitoring_tags mtags "
        "ON ttm.tag_id = mtags.tag_id WHERE mtags.tag_name = :tag))",
        ("metric", "tag"),
    ),
    "S6a": ("SELECT DISTINCT tag_name, category FROM monitoring_tags", ()),
    "S6b": (
        "SELECT DISTINCT mt.tag_name, mt.category FROM monitoring_tags mt JOIN tag_target_mapping ttm "
        "ON mt.tag_id = ttm.tag_id JOIN trend_data td ON ttm.target_id = td.target_id WHERE td.metric_id = :metric",
        ("metric",),
    ),
    "S6c": (
        "SELECT DISTINCT mt.tag_name, mt.category FROM monitoring_tags mt WHERE mt.metric_id = :metric",
        ("metric",),
    ),
    "S7 step": (
        "SELECT t.rank, t.step, m.target_name, m.vpp_stage, m.micro_step, t.norm FROM trend_data t "
        "JOIN monitoring_targets m ON t.target_id = m.target_id WHERE t.metric_id = :metric AND t.step = :step",
        ("metric", "step"),
    ),
    "S7 rank with tag": (
        "SELECT t.rank, t.step, m.target_name, m.vpp_stage, m.micro_step, t.max FROM trend_data t "
        "JOIN monitoring_targets m ON t.target_id = m.target_id WHERE t.metric_id = :metric AND t.rank = :rank "
        "AND (t.target_id IN (SELECT ttm.target_id FROM tag_target_mapping ttm JOIN monitoring_tags mtags "
        "ON ttm.tag_id = mtags.tag_id WHERE mtags.tag_name = :tag))",
        ("metric", "rank", "tag"),
    ),
    "S8 module": (
        "SELECT t.step, t.rank, m.target_name, m.vpp_stage, m.micro_step, t.mean FROM trend_data t "
        "JOIN monitoring_targets m ON t.target_id = m.target_id WHERE t.metric_id = :metric AND t.step = :step "
        "AND t.rank = :rank",
        ("metric", "step", "rank"),
    ),
}


def plugin_results(db: Path, metric_name: str, step: int, rank: int, tag: str, statements=None) -> dict[str, list]:
    conn = sqlite3.connect(db)
    try:
        (metric,) = conn.execute(
            "SELECT metric_id FROM monitoring_metrics WHERE metric_name = ?", (metric_name,)
        ).fetchone()
        values = {"metric": metric, "step": step, "rank": rank, "tag": tag}
        results = {}
        for name, (sql, params) in (statements or PLUGIN_STATEMENTS).items():
            rows = conn.execute(sql, {key: values[key] for key in params}).fetchall()
            # ids differ by design: S5 lists ids first, replace them by the target they name
            results[name] = sorted(row[1:] if name == "S5" else row for row in rows)
        return results
    finally:
        conn.close()
