"""Logical equivalence with msprobe data2db --format monitor (mindstudio-probe 26.2.0).

Generated monitor output of several shapes, hand-made quirk cases, and the deliberate differences of
docs/migration.md, each compared table by table by names with trendconv.comparison.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from helpers import ACTV, GRAD, PLUGIN_STATEMENTS, plugin_results, query, write_run
from hypothesis import HealthCheck, given, settings
from random_monitor import monitor_trees, write_monitor_tree
from reference import run_msprobe

from datagen.monitor import generate
from trendconv import api
from trendconv.comparison import diff_databases
from trendconv.summaries import ConvertSummary

pytestmark = pytest.mark.reference  # runs msprobe data2db: `-m 'not reference'` skips these


def convert_both(data: Path, root: Path, *, micro_step: bool, mapping: Path | None = None, seed=0, process_num=1):
    reference = run_msprobe(
        data,
        root / "reference",
        micro_step=micro_step,
        mapping=mapping,
        hash_seed=seed,
        input_format="monitor",
        process_num=process_num,
    )
    options = api.ParseOptions(micro_step=micro_step, mapping=api.load_mapping(mapping))
    ours = api.run(data, root / "ours", options, workers=2, input_format="monitor")
    return reference, ours


def assert_same_as_reference(data: Path, root: Path, **kwargs) -> ConvertSummary:
    reference, ours = convert_both(data, root, **kwargs)
    report = diff_databases(reference, ours.load.db)
    assert report.equal, report.format()
    return ours


SHAPES = {
    "plain": {"ranks": 2, "steps": 3, "layers": 2},
    "pipeline, vpp, k=5, start 100 every 5": {
        "ranks": 4,
        "steps": 6,
        "layers": 4,
        "tp": 1,
        "pp": 2,
        "vpp": 2,
        "step_count_per_record": 5,
        "start_step": 100,
        "step_interval": 5,
    },
    "squashed names, mbs grads, integer counts, 3 micro-batches": {
        "ranks": 2,
        "steps": 2,
        "layers": 2,
        "micro_batches": 3,
        "squash_name": True,
        "monitor_mbs_grad": True,
        "integer_counts": True,
        "nan_every": 2,
    },
    "ops min,norm only; three metrics": {
        "ranks": 1,
        "steps": 3,
        "layers": 2,
        "ops": ("min", "norm"),
        "metrics": ("actv", "grad_reduced", "other"),
    },
}


@pytest.mark.parametrize("micro_step", [True, False])
@pytest.mark.parametrize("shape", SHAPES)
def test_generated_monitor_output(tmp_path, shape, micro_step):
    data = tmp_path / "data"
    generate(data, **SHAPES[shape])
    assert_same_as_reference(data, tmp_path, micro_step=micro_step, seed=3)


def test_the_directory_extras_msprobe_also_leaves_out(tmp_path):
    """anomaly_detected/, module_struct/, stack_info.csv, hook files, split files, .bak copies, sub-directories."""
    data = tmp_path / "data"
    extras = ("anomaly_detected", "module_struct", "stack_info", "hooks", "parts", "bak", "subdir")
    generate(data, ranks=2, steps=2, layers=2, extras=extras)
    ours = assert_same_as_reference(data, tmp_path, micro_step=True)
    bak = next(run for run in sorted(data.iterdir()) if "-rank0-" in run.name).name + "/actv_0-0.csv.bak"
    assert ours.parse.warnings == [
        "2 split CSV files (<metric>_<a>-<b>_part_<i>.csv) left out: msprobe data2db does not read them either, "
        "so their rows are not in the database",
        "16 L2 feature CSV files (*_hook_*.csv) left out, as msprobe data2db does",
        f"1 file with a name that goes on after '.csv' converted, as msprobe data2db does (e.g. {bak}); where such "
        "a file repeats a row of the live file, the live row is kept",
    ]
    assert ours.parse.skipped_files == {
        "L2 feature file (*_hook_*.csv)": 16,
        "split file (<metric>_<a>-<b>_part_<i>.csv)": 2,
        "stack_info.csv (call stacks, no statistics)": 2,
    }
    assert ours.load.duplicates == 128  # the .bak copy of actv_0-0.csv: 2 micro-batches × 64 rows


def test_with_two_reference_workers(tmp_path):
    data = tmp_path / "data"
    generate(data, ranks=4, steps=2, layers=2, pp=2)
    assert_same_as_reference(data, tmp_path, micro_step=True, process_num=2)


@pytest.mark.parametrize("micro_step", [True, False])
def test_mapping_that_merges_targets(tmp_path, micro_step):
    data = tmp_path / "data"
    generate(data, ranks=1, steps=2, layers=2)
    mapping = tmp_path / "mapping.json"
    mapping.write_text(json.dumps({"module.module.": "", "layers.1": "layers.0", "linear_fc": "fc"}))
    assert_same_as_reference(data, tmp_path, micro_step=micro_step, mapping=mapping)


def test_hand_made_cells(tmp_path):
    """Text in stat columns, NA spellings as names, invalid key cells, a missing step column, odd numbers,
    boolean stat columns, numeric names (as text and as floats), float vpp_stage cells, negative micro steps."""
    data = tmp_path / "data"
    write_run(
        data,
        {
            "actv_0-1.csv": ACTV,
            "grad_reduced_0-1.csv": GRAD,
            "other_0-0.csv": "vpp_stage,name,norm,mean\n0,a.weight,abc,1e400\n1,NA,-0.0,2e9\n0,,1_000, 3 \n",
            "exp_avg_0-0.csv": "vpp_stage,name,step,norm\n0,w,0,1\nx,w,1,2\n0,w,1.5,3\n,w,2,4\n0,v,-1,5\n",
        },
    )
    write_run(
        data,
        {
            "other_0-0.csv": "vpp_stage,name,step,min,max,norm\n0,a,0,True,0,1\n0,b,0,FALSE,0.5,0\n0,c,0,,1,-0.0\n",
            "exp_avg_0-0.csv": "vpp_stage,name,step,norm,shape\n0,1,0,5,[1]\n0,2,0,6,[2]\n",
            "exp_avg_sq_0-0.csv": "vpp_stage,name,step,norm\n0,1,0,6.5\n0,2,1,7\n",
            "param_origin_0-0.csv": "vpp_stage,name,step,norm\n1.5,w,0,1\nnan,w,1,2\n-0.5,w,2,3\n 2,w,3,4\n",
            "actv_0-0.csv": "vpp_stage,name,step,micro_step,norm\n0,x,0,-1,1\n0,x,1,0,2\n0,x,1,2,3\n",
        },
        "Feb20_16-27-56-rank2-cccccccc",
    )
    assert_same_as_reference(data, tmp_path, micro_step=True)
    assert_same_as_reference(data, tmp_path / "plain", micro_step=False)


# --- deliberate differences (docs/migration.md) ----------------------------------------------------------------------


def test_difference_a_header_only_metric_is_left_out(tmp_path):
    """msprobe lists the metric in global_stats; trendconv leaves it out (and warns). All else is equal."""
    data = tmp_path / "data"
    write_run(data, {"grad_reduced_0-1.csv": GRAD, "actv_0-0.csv": "vpp_stage,name,step,micro_step,norm,mean\n"})
    reference, ours = convert_both(data, tmp_path, micro_step=True)
    assert [row[1] for row in query(reference, "PRAGMA table_info(global_stats)")][3:] == ["grad_reduced", "actv"]
    assert [row[1] for row in query(ours.load.db, "PRAGMA table_info(global_stats)")][3:] == ["grad_reduced"]
    report = diff_databases(reference, ours.load.db)
    assert [table.table for table in report.tables] == ["global_stats"]


def test_difference_the_newest_run_of_a_rank_wins(tmp_path):
    """msprobe keeps the run listed last (file-system order); trendconv the newest by its time tag."""
    data = tmp_path / "data"
    write_run(data, {"grad_reduced_0-1.csv": GRAD}, "Feb21_10-00-00-rank0-newnewne")
    write_run(data, {"actv_0-1.csv": ACTV}, "Feb20_10-00-00-rank0-oldoldol")
    reference, ours = convert_both(data, tmp_path, micro_step=True)
    assert query(ours.load.db, "SELECT metric_name FROM monitoring_metrics") == [("grad_reduced",)]
    assert query(reference, "SELECT count(*) FROM monitoring_metrics") == [(1,)]


def test_difference_an_all_integer_file_keeps_its_values(tmp_path):
    """msprobe stores NULL for every stat of a file whose every column is an integer; trendconv keeps them."""
    data = tmp_path / "data"
    write_run(data, {"grad_reduced_0-0.csv": "vpp_stage,name,step,norm,nans\n0,1,0,5,0\n0,2,1,7,1\n"})
    reference, ours = convert_both(data, tmp_path, micro_step=False)
    by_name = (
        "SELECT m.target_name, t.step, t.norm, t.nans FROM trend_data t JOIN monitoring_targets m USING (target_id)"
    )
    assert sorted(query(reference, by_name)) == [("1", 0, None, None), ("2", 1, None, None)]
    assert sorted(query(ours.load.db, by_name)) == [("1", 0, 5.0, 0.0), ("2", 1, 7.0, 1.0)]


@pytest.mark.parametrize("metric", ["actv", "grad_reduced"])
def test_plugin_statements_give_the_same_results(tmp_path, metric):
    """The Trend Analyzer's statements replayed on both databases (global_stats by name: its order is arbitrary)."""
    generate(tmp_path / "data", ranks=2, steps=3, layers=2, pp=2)
    reference, ours = convert_both(tmp_path / "data", tmp_path, micro_step=True, seed=1)
    statements = {name: statement for name, statement in PLUGIN_STATEMENTS.items() if name != "S2"}
    for step, rank, tag in [(0, 0, "layers.0"), (2, 1, "linear_qkv"), (4, 0, "weight")]:
        expected = plugin_results(reference, metric, step, rank, tag, statements)
        assert expected["S7 step"]  # the chosen views are not empty
        assert plugin_results(ours.load.db, metric, step, rank, tag, statements) == expected
    assert global_stats_by_name(ours.load.db) == global_stats_by_name(reference)


def global_stats_by_name(db: Path) -> dict:
    conn = sqlite3.connect(db)
    try:
        cursor = conn.execute("SELECT * FROM global_stats ORDER BY ROWID DESC LIMIT 1")
        row = cursor.fetchone()
        names = [column[0] for column in cursor.description]
    finally:
        conn.close()
    return {name: sorted(value.split(",")) if isinstance(value, str) else value for name, value in zip(names, row)}


@settings(
    max_examples=int(os.environ.get("TRENDCONV_EXAMPLES", "12")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(tree=monitor_trees(), micro_step=...)
def test_random_monitor_output_matches_the_reference(tmp_path, tree, micro_step: bool):
    root = tmp_path / "case"
    shutil.rmtree(root, ignore_errors=True)
    write_monitor_tree(root / "data", tree)
    assert_same_as_reference(root / "data", root, micro_step=micro_step)
