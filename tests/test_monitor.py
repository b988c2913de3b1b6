"""Monitor CSV data end to end: discovery, cell rules, a worked example, quirks, the CLI."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import A1_CONSTRUCT, A1_DATA, ACTV, FC1, GRAD, QKV, RUN, query, write_file_set, write_run
from typer.testing import CliRunner

from trendconv import api, shards
from trendconv.cli import app
from trendconv.errors import DataError
from trendconv.formats import FORMATS
from trendconv.formats.monitor import metrics, rules
from trendconv.formats.monitor.scan import scan_monitor
from trendconv.loading import connection, schema
from trendconv.scan.packed import PackedUnits
from trendconv.summaries import ConvertSummary


def names(found) -> list[str]:
    return [fmt.name for fmt in found]


TREND = """
SELECT t.rank, t.step, m.target_name, m.micro_step, k.metric_name, t.norm, t.min, t.max, t.zeros, t.nans, t.mean
FROM trend_data t JOIN monitoring_targets m USING (target_id) JOIN monitoring_metrics k USING (metric_id)
ORDER BY k.metric_id, m.target_name, m.micro_step, t.step
"""


@pytest.fixture
def example(tmp_path: Path) -> Path:
    """A worked example: two metrics, two steps of two micro-batches, NaN and ±inf cells
    (docs/monitor-format.md §7-§9)."""
    data = tmp_path / "data"
    write_run(data, {"actv_0-1.csv": ACTV, "grad_reduced_0-1.csv": GRAD})
    return data


def convert(data: Path, out: Path, *, micro_step: bool = True, workers: int = 1, **kwargs) -> ConvertSummary:
    options = api.ParseOptions(micro_step=micro_step, **kwargs)
    return api.run(data, out, options, workers=workers, input_format="monitor")


def invoke(*args):
    return CliRunner().invoke(app, [str(arg) for arg in args])


def test_worked_example_in_micro_step_mode(example, tmp_path):
    db = convert(example, tmp_path / "out").load.db
    assert db == tmp_path / "out" / "monitor_data.trend.db"
    assert query(db, "SELECT * FROM global_stats") == [
        (0, 3, 0, "norm,min,max,zeros,nans,mean", "norm,min,max,zeros,nans,mean")
    ]
    assert [row[1] for row in query(db, "PRAGMA table_info(global_stats)")] == [
        "min_step",
        "max_step",
        "max_rank",
        "actv",
        "grad_reduced",
    ]
    assert query(db, "SELECT * FROM monitoring_metrics") == [(1, "actv"), (2, "grad_reduced")]
    assert query(db, "SELECT * FROM monitoring_targets") == [
        (1, f"{QKV}.input", 0, 0),
        (2, f"{QKV}.output", 0, 0),
        (3, f"{QKV}.weight", 0, 0),
        (4, f"{FC1}.weight", 0, 0),
    ]
    assert query(db, TREND) == [
        (0, 0, f"{QKV}.input", 0, "actv", 181.022415, -4.21875, 4.53125, 0.0, 0.0, 0.000713),
        (0, 1, f"{QKV}.input", 0, "actv", 180.774902, -4.15625, 4.40625, 0.0, 0.0, 0.000698),
        (0, 2, f"{QKV}.input", 0, "actv", 181.203125, -4.25, 4.5625, 0.0, 0.0, 0.000721),
        (0, 3, f"{QKV}.input", 0, "actv", 180.998047, -4.1875, 4.46875, 0.0, 0.0, 0.000705),
        (0, 0, f"{QKV}.output", 0, "actv", 402.318817, -7.5625, 6.90625, 0.0, 0.0, -0.002179),
        (0, 1, f"{QKV}.output", 0, "actv", 401.966431, -7.4375, 6.84375, 0.0, 0.0, -0.002201),
        (0, 2, f"{QKV}.output", 0, "actv", None, None, None, 0.0, 1.0, None),
        (0, 3, f"{QKV}.output", 0, "actv", 402.101563, -7.53125, 6.875, 0.0, 0.0, -0.002188),
        (0, 0, f"{FC1}.weight", 0, "grad_reduced", 0.030518, -0.000367, 0.000371, 0.0, 0.0, 0.0),
        (0, 2, f"{FC1}.weight", 0, "grad_reduced", 1000000001.0, -1000000001.0, 1000000001.0, 0.0, 0.0, None),
        (0, 0, f"{QKV}.weight", 0, "grad_reduced", 0.021733, -0.000412, 0.000398, 0.0, 0.0, -1e-06),
        (0, 2, f"{QKV}.weight", 0, "grad_reduced", 0.021547, -0.000405, 0.000391, 0.0, 0.0, -1e-06),
    ]
    assert query(db, "SELECT tag_id, tag_name, category, metric_id FROM monitoring_tags ORDER BY tag_id") == [
        (1, "input", "module", 1),
        (2, "linear_qkv", "module", 1),
        (3, "self_attention", "module", 1),
        (4, "layers.0", "layer", 1),
        (5, "layers", "module", 1),
        (6, "decoder", "module", 1),
        (7, "module", "module", 1),
        (8, "output", "module", 1),
        (9, "weight", "module", 2),
        (10, "linear_qkv", "module", 2),
        (11, "self_attention", "module", 2),
        (12, "layers.0", "layer", 2),
        (13, "layers", "module", 2),
        (14, "decoder", "module", 2),
        (15, "module", "module", 2),
        (16, "linear_fc1", "module", 2),
        (17, "mlp", "module", 2),
    ]
    assert query(db, "SELECT count(*) FROM tag_target_mapping") == [(28,)]
    assert query(db, "SELECT * FROM sqlite_sequence ORDER BY name") == [
        ("monitoring_metrics", 2),
        ("monitoring_tags", 17),
        ("monitoring_targets", 4),
    ]
    assert os.stat(db).st_mode & 0o777 == 0o640


def test_worked_example_without_micro_steps(example, tmp_path):
    summary = convert(example, tmp_path / "out", micro_step=False)
    db = summary.load.db
    assert (summary.load.rows, summary.load.targets, summary.load.tag_links) == (12, 6, 42)
    assert query(db, "SELECT min_step, max_step, max_rank FROM global_stats") == [(0, 1, 0)]
    assert query(db, "SELECT * FROM monitoring_targets") == [
        (1, f"{QKV}.input", 0, 0),
        (2, f"{QKV}.output", 0, 0),
        (3, f"{QKV}.input", 0, 1),
        (4, f"{QKV}.output", 0, 1),
        (5, f"{QKV}.weight", 0, 0),
        (6, f"{FC1}.weight", 0, 0),
    ]
    assert query(db, "SELECT step, target_id, norm FROM trend_data WHERE metric_id = 1 ORDER BY target_id, step") == [
        (0, 1, 181.022415),
        (1, 1, 181.203125),
        (0, 2, 402.318817),
        (1, 2, None),
        (0, 3, 180.774902),
        (1, 3, 180.998047),
        (0, 4, 401.966431),
        (1, 4, 402.101563),
    ]


def test_shards_of_many_csv_files_share_a_chunk_file_and_carry_no_ids(example, tmp_path):
    summary = convert(example, tmp_path / "out")
    shard_dir = tmp_path / "out" / ".trendconv" / "monitor" / "shards"
    [chunk] = [path.relative_to(shard_dir).as_posix() for path in sorted(shard_dir.rglob("*")) if path.is_file()]
    assert chunk.startswith("_chunks/") and chunk.endswith(".parquet")
    table = pq.read_table(shard_dir / chunk)
    footer = orjson.loads(pq.ParquetFile(shard_dir / chunk).metadata.metadata[b"trendconv"])
    assert (footer["chunk_format"], footer["chunk"]) == (1, chunk)
    units = [(unit["file"], unit["row_start"], unit["rows"], unit["sources"][0]["path"]) for unit in footer["units"]]
    assert units == [
        ("actv_0-1.csv", 0, 8, f"{RUN}/actv_0-1.csv"),
        ("grad_reduced_0-1.csv", 8, 4, f"{RUN}/grad_reduced_0-1.csv"),
    ]
    assert table.column_names == [
        "rank",
        "metric",
        "target_name",
        "vpp_stage",
        "step",
        "micro_step",
        *metrics.STATS[:6],
    ]
    means = table.column("mean").to_pylist()[8:]
    assert means[:3] == [-1e-06, 0.0, -1e-06] and math.isnan(means[3])  # NaN kept; load turns it into NULL
    assert table.column("norm").to_pylist()[8 + 3] == math.inf  # clipping is the load's job too
    assert summary.parse.files == 2


def test_micro_step_slots_are_the_largest_count_over_all_files(tmp_path):
    """docs/monitor-format.md §7: steps 100 and 105 with two micro-batches → slots 0/1 and 2/3; weight rows sit in
    the first slot."""
    data = tmp_path / "data"
    actv = "vpp_stage,name,step,micro_step,norm\n" + "".join(
        f"0,a.input,{step},{micro},{step + micro}\n" for step in (100, 105) for micro in (0, 1)
    )
    grad = "vpp_stage,name,step,norm\n0,a.weight,100,1.5\n0,a.weight,105,2.5\n"
    write_run(data, {"actv_100-109.csv": actv, "grad_reduced_100-109.csv": grad})
    db = convert(data, tmp_path / "out").load.db
    assert query(db, "SELECT step, target_id, metric_id, norm FROM trend_data ORDER BY metric_id, step") == [
        (0, 1, 1, 100.0),
        (1, 1, 1, 101.0),
        (2, 1, 1, 105.0),
        (3, 1, 1, 106.0),
        (0, 2, 2, 1.5),
        (2, 2, 2, 2.5),
    ]
    assert query(db, "SELECT min_step, max_step FROM global_stats") == [(0, 3)]


def test_non_micro_step_bounds_never_go_below_zero(tmp_path):
    data = tmp_path / "data"
    write_run(data, {"grad_reduced_0-0.csv": "vpp_stage,name,step,norm\n0,w,-5,1\n0,w,-3,2\n"})
    db = convert(data, tmp_path / "out", micro_step=False).load.db
    assert query(db, "SELECT min_step, max_step FROM global_stats") == [(-5, 0)]


def test_stat_columns_are_those_found_and_max_rank_is_the_largest_rank(tmp_path):
    data = tmp_path / "data"
    write_run(data, {"other_0-0.csv": "vpp_stage,name,step,mean,nans\n0,x.weight,0,1.0,0.0\n"})
    write_run(data, {"other_0-0.csv": "vpp_stage,name,step,mean\n0,x.weight,0,2.0\n"}, "Feb20_16-27-56-rank3-aaaaaaaa")
    db = convert(data, tmp_path / "out").load.db
    assert [row[1] for row in query(db, "PRAGMA table_info(trend_data)")] == [
        "rank",
        "step",
        "target_id",
        "metric_id",
        "nans",
        "mean",
    ]
    assert query(db, "SELECT * FROM global_stats") == [(0, 0, 3, "nans,mean")]
    assert query(db, "SELECT rank, nans, mean FROM trend_data ORDER BY rank") == [(0, 0.0, 1.0), (3, None, 2.0)]


def test_duplicates_keep_the_first_row_and_are_counted(tmp_path):
    data = tmp_path / "data"
    grad = "vpp_stage,name,step,norm\n0,w,0,1\n0,w,0,2\n"
    write_run(data, {"grad_reduced_0-0.csv": grad, "grad_reduced_0-0.csv.bak": "vpp_stage,name,step,norm\n0,w,0,3\n"})
    summary = convert(data, tmp_path / "out")
    assert query(summary.load.db, "SELECT norm FROM trend_data") == [(1.0,)]
    assert summary.load.duplicates == 2
    assert summary.parse.warnings == [
        f"1 file with a name that goes on after '.csv' converted, as msprobe data2db does (e.g. {RUN}/"
        "grad_reduced_0-0.csv.bak); where such a file repeats a row of the live file, the live row is kept"
    ]


def test_the_scan_counts_files_named_on_after_csv_and_names_the_first_in_processing_order(tmp_path):
    data = tmp_path / "data"
    text = "vpp_stage,name,step,norm\n0,w,0,1\n"
    write_run(data, {"actv_0-0.csv.bak": text}, "Feb20_16-27-56-rank1-ab")
    write_run(
        data, {"actv_5-5.csv.bak": text, "actv_1-1.csv.old": text, "actv_1-1.csv": text}, "Feb20_16-27-56-rank0-ab"
    )
    assert scan_monitor(data).warnings == [
        "3 files with a name that goes on after '.csv' converted, as msprobe data2db does (e.g. "
        "Feb20_16-27-56-rank0-ab/actv_1-1.csv.old); where such a file repeats a row of the live file, the live row is "
        "kept"
    ]


def test_invalid_rows_are_skipped_and_counted(tmp_path):
    data = tmp_path / "data"
    grad = "vpp_stage,name,step,norm\n0,w,0,1\nx,w,1,2\n0,w,y,3\n,w,2,4\n0,w,3,5\n"
    write_run(data, {"grad_reduced_0-0.csv": grad})
    summary = convert(data, tmp_path / "out", micro_step=False)
    assert query(summary.load.db, "SELECT step, norm FROM trend_data ORDER BY step") == [(0, 1.0), (3, 5.0)]
    assert dict(summary.parse.skipped) == {
        "row whose step is not an integer": 1,
        "row whose vpp_stage is not an integer": 2,
    }


def test_a_metric_without_rows_is_left_out_with_a_warning(tmp_path):
    """docs/monitor-format.md Q1: msprobe keeps it in global_stats (and may empty trend_data); here it is left out,
    and said so."""
    data = tmp_path / "data"
    header_only = "vpp_stage,name,step,micro_step,entropy,shape,dtype\n"
    write_run(data, {"grad_reduced_0-0.csv": "vpp_stage,name,step,norm\n0,w,0,1\n", "actv_0-0.csv": header_only})
    summary = convert(data, tmp_path / "out")
    db = summary.load.db
    assert query(db, "SELECT * FROM global_stats") == [(0, 0, 0, "norm")]
    assert query(db, "SELECT metric_name FROM monitoring_metrics") == [("grad_reduced",)]
    assert summary.load.warnings == [
        "actv: 1 CSV file without a valid data row; the metric is left out of the database "
        "(msprobe data2db lists it in global_stats and may write no trend rows at all)"
    ]


def test_no_rows_and_no_stats_are_data_errors(tmp_path):
    rowless = tmp_path / "rowless"
    write_run(rowless, {"actv_0-0.csv": "vpp_stage,name,step,micro_step,norm\n"})
    with pytest.raises(DataError, match="^no data rows in any of the 1 monitor CSV files$"):
        convert(rowless, tmp_path / "out")
    statless = tmp_path / "statless"
    write_run(statless, {"actv_0-0.csv": "vpp_stage,name,step,micro_step,shape\n0,a,0,0,[1]\n"})
    with pytest.raises(DataError) as caught:
        convert(statless, tmp_path / "out")
    assert str(caught.value) == "no stat column (norm, min, max, zeros, nans, mean, ...) in any monitor CSV file"
    assert not (tmp_path / "out" / "monitor_data.trend.db").exists()
    assert [path.name for path in (tmp_path / "out").iterdir()] == [".trendconv"]


def test_mapping_renames_before_targets_and_tags(tmp_path):
    data = tmp_path / "data"
    write_run(data, {"grad_reduced_0-0.csv": "vpp_stage,name,step,norm\n0,module.a.0.w,0,1\n0,b.0.w,0,2\n"})
    db = convert(data, tmp_path / "out", mapping=(("module.", ""), ("a.", "b."))).load.db
    assert query(db, "SELECT target_name FROM monitoring_targets") == [("b.0.w",)]
    assert query(db, "SELECT tag_name, category FROM monitoring_tags ORDER BY tag_id") == [
        ("w", "module"),
        ("b.0", "layer"),
        ("b", "module"),
    ]


def test_workers_and_hash_seed_do_not_change_the_bytes(example, tmp_path):
    for extra in range(3):
        write_run(
            example,
            {"actv_0-1.csv": ACTV, "other_0-1.csv": GRAD},
            f"Feb20_16-27-5{extra}-rank{extra + 1}-0000000{extra}",
        )
    one = convert(example, tmp_path / "one", workers=1).load.db.read_bytes()
    two = convert(example, tmp_path / "two", workers=2).load.db.read_bytes()
    assert one == two
    env = {**os.environ, "PYTHONHASHSEED": "123"}
    command = [
        sys.executable,
        "-m",
        "trendconv",
        "run",
        example,
        "--db",
        tmp_path / "seed",
        "--format",
        "monitor",
        "-q",
    ]
    subprocess.run([str(part) for part in command], env=env, check=True)
    assert (tmp_path / "seed" / "monitor_data.trend.db").read_bytes() == one


# --- discovery (docs/monitor-format.md §3) --------------------------------------------------------------------------


def test_scan_sorts_and_reports_what_it_leaves_out(tmp_path):
    data = tmp_path / "data"
    names = ["actv_10-10.csv", "actv_2-2.csv", "stack_info.csv", "actv_0-0_part_0.csv", "linear_hook_0-0.csv"]
    write_run(data, {name: "vpp_stage,name,step,norm\n" for name in names} | {"notes.txt": "x"})
    (data / RUN / "sub").mkdir()
    (data / "anomaly_detected").mkdir()
    (data / "module_struct" / "rank0").mkdir(parents=True)
    (data / RUN / "actv_10-10.csv").write_text("vpp_stage,name,step,norm\n0,w,10,1.5\n")
    result = scan_monitor(data)
    assert [csv_file.name for csv_file in result.files] == ["actv_2-2.csv", "actv_10-10.csv"]
    # the sizes the parse stage plans by, as the scan saw them: no second look at each file
    assert [FORMATS["monitor"].size(csv_file) for csv_file in result.files] == [25, 36]
    assert [csv_file.path for csv_file in result.files] == [data / RUN / "actv_2-2.csv", data / RUN / "actv_10-10.csv"]
    assert dict(result.skipped_files) == {
        "L2 feature file (*_hook_*.csv)": 1,
        "not a metric CSV file": 1,
        "split file (<metric>_<a>-<b>_part_<i>.csv)": 1,
        "stack_info.csv (call stacks, no statistics)": 1,
    }
    assert result.warnings == [
        "1 split CSV file (<metric>_<a>-<b>_part_<i>.csv) left out: msprobe data2db does not read them either, "
        "so their rows are not in the database",
        "1 L2 feature CSV file (*_hook_*.csv) left out, as msprobe data2db does",
    ]


def test_the_newest_run_of_a_rank_is_used_and_the_other_named(tmp_path):
    data = tmp_path / "data"
    old, new = "Mar01_09-00-00-rank0-11111111", "Mar02_08-00-00-rank0-22222222"
    write_run(data, {"other_0-0.csv": "vpp_stage,name,step,norm\n0,w,0,1\n"}, new)
    write_run(data, {"other_0-0.csv": "vpp_stage,name,step,norm\n0,w,0,9\n", "actv_0-0.csv": ""}, old)
    result = scan_monitor(data)
    assert [csv_file.relative for csv_file in result.files] == [f"{new}/other_0-0.csv"]
    assert result.warnings == [
        f"{data / old}: another run of rank0; using the newer {new} only, 2 CSV files of this run left out "
        "(msprobe data2db also keeps one run per rank)"
    ]


def test_rank_strings_with_leading_zeros_are_separate_runs_of_one_rank(tmp_path):
    data = tmp_path / "data"
    write_run(data, {"other_0-0.csv": "vpp_stage,name,step,norm\n0,w,0,1\n"}, "Feb20_16-27-56-rank7-aaaaaaaa")
    write_run(data, {"other_0-0.csv": "vpp_stage,name,step,norm\n0,w,0,2\n0,v,0,3\n"}, "Feb20_16-27-56-rank007-bb")
    summary = convert(data, tmp_path / "out")
    assert query(summary.load.db, "SELECT rank, target_id, norm FROM trend_data ORDER BY target_id") == [
        (7, 1, 2.0),
        (7, 2, 3.0),
    ]
    assert summary.load.duplicates == 1


def test_the_scan_holds_its_files_packed_and_gives_them_back_whole_in_order(tmp_path):
    """A run of 100,000 files: the scan's units are kept packed (trendconv.scan.packed), not as objects, and come
    back with every field, the steps and size of the name and file included, in processing order."""
    data = tmp_path / "data"
    text = "vpp_stage,name,step,norm\n0,w,1000,1\n"
    for rank in (1, 0):
        write_run(data, {"actv_1000-1999.csv": text, "actv_grad_0-999.csv": text * 2}, f"Feb20_16-27-56-rank{rank}-ab")
    files = scan_monitor(data).files
    assert isinstance(files, PackedUnits)
    fields = [(f.rank, f.run_dir, f.name, f.metric, f.data, f.first, f.last, f.size) for f in files]
    assert fields == [
        (rank, f"Feb20_16-27-56-rank{rank}-ab", name, metric, data, first, last, len(text) * copies)
        for rank in (0, 1)
        for name, metric, first, last, copies in (
            ("actv_1000-1999.csv", "actv", 1000, 1999, 1),
            ("actv_grad_0-999.csv", "actv_grad", 0, 999, 2),
        )
    ]


def test_a_29_february_run_is_a_date_and_a_bad_time_tag_an_error(tmp_path):
    data = tmp_path / "data"
    write_run(data, {"other_0-0.csv": "vpp_stage,name,step,norm\n0,w,0,1\n"}, "Feb29_10-00-00-rank3-cafebabe")
    assert [csv_file.rank for csv_file in scan_monitor(data).files] == [3]
    (data / "run_a-rank0-zz").mkdir()
    with pytest.raises(DataError) as caught:
        scan_monitor(data)
    assert str(caught.value) == (
        f"{data / 'run_a-rank0-zz'}: named like a monitor run directory, but 'run_a' is not a time tag like "
        "'Feb20_16-27-56'; rename or move it"
    )


def test_no_run_directory_and_no_csv_are_data_errors(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError) as caught:
        scan_monitor(tmp_path / "empty")
    assert str(caught.value) == (
        f"{tmp_path / 'empty'}: no monitor data: no run directories (expected names like "
        "'Feb20_16-27-56-rank0-1a2b3c4d')"
    )
    write_run(tmp_path / "bare", {"stack_info.csv": "x\n"})
    with pytest.raises(DataError) as caught:
        scan_monitor(tmp_path / "bare")
    assert str(caught.value) == f"{tmp_path / 'bare'}: no monitor data: the run directories hold no metric CSV files"


# --- reading CSV files (docs/monitor-format.md §3.3) ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty file: no header line"),
        (b"vpp_stage,name,step,norm\n0,w,0,1,2\n", "line 2: 5 fields, the header has 4"),
        (b"vpp_stage,name,step,norm\n0,w\xff,0,1\n", "line 2, field 2: not UTF-8 text"),
    ],
)
def test_unreadable_csv_files_are_errors_naming_the_file(tmp_path, content, message):
    data = tmp_path / "data"
    run = write_run(data, {})
    (run / "other_0-0.csv").write_bytes(content)
    result = invoke("run", data, "--db", tmp_path / "out", "--format", "monitor", "-j", "1")
    assert (result.exit_code, result.stderr) == (1, f"error: {run / 'other_0-0.csv'}: {message}\n")
    assert not (tmp_path / "out" / "monitor_data.trend.db").exists()


def test_short_rows_are_padded_bom_and_crlf_are_read(tmp_path):
    data = tmp_path / "data"
    run = write_run(data, {})
    (run / "other_0-0.csv").write_bytes(b"\xef\xbb\xbfvpp_stage,name,step,norm,mean\r\n0,w,0,1\r\n0,v,0,2,3\r\n")
    db = convert(data, tmp_path / "out").load.db
    assert query(db, "SELECT target_id, norm, mean FROM trend_data ORDER BY target_id") == [
        (1, 1.0, None),
        (2, 2.0, 3.0),
    ]


def test_stat_cells_follow_python_float_and_pandas_na():
    column = pa.array(["1.5", " 2 ", "1e400", "-inf", "nan", "NA", "", "abc", "1_000", "0x10"])
    values = rules.stat_values(column).to_pylist()
    assert values[:4] == [1.5, 2.0, float("inf"), float("-inf")]
    assert [value != value for value in values[4:7]] == [True, True, True]  # NaN
    assert values[7:] == [None, 1000.0, None]
    assert rules.stat_values(pa.array(["0.5", "-0.0"])).to_pylist() == [0.5, -0.0]


def test_name_cells_as_pandas_types_them():
    def names(cells: list[str], kind: str | None = None) -> list[str]:
        column = pa.array(cells)
        return rules.name_values(column, kind or rules.column_kind(column)).to_pylist()

    assert names(["a.b", "NA", "", "None"]) == ["a.b", "nan", "nan", "nan"]
    assert names(["1", "2"]) == ["1", "2"]
    assert names(["1", "2.50"]) == ["1.0", "2.5"]
    assert names(["1", "2"], rules.FLOAT) == ["1.0", "2.0"]  # the file is all numbers, one column a float
    assert rules.row_kind([pa.array(["1"]), pa.array(["0.5"])]) == rules.FLOAT
    assert rules.row_kind([pa.array(["1"]), pa.array(["a"])]) is None


def test_integer_cells_as_pandas_types_them():
    assert rules.integer_values(pa.array(["0", "1", "-1"])).to_pylist() == [0, 1, -1]
    assert rules.integer_values(pa.array(["1.0", "1.5", "nan"])).to_pylist() == [1, 1, None]
    assert rules.integer_values(pa.array(["1", " 2", "x", "1.0"])).to_pylist() == [1, 2, None, None]
    assert rules.integer_values(pa.array(["inf", "1e20", "2"])).to_pylist() == [None, None, 2]
    assert rules.integer_values(pa.array(["99999999999999999999", "2"])).to_pylist() == [None, 2]


# --- the command line -----------------------------------------------------------------------------------------------


def test_auto_converts_dump_and_monitor_data_found_side_by_side(example, tmp_path):
    write_file_set(example / "step0" / "rank0", A1_DATA, A1_CONSTRUCT)
    result = invoke("run", example, "--db", tmp_path / "out", "-j", "1")
    assert result.exit_code == 0, result.output
    out = tmp_path / "out"
    assert sorted(path.name for path in out.glob("*.trend.db")) == ["dump_data.trend.db", "monitor_data.trend.db"]
    lines = result.stdout.splitlines()
    assert lines[0] == f"wrote {out / 'dump_data.trend.db'} ({(out / 'dump_data.trend.db').stat().st_size} bytes)"
    monitor_db = out / "monitor_data.trend.db"
    assert f"wrote {monitor_db} ({monitor_db.stat().st_size} bytes)" in lines
    assert f"  2 monitor CSV files: 2 parsed, 0 reused (shards in {out / '.trendconv'})" in lines
    before = monitor_db.read_bytes()
    monitor_db.unlink()
    reloaded = invoke("load", out / ".trendconv", "--db", out, "-q")
    assert reloaded.exit_code == 0, reloaded.output
    assert monitor_db.read_bytes() == before


def test_parse_then_load_of_monitor_data_and_format_forgetting(example, tmp_path):
    work = tmp_path / "work"
    parsed = invoke("parse", example, "--work", work, "--format", "monitor", "-j", "1")
    assert parsed.exit_code == 0, parsed.output
    assert parsed.stdout.splitlines()[:2] == [
        f"parsed 2 monitor CSV files into {work}/monitor/shards: 2 parsed, 0 reused",
        "  rows 12",
    ]
    again = invoke("parse", example, "--work", work, "--format", "monitor", "-j", "1")
    assert again.stdout.splitlines()[0] == f"parsed 2 monitor CSV files into {work}/monitor/shards: 0 parsed, 2 reused"
    assert names(api.formats_in_work(work)) == ["monitor"]
    loaded = invoke("load", work, "--db", tmp_path / "out")
    assert loaded.exit_code == 0, loaded.output
    assert loaded.stdout.splitlines()[1] == "  rows 12, targets 4, tags 17, tag links 28"
    assert not (tmp_path / "out" / "dump_data.trend.db").exists()


def test_data2db_format_monitor(example, tmp_path):
    result = invoke("data2db", "--data", example, "--db", tmp_path / "out", "--format", "monitor")
    assert result.exit_code == 0, result.output
    assert query(tmp_path / "out" / "monitor_data.trend.db", "SELECT count(*) FROM trend_data") == [(12,)]
    dump_only = invoke("data2db", "--data", example, "--db", tmp_path / "dump", "--format", "dump")
    assert (dump_only.exit_code, dump_only.stderr) == (
        1,
        f"error: {example}: no dump data: no 'step*' directories (expected names like 'step0')\n",
    )


def test_inspect_monitor_shards(example, tmp_path):
    write_file_set(example / "step0" / "rank0", A1_DATA, A1_CONSTRUCT)
    assert invoke("run", example, "--db", tmp_path / "out", "-j", "1", "-q").exit_code == 0
    work = tmp_path / "out" / ".trendconv"
    with (example / RUN / "grad_reduced_0-1.csv").open("a") as changed:
        changed.write("0,late.weight,1,1.0\n")
    dump = invoke("inspect", work)
    assert dump.stdout.splitlines()[3] == f"WORK also holds monitor shards: trendconv inspect {work} --format monitor"
    result = invoke("inspect", work, "--format", "monitor")
    digest = api.ParseOptions().mapping_sha256[:12]
    assert (result.exit_code, result.stdout) == (
        0,
        f"WORK {work} (monitor data)\n"
        f"DATA {example} (micro-step, mapping sha256 {digest})\n"
        "parse complete\n"
        f"WORK also holds dump shards: trendconv inspect {work} --format dump\n"
        "rank  file                                                status  rows  skipped\n"
        f"   0  {RUN}/actv_0-1.csv              ok     8\n"
        f"   0  {RUN}/grad_reduced_0-1.csv   stale     4\n"
        "total: 2 shards (1 ok, 1 stale); rows 12 (actv 8, actv_grad 0, exp_avg 0, exp_avg_sq 0, grad_unreduced 0, "
        "grad_reduced 4, param_origin 0, param_updated 0, other 0); skipped: none\n",
    )
    document = orjson.loads(invoke("inspect", work, "--format", "monitor", "--json").stdout)
    [chunk] = (work / "monitor" / "shards" / "_chunks").iterdir()
    assert document["shards"][0] == {
        "file": f"{RUN}/actv_0-1.csv",
        "rank": 0,
        "shard": chunk.name,  # the chunk file that holds its shard
        "status": "ok",
        "rows": 8,
        "rows_per_metric": dict.fromkeys(metrics.METRICS, 0) | {"actv": 8},
        "skipped": {},
    }
    assert (document["input_format"], document["other_formats"]) == ("monitor", ["dump"])


@pytest.mark.parametrize(
    ("fault", "reused"),
    # the three files' shards are written as one chunk: killed before it, none is reused; after it, all three
    [("parse-before-write", 0), ("parse-shard", 3), ("load-shard@2", 3), ("load-before-rename", 3)],
)
def test_sigkill_then_rerun_gives_the_clean_monitor_db(example, tmp_path, fault, reused):
    write_run(example, {"other_0-1.csv": GRAD})
    clean = convert(example, tmp_path / "clean").load.db.read_bytes()
    out = tmp_path / "out"
    command = [
        sys.executable,
        "-m",
        "trendconv",
        "run",
        str(example),
        "--db",
        str(out),
        "-j",
        "1",
        "--format",
        "monitor",
    ]
    killed = subprocess.run([*command, "-q"], env={**os.environ, "TRENDCONV_FAULT": fault}, capture_output=True)
    assert killed.returncode == -9
    assert not (out / "monitor_data.trend.db").exists()
    again = subprocess.run(command, capture_output=True, text=True, check=True)
    assert f"  3 monitor CSV files: {3 - reused} parsed, {reused} reused" in again.stdout
    assert (out / "monitor_data.trend.db").read_bytes() == clean
    assert sorted(path.name for path in out.iterdir()) == [
        ".monitor_data.trend.db.files.json",
        ".trendconv",
        "monitor_data.trend.db",
    ]


def test_small_files_travel_to_workers_in_chunks(example, tmp_path, monkeypatch):
    from trendconv.parsing import runner as parse_stage

    for step in range(2, 7):
        write_run(example, {f"other_{step}-{step}.csv": "vpp_stage,name,step,norm\n0,w,0,1\n"})  # 33 bytes each
    _, tasks = parse_stage.plan(example, tmp_path / "work", api.ParseOptions(), FORMATS["monitor"])
    sizes = [task.unit.path.stat().st_size for task in tasks]
    assert sizes == [len(ACTV), len(GRAD), 33, 33, 33, 33, 33]
    monkeypatch.setattr(parse_stage, "CHUNK_BYTES", len(ACTV) + len(GRAD))
    assert [len(chunk) for chunk in parse_stage.chunks(tasks, most=3)] == [2, 3, 2]
    assert [len(chunk) for chunk in parse_stage.chunks(tasks, most=1)] == [1] * 7
    assert [task for chunk in parse_stage.chunks(tasks) for task in chunk] == list(tasks)


def test_monitor_databases_get_the_read_indexes(example, tmp_path):
    db = convert(example, tmp_path / "out").load.db
    assert query(db, "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL ORDER BY name") == [
        ("idx_trend_metric_step",),
        ("idx_trend_metric_target",),
        ("idx_ttm_target",),
    ]
    assert query(db, "SELECT count(*) > 0 FROM sqlite_stat1") == [(1,)]
    plan = query(db, "EXPLAIN QUERY PLAN SELECT * FROM trend_data WHERE metric_id = 1 AND step = 0")
    assert "idx_trend_metric_step" in plan[0][-1]


# 20 rows: rank 0's 8 actv and 4 grad_reduced rows, rank 3's 8 actv rows (its ninth repeats a key). In micro-step
# mode 4 targets on slots 0-3 (the weights on 0 and 2); without, 6 targets on steps 0-1. E.g. "20 10 3 1 1": 2 ranks,
# 8 (rank, step) pairs (20 / 8 rounds up to 3), 20 (rank, step, target) triples.
EXPECTED_TREND_STAT1 = {
    True: [
        ("trend_data", "idx_trend_metric_step", "20 10 4"),
        ("trend_data", "idx_trend_metric_target", "20 10 5"),
        ("trend_data", "trend_data", "20 10 3 1 1"),
    ],
    False: [
        ("trend_data", "idx_trend_metric_step", "20 10 5"),
        ("trend_data", "idx_trend_metric_target", "20 10 4"),
        ("trend_data", "trend_data", "20 10 5 1 1"),
    ],
}


def analyzed_stat1(db: Path, copy: Path) -> list[tuple]:
    """sqlite_stat1 as a full ANALYZE writes it for a copy of DB."""
    shutil.copy(db, copy)
    conn = connection.Connection(copy)
    conn.execute("DELETE FROM sqlite_stat1; DELETE FROM sqlite_stat4; ANALYZE")
    conn.close()
    return query(copy, "SELECT tbl, idx, stat FROM sqlite_stat1 ORDER BY tbl, idx")


@pytest.mark.parametrize("micro_step", [True, False])
def test_monitor_statistics_are_what_analyze_writes_without_its_scan(example, tmp_path, micro_step):
    """trend_data's sqlite_stat1 rows are counted as its index pages are made (ANALYZE reads only the small tables,
    so trend_data has no sqlite_stat4 samples, as in a dump database); they are those ANALYZE would write, with
    a second rank, other step ranges and a duplicate row."""
    write_run(example, {"actv_0-1.csv": ACTV + ACTV.splitlines(keepends=True)[-1]}, "Feb20_16-27-56-rank3-aaaaaaaa")
    db = convert(example, tmp_path / "out", micro_step=micro_step).load.db
    stat1 = query(db, "SELECT tbl, idx, stat FROM sqlite_stat1 ORDER BY tbl, idx")
    assert stat1 == analyzed_stat1(db, tmp_path / "analyzed.db")
    assert [row for row in stat1 if row[0] == "trend_data"] == EXPECTED_TREND_STAT1[micro_step]
    assert query(db, "SELECT DISTINCT tbl FROM sqlite_stat4 WHERE tbl = 'trend_data'") == []


def test_the_api_converts_every_format_found(example, tmp_path):
    write_file_set(example / "step0" / "rank0", A1_DATA, A1_CONSTRUCT)
    options = api.ParseOptions()
    assert names(api.formats_in_data(example, "auto")) == ["dump", "monitor"]
    runs = api.run_all(example, tmp_path / "out", options, workers=1, input_format="auto")
    assert [(run.parse.format, run.load.db.name) for run in runs] == [
        ("dump", "dump_data.trend.db"),
        ("monitor", "monitor_data.trend.db"),
    ]
    parsed = api.parse_all(example, tmp_path / "work", options, input_format="monitor", workers=1)
    assert [(summary.format, summary.files) for summary in parsed] == [("monitor", 2)]
    assert names(api.formats_in_work(tmp_path / "out" / ".trendconv")) == ["dump", "monitor"]
    loaded = api.load_all(tmp_path / "out" / ".trendconv", tmp_path / "again")
    assert [summary.db.read_bytes() for summary in loaded] == [run.load.db.read_bytes() for run in runs]
    api.parse_all(example, tmp_path / "out" / ".trendconv", options, input_format="dump", workers=1)
    assert names(api.formats_in_work(tmp_path / "out" / ".trendconv")) == ["dump"]  # the monitor parse is forgotten


def test_run_summary_names_the_files_left_out(example, tmp_path):
    write_run(
        example, {"stack_info.csv": "module_name,stack_info\n", "linear_hook_0-1.csv": "vpp_stage,name,step,sr\n"}
    )
    (example / "Feb21_00-00-00-rank0-ffffffff").write_text("a file, not a run directory")
    result = invoke("run", example, "--db", tmp_path / "out", "--format", "monitor", "-j", "1")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[3:5] == [
        "  skipped 1 file: L2 feature file (*_hook_*.csv)",
        "  skipped 1 file: stack_info.csv (call stacks, no statistics)",
    ]
    assert result.stderr == "warning: 1 L2 feature CSV file (*_hook_*.csv) left out, as msprobe data2db does\n"
    assert query(tmp_path / "out" / "monitor_data.trend.db", "SELECT count(*) FROM trend_data") == [(12,)]
    bad = invoke("inspect", tmp_path / "out" / ".trendconv", "--format", "csv")
    assert bad.exit_code == 2
    assert "Invalid value for '--format': 'csv' is not one of 'dump', 'monitor'" in bad.stderr


def test_full_disk_is_a_clear_error(example, tmp_path, monkeypatch):
    monkeypatch.setattr(schema, "BUILD_PRAGMAS", (*schema.BUILD_PRAGMAS, "PRAGMA max_page_count = 3"))
    result = invoke("run", example, "--db", tmp_path / "out", "--format", "monitor", "-j", "1")
    db = tmp_path / "out" / "monitor_data.trend.db"
    assert (result.exit_code, result.stderr) == (
        1,
        f"error: {db}: cannot write the database: database or disk is full (the index build also writes SQLite "
        "temporary files, to SQLITE_TMPDIR, TMPDIR or /tmp)\n",
    )
    assert sorted(path.name for path in db.parent.iterdir()) == [".trendconv"]


def test_every_stat_column_at_once(tmp_path, monkeypatch):
    # 4 key columns and all 14 stats: the widest trend_data there is, inserted through trendconv_columns and
    # bound as Python values alike.
    stats = ",".join(metrics.STATS)
    values = ",".join(str(index + 0.5) for index in range(len(metrics.STATS)))
    write_run(tmp_path / "data", {"other_0-0.csv": f"vpp_stage,name,step,{stats}\n0,x.weight,0,{values}\n"})
    db = convert(tmp_path / "data", tmp_path / "columns").load.db
    assert query(db, "SELECT * FROM trend_data") == [(0, 0, 1, 1, *(index + 0.5 for index in range(14)))]
    monkeypatch.setattr(connection, "_COLUMNS_LIBRARY", None)
    assert convert(tmp_path / "data", tmp_path / "values").load.db.read_bytes() == db.read_bytes()


def test_inspect_without_data_lists_the_files_of_each_chunk(example, tmp_path):
    assert invoke("run", example, "--db", tmp_path / "out", "-j", "1", "-q").exit_code == 0
    work = tmp_path / "out" / ".trendconv"
    shutil.rmtree(example)
    document = orjson.loads(invoke("inspect", work, "--format", "monitor", "--json").stdout)
    [chunk] = (work / "monitor" / "shards" / "_chunks").iterdir()
    assert document["note"].startswith(f"sources not checked: {example}: ")
    assert [(entry["file"], entry["shard"], entry["status"], entry["rows"]) for entry in document["shards"]] == [
        (f"{RUN}/actv_0-1.csv", chunk.name, "ok", 8),
        (f"{RUN}/grad_reduced_0-1.csv", chunk.name, "ok", 4),
    ]


def test_the_manifest_says_which_chunk_holds_each_file(example, tmp_path):
    write_run(example, {"other_0-1.csv": GRAD})
    work = tmp_path / "work"
    api.parse(example, work, api.ParseOptions(), workers=1, input_format="monitor")
    manifest_path = work / "monitor" / "manifest.json"
    document = orjson.loads(manifest_path.read_bytes())
    [chunk] = (work / "monitor" / "shards" / "_chunks").iterdir()
    assert document["located"] == [[f"_chunks/{chunk.name}", 3]]
    assert [name.split("/")[1] for name in document["shards"]] == [
        "actv_0-1.csv.parquet",
        "grad_reduced_0-1.csv.parquet",
        "other_0-1.csv.parquet",
    ]
    manifest_path.write_bytes(orjson.dumps({**document, "located": [[f"_chunks/{chunk.name}", 2]]}))
    with pytest.raises(DataError) as caught:
        api.load(work, tmp_path / "out", input_format="monitor")
    assert str(caught.value) == (
        f"{manifest_path}: unexpected manifest: 'located' covers 2 of 3 shards; run `trendconv.parse()` again"
    )


def test_one_chunk_or_many_give_the_same_database(example, tmp_path, monkeypatch):
    from trendconv.parsing import runner as parse_stage

    for step in range(2, 9):
        write_run(example, {f"other_{step}-{step}.csv": f"vpp_stage,name,step,norm\n0,w,{step},{step}.5\n"})
    one = convert(example, tmp_path / "one").load.db.read_bytes()
    monkeypatch.setattr(parse_stage, "CHUNK_UNITS", 2)
    many = convert(example, tmp_path / "many")
    chunks_dir = tmp_path / "many" / ".trendconv" / "monitor" / "shards" / "_chunks"
    assert (len(list(chunks_dir.iterdir())), many.parse.files) == (5, 9)
    assert many.load.db.read_bytes() == one


def test_the_files_before_a_failing_one_are_kept_in_their_chunk(example, tmp_path):
    bad = example / RUN / "other_0-1.csv"
    bad.write_bytes(b"vpp_stage,name,step,norm\n0,w,0,1,2\n")
    out = tmp_path / "out"
    failed = invoke("run", example, "--db", out, "-j", "1", "-q")
    assert failed.exit_code == 1 and failed.stderr.startswith(f"error: {bad}")
    chunks_dir = out / ".trendconv" / "monitor" / "shards" / "_chunks"
    [chunk] = chunks_dir.iterdir()
    assert [meta["file"] for meta in shards.read_chunk(chunk, FORMATS["monitor"])] == [
        "actv_0-1.csv",
        "grad_reduced_0-1.csv",
    ]
    bad.write_text(GRAD)
    again = invoke("run", example, "--db", out, "-j", "1")
    assert f"  3 monitor CSV files: 1 parsed, 2 reused (shards in {out / '.trendconv'})" in again.stdout.splitlines()
