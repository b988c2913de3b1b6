"""trendconv.comparison: two trend databases are compared by names, ids ignored (unless ids=True), rows as multisets."""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import invoke, make_data, run_cli

import trendconv
from trendconv import api
from trendconv.comparison import DiffError, DiffReport, DiffUsageError, TableDiff, diff_databases

STATS = ("norm", "max", "min", "mean")

# docs/dump-format.md §8.2, in creation order; global_stats is created at the end.
DDL = (
    """CREATE TABLE IF NOT EXISTS monitoring_targets (
    target_id INTEGER PRIMARY KEY AUTOINCREMENT,
    target_name TEXT NOT NULL,
    vpp_stage INTEGER NOT NULL,
    micro_step INTEGER NOT NULL DEFAULT 0,
    UNIQUE(target_name, vpp_stage, micro_step))""",
    """CREATE TABLE IF NOT EXISTS monitoring_metrics (
    metric_id INTEGER PRIMARY KEY AUTOINCREMENT,
    metric_name TEXT UNIQUE NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS monitoring_tags (
    tag_id INTEGER PRIMARY KEY AUTOINCREMENT,
    tag_name TEXT NOT NULL,
    category TEXT NOT NULL,
    metric_id INTEGER NOT NULL,
    UNIQUE(tag_name, category, metric_id),
    FOREIGN KEY (metric_id) REFERENCES monitoring_metrics(metric_id))""",
    """CREATE TABLE IF NOT EXISTS tag_target_mapping (
    tag_id INTEGER NOT NULL,
    target_id INTEGER NOT NULL,
    PRIMARY KEY (tag_id, target_id),
    FOREIGN KEY (tag_id) REFERENCES monitoring_tags(tag_id),
    FOREIGN KEY (target_id) REFERENCES monitoring_target(target_id))""",
    """CREATE TABLE IF NOT EXISTS trend_data (
    rank INTEGER NOT NULL,
    step INTEGER NOT NULL,
    target_id INTEGER NOT NULL,
    metric_id INTEGER NOT NULL,
    {stats},
    PRIMARY KEY (rank, step, target_id, metric_id),
    FOREIGN KEY (target_id) REFERENCES monitoring_targets(target_id),
    FOREIGN KEY (metric_id) REFERENCES monitoring_metrics(metric_id)
) WITHOUT ROWID""",
)
GLOBAL_STATS_DDL = """CREATE TABLE IF NOT EXISTS global_stats (
    max_rank INTEGER DEFAULT 0, min_step INTEGER DEFAULT 0, max_step INTEGER DEFAULT 0,
    forward TEXT DEFAULT NULL, backward TEXT DEFAULT NULL,
    recompute TEXT DEFAULT NULL, parameters_grad TEXT DEFAULT NULL)"""

IN0 = ("Functional.conv2d.input.0", 0, 0)
OUT0 = ("Functional.conv2d.output.0", 0, 0)
IN1 = ("Functional.conv2d.input.0", 0, 1)
METRICS = ("forward", "backward", "recompute", "parameters_grad")
STAT_TEXT = "norm,max,min,mean"


@dataclass(frozen=True)
class Content:
    """A trend database by names; write_db gives it ids."""

    targets: tuple = (IN0, OUT0, IN1)
    metrics: tuple = METRICS
    trend: tuple = (
        (0, 0, IN0, "forward", 2.0, 1.0, 0.0, 0.5),
        (0, 0, OUT0, "forward", 3.0, 2.0, -1.0, 0.25),
        (0, 1, IN1, "forward", 2.5, 1.5, 0.0, None),
        (0, 0, IN0, "backward", 0.3, 0.2, -0.2, 0.0),
    )
    tags: tuple = (("input.0", "index", "forward"), ("output.0", "index", "forward"), ("input.0", "index", "backward"))
    mapping: tuple = ((("input.0", "index", "forward"), IN0), (("input.0", "index", "forward"), IN1))
    global_stats: tuple = ((0, 0, 1, STAT_TEXT, STAT_TEXT, STAT_TEXT, STAT_TEXT),)
    stats: tuple = STATS
    ddl_edit: tuple = ("", "")  # (old, new) text replaced in the DDL
    without: str = ""  # a table not created


def ids(names, base: int, reverse: bool) -> dict:
    order = list(reversed(names)) if reverse else list(names)
    return {name: base + 3 * position for position, name in enumerate(order)}


def create_tables(db: sqlite3.Connection, content: Content) -> None:
    stats = ", ".join(f"{stat} REAL DEFAULT NULL" for stat in content.stats)
    for ddl in (*DDL, GLOBAL_STATS_DDL):
        ddl = ddl.replace("{stats}", stats).replace(*content.ddl_edit)
        if f"EXISTS {content.without} (" not in ddl:
            db.execute(ddl)


def write_db(path: Path, content: Content = Content(), *, base: int = 1, reverse: bool = False) -> Path:
    """Write CONTENT with ids counted from BASE (in reverse name order if REVERSE)."""
    target, metric = ids(content.targets, base, reverse), ids(content.metrics, base + 1, reverse)
    tag = ids(content.tags, base + 2, reverse)
    path.unlink(missing_ok=True)
    with sqlite3.connect(path) as db:
        create_tables(db, content)
        insert(db, "monitoring_targets", [(target[t], *t) for t in content.targets])
        insert(db, "monitoring_metrics", [(metric[m], m) for m in content.metrics])
        insert(db, "monitoring_tags", [(tag[t], *t[:2], metric[t[2]]) for t in content.tags])
        insert(db, "tag_target_mapping", [(tag[t], target.get(g, 99)) for t, g in content.mapping])
        rows = [(r[0], r[1], target.get(r[2], 99), metric[r[3]], *r[4:]) for r in content.trend]
        insert(db, "trend_data", rows)
        insert(db, "global_stats", list(content.global_stats))
    db.close()
    return path


def insert(db: sqlite3.Connection, table: str, rows: list) -> None:
    if rows:
        try:
            db.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(rows[0]))})", rows)
        except sqlite3.OperationalError as exc:
            assert "no such table" in str(exc)


def diff(tmp_path: Path, a: Content = Content(), b: Content = Content(), **options) -> DiffReport:
    """Diff A against B written with other ids, in another order."""
    return diff_databases(
        write_db(tmp_path / "a.db", a), write_db(tmp_path / "b.db", b, base=10, reverse=True), **options
    )


def test_same_names_with_different_ids_are_equal(tmp_path):
    report = diff(tmp_path)
    assert report.equal
    assert report.tables == ()
    assert report.format() == "logically identical"


def test_ids_really_differ_in_the_equal_case(tmp_path):
    diff(tmp_path)
    read = "SELECT target_id FROM monitoring_targets ORDER BY target_id"
    with closing(sqlite3.connect(tmp_path / "a.db")) as a, closing(sqlite3.connect(tmp_path / "b.db")) as b:
        assert a.execute(read).fetchall() != b.execute(read).fetchall()


def test_one_trend_value_changed(tmp_path):
    trend = list(Content.trend)
    trend[2] = (0, 1, IN1, "forward", 2.5, 1.5, 0.0, 7.0)
    report = diff(tmp_path, b=Content(trend=tuple(trend)))
    row = "rank=0, step=1, target=('Functional.conv2d.input.0', 0, 1), metric='forward', norm=2.5, max=1.5, min=0.0"
    assert report.tables == (TableDiff("trend_data", 1, 1, (f"{row}, mean=NULL",), (f"{row}, mean=7.0",)),)
    assert report.format() == "\n".join(
        [
            "1 table differs",
            "trend_data: 1 row only in a, 1 row only in b",
            f"  a: {row}, mean=NULL",
            f"  b: {row}, mean=7.0",
        ]
    )


def test_one_extra_target(tmp_path):
    report = diff(tmp_path, b=Content(targets=(*Content.targets, ("Tensor.__add__.output.0", 0, 2))))
    expected = TableDiff(
        "monitoring_targets", 0, 1, (), ("target_name='Tensor.__add__.output.0', vpp_stage=0, micro_step=2",)
    )
    assert report.tables == (expected,)
    assert report.format() == (
        "1 table differs\n"
        "monitoring_targets: 0 rows only in a, 1 row only in b\n"
        "  b: target_name='Tensor.__add__.output.0', vpp_stage=0, micro_step=2"
    )


def test_tag_category_changed_shows_in_tags_and_mapping(tmp_path):
    changed = ("input.0", "layer", "forward")
    tags = (changed, *Content.tags[1:])
    report = diff(tmp_path, b=Content(tags=tags, mapping=tuple((changed, target) for _, target in Content.mapping)))
    assert [diff.table for diff in report.tables] == ["monitoring_tags", "tag_target_mapping"]
    assert report.tables[0] == TableDiff(
        "monitoring_tags", 1, 1, ("tag_name='input.0', category='index', metric='forward'",),
        ("tag_name='input.0', category='layer', metric='forward'",),
    )  # fmt: skip
    mapping = report.tables[1]
    assert (mapping.only_in_a, mapping.only_in_b) == (2, 2)
    assert mapping.examples_b == (
        "tag=('input.0', 'layer', 'forward'), target=('Functional.conv2d.input.0', 0, 0)",
        "tag=('input.0', 'layer', 'forward'), target=('Functional.conv2d.input.0', 0, 1)",
    )


def test_global_stats_value_changed(tmp_path):
    report = diff(tmp_path, b=Content(global_stats=((0, 0, 2, STAT_TEXT, STAT_TEXT, STAT_TEXT, STAT_TEXT),)))
    text = f"backward='{STAT_TEXT}', recompute='{STAT_TEXT}', parameters_grad='{STAT_TEXT}'"
    assert report.format() == (
        "1 table differs\n"
        "global_stats: 1 row only in a, 1 row only in b\n"
        f"  a: #1 max_rank=0, min_step=0, max_step=1, forward='{STAT_TEXT}', {text}\n"
        f"  b: #1 max_rank=0, min_step=0, max_step=2, forward='{STAT_TEXT}', {text}"
    )


def test_global_stats_is_a_list_in_rowid_order(tmp_path):
    first, second = (0, 0, 1, "a", "b", "c", "d"), (0, 0, 1, "x", "b", "c", "d")
    report = diff(tmp_path, Content(global_stats=(first, second)), Content(global_stats=(second, first)))
    diff_ = report.tables[0]
    assert (diff_.table, diff_.only_in_a, diff_.only_in_b) == ("global_stats", 2, 2)
    assert [example[:2] for example in diff_.examples_a + diff_.examples_b] == ["#1", "#2", "#1", "#2"]


def test_missing_table(tmp_path):
    report = diff(tmp_path, b=Content(without="global_stats"))
    assert report.tables == (TableDiff("global_stats", note="table only in a"),)
    assert report.format() == "1 table differs\nglobal_stats: table only in a"


def test_table_only_in_b_and_ids_without_their_table_are_compared_as_stored(tmp_path):
    report = diff(tmp_path, a=Content(without="monitoring_tags"))
    assert [(diff.table, diff.note) for diff in report.tables] == [
        ("monitoring_tags", "table only in b"),
        ("tag_target_mapping", None),
    ]
    assert report.tables[1].examples_a[0] == "tag_id=3, target=('Functional.conv2d.input.0', 0, 0)"
    assert report.tables[1].examples_b[0] == "tag_id=18, target=('Functional.conv2d.input.0', 0, 0)"


def test_different_column_type(tmp_path):
    report = diff(tmp_path, b=Content(ddl_edit=("mean REAL", "mean TEXT")))
    columns = "rank INTEGER, step INTEGER, target_id INTEGER, metric_id INTEGER, norm REAL, max REAL, min REAL"
    note = f"columns differ: a ({columns}, mean REAL) vs b ({columns}, mean TEXT)"
    assert report.tables == (TableDiff("trend_data", note=note),)
    assert report.format() == f"1 table differs\ntrend_data: {note}"


def test_monitor_stat_columns_are_compared_generically(tmp_path):
    stats = ("norm", "min", "max", "zeros", "nans", "mean")
    row = (0, 3, OUT0, "backward", 1.0, -1.0, 1.0, 0.0, 0.0, 1e-06)
    a, b = Content(stats=stats, trend=(row,)), Content(stats=stats, trend=(row[:-2] + (1.0, 1e-06),))
    assert diff(tmp_path, a, a).equal
    (diff_,) = diff(tmp_path, a, b).tables
    assert diff_.examples_a[0].endswith("norm=1.0, min=-1.0, max=1.0, zeros=0.0, nans=0.0, mean=1e-06")
    assert diff_.examples_b[0].endswith("zeros=0.0, nans=1.0, mean=1e-06")


def write_extra(path: Path, values: list[int]) -> None:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE extra (x INTEGER, y TEXT)")
        db.executemany("INSERT INTO extra VALUES (?, 'same')", [(value,) for value in values])
    db.close()


def test_duplicate_rows_are_counted_as_a_multiset(tmp_path):
    a, b = write_db(tmp_path / "a.db"), write_db(tmp_path / "b.db")
    write_extra(a, [1, 1, 1, 2, 3])
    write_extra(b, [3, 2, 1, 2])
    assert diff_databases(a, b).tables == (TableDiff("extra", 2, 1, ("x=1, y='same' (x2)",), ("x=2, y='same'",)),)


def test_same_duplicates_in_any_order_are_equal(tmp_path):
    a, b = write_db(tmp_path / "a.db"), write_db(tmp_path / "b.db")
    write_extra(a, [2, 1, 2, 1])
    write_extra(b, [1, 1, 2, 2])
    assert diff_databases(a, b).equal


def test_examples_are_sorted_and_limited(tmp_path):
    trend = tuple((rank, 0, IN0, "recompute", 1.0, 1.0, 1.0, 1.0) for rank in (5, -1, 3))
    report = diff(tmp_path, b=Content(trend=Content.trend + trend), limit=2)
    (diff_,) = report.tables
    assert (diff_.only_in_a, diff_.only_in_b, diff_.examples_a) == (0, 3, ())
    assert [example.split(",")[0] for example in diff_.examples_b] == ["rank=-1", "rank=3"]


def test_dangling_target_id(tmp_path):
    lost = ("Module.gone.output.0", 0, 0)
    report = diff(tmp_path, b=Content(trend=(*Content.trend, (1, 0, lost, "forward", None, None, None, None))))
    example = (
        "rank=1, step=0, target=<missing target_id=99>, metric='forward', norm=NULL, max=NULL, min=NULL, mean=NULL"
    )
    assert report.tables == (TableDiff("trend_data", 0, 1, (), (example,)),)


def test_sequence_indexes_and_statistics_are_ignored(tmp_path):
    a, b = write_db(tmp_path / "a.db"), write_db(tmp_path / "b.db", base=50)
    with sqlite3.connect(b) as db:
        db.execute("CREATE INDEX idx_trend_metric_step ON trend_data(metric_id, step)")
        db.execute("ANALYZE")
        db.execute("UPDATE sqlite_sequence SET seq = seq + 1000")
    db.close()
    assert diff_databases(a, b).equal


def test_ids_option_compares_the_ids(tmp_path):
    assert diff_databases(write_db(tmp_path / "a.db"), write_db(tmp_path / "b.db"), ids=True).equal
    report = diff(tmp_path, ids=True, limit=1)
    assert report.format() == "\n".join(
        [
            "4 tables differ",
            "monitoring_targets ids: 3 rows only in a, 3 rows only in b",
            "  a: target_id=1, target_name='Functional.conv2d.input.0', vpp_stage=0, micro_step=0",
            "  b: target_id=10, target_name='Functional.conv2d.input.0', vpp_stage=0, micro_step=1",
            "monitoring_metrics ids: 3 rows only in a, 3 rows only in b",
            "  a: metric_id=2, metric_name='forward'",
            "  b: metric_id=14, metric_name='recompute'",
            "monitoring_tags ids: 3 rows only in a, 3 rows only in b",
            "  a: tag_id=3, metric_id=2",
            "  b: tag_id=12, metric_id=17",
            "sqlite_sequence: 3 rows only in a, 3 rows only in b",
            "  a: name='monitoring_metrics', seq=11",
            "  b: name='monitoring_metrics', seq=20",
        ]
    )


def test_ids_option_takes_each_metrics_tag_ids_as_a_set(tmp_path):
    """msprobe numbers the tags of one metric in hash order: swapping two of them is no difference."""
    a, b = write_db(tmp_path / "a.db"), write_db(tmp_path / "b.db")
    with sqlite3.connect(b) as db:  # the forward tags input.0 (3) and output.0 (6) trade ids
        for table in ("monitoring_tags", "tag_target_mapping"):
            for old, new in ((3, 100), (6, 3), (100, 6)):
                db.execute(f"UPDATE {table} SET tag_id = ? WHERE tag_id = ?", (new, old))
    db.close()
    assert diff_databases(a, b, ids=True).equal
    with sqlite3.connect(b) as db:
        db.execute("UPDATE monitoring_tags SET metric_id = 5 WHERE tag_id = 3")  # forward's output.0 now backward's
    db.close()
    assert [diff.table for diff in diff_databases(a, b, ids=True).tables] == ["monitoring_tags", "monitoring_tags ids"]
    assert diff_databases(a, b, ids=True).tables[1] == TableDiff(
        "monitoring_tags ids", 1, 1, ("tag_id=3, metric_id=2",), ("tag_id=3, metric_id=5",)
    )


def test_ids_option_compares_sqlite_sequence(tmp_path):
    a, b = write_db(tmp_path / "a.db"), write_db(tmp_path / "b.db")
    with sqlite3.connect(b) as db:
        db.execute("UPDATE sqlite_sequence SET seq = 9 WHERE name = 'monitoring_targets'")
    db.close()
    assert diff_databases(a, b).equal
    row = "name='monitoring_targets', seq="
    assert diff_databases(a, b, ids=True).tables == (TableDiff("sqlite_sequence", 1, 1, (f"{row}7",), (f"{row}9",)),)
    plain = write_db(tmp_path / "plain.db", Content(ddl_edit=("AUTOINCREMENT", "")))
    assert diff_databases(a, plain, ids=True).tables == (TableDiff("sqlite_sequence", note="table only in a"),)


def test_diff_does_not_modify_the_files(tmp_path):
    a, b = write_db(tmp_path / "a.db"), write_db(tmp_path / "b.db", base=7)
    before = (a.read_bytes(), b.read_bytes())
    diff_databases(a, b)
    assert (a.read_bytes(), b.read_bytes()) == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a.db", "b.db"]


def test_missing_file(tmp_path):
    missing = tmp_path / "nope.db"
    with pytest.raises(DiffError) as raised:
        diff_databases(write_db(tmp_path / "a.db"), missing)
    assert str(raised.value) == f"cannot open {missing}: no such file"


def test_not_a_database(tmp_path):
    text = tmp_path / "notes.db"
    text.write_text("this is not SQLite, just enough text to fill a header page of a database file" * 2)
    with pytest.raises(DiffError) as raised:
        diff_databases(text, write_db(tmp_path / "b.db"))
    assert str(raised.value) == f"cannot open {text}: file is not a database"


# Sets of databases (a split output): their union is compared with the other side.

SPLIT = "dump_data.steps-{:06d}-{:06d}.trend.db"


def build_db(data: Path, steps: tuple[int, ...], out: Path, micro_step: bool) -> Path:
    """A database of DATA's step directories STEPS only, as a split output's file would hold them."""
    subset = out.parent / f"{out.name}-data"
    for step in steps:
        shutil.copytree(data / f"step{step}", subset / f"step{step}")
    options = api.ParseOptions(micro_step=micro_step)
    return api.run(subset, out, options, workers=1, input_format="dump").load.db


def split_set(tmp: Path, data: Path, ranges: tuple[tuple[int, ...], ...], micro_step: bool, name: str) -> Path:
    """A directory holding one database per step range, named as a split output names them."""
    directory = tmp / name
    directory.mkdir()
    for steps in ranges:
        db = build_db(data, steps, tmp / f"{name}-{steps[0]}", micro_step)
        shutil.copyfile(db, directory / SPLIT.format(steps[0], steps[-1]))
    return directory


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """4 steps x 2 ranks: the whole database and split sets of it, in step and in micro-step mode."""
    tmp = tmp_path_factory.mktemp("sets")
    data = make_data(tmp, steps=4, ranks=2)
    found = {}
    for micro_step, mode in ((False, "step"), (True, "micro")):
        found[mode] = build_db(data, (0, 1, 2, 3), tmp / f"whole-{mode}", micro_step)
        found[f"{mode} set"] = split_set(tmp, data, ((0, 1), (2, 3)), micro_step, f"split-{mode}")
    found["overlap"] = split_set(tmp, data, ((0, 1, 2), (2, 3)), False, "overlap")
    return found


def test_a_split_set_equals_the_whole_database_in_step_mode(runs):
    directory, whole = runs["step set"], runs["step"]
    files = sorted(directory.iterdir())
    assert [path.name for path in files] == [SPLIT.format(0, 1), SPLIT.format(2, 3)]
    assert diff_databases(directory, whole).equal
    assert diff_databases(whole, directory).equal
    assert diff_databases(files, whole).equal
    assert diff_databases(directory / "dump_data.steps-*.trend.db", whole).equal
    assert diff_databases(directory, files).equal


def test_one_file_of_a_set_is_not_the_whole(runs):
    first = sorted(runs["step set"].iterdir())[0]
    report = diff_databases([first], runs["step"], limit=1)
    assert report.format().splitlines()[:2] == [
        "2 tables differ",
        "global_stats: 1 row only in a, 1 row only in b",
    ]
    assert report.tables[1] == TableDiff(
        "trend_data", 0, 52, (),
        ("rank=0, step=2, target=('Functional.linear.input.0', 0, 0), metric='backward', norm=0.3, max=0.2, "
         "min=-0.2, mean=0.0",),
    )  # fmt: skip


def test_micro_step_sets_differ_in_their_global_steps(runs):
    """Built apart, each file counts micro steps from 0: the mismatch shows (the split output does not)."""
    report = diff_databases(runs["micro set"], runs["micro"], limit=1)
    stats = ", ".join(f"{metric}='norm,max,min,mean'" for metric in METRICS)
    row = "target=('Functional.linear.input.0', 0, 0), metric='backward', norm=0.3, max=0.2, min=-0.2, mean=0.0"
    assert report.format().splitlines()[:7] == (
        [
            "3 tables differ",
            "global_stats: 1 row only in a, 1 row only in b",
            f"  a: #1 max_rank=1, min_step=0, max_step=3, {stats}",
            f"  b: #1 max_rank=1, min_step=0, max_step=7, {stats}",
            "trend_data: 52 rows only in a, 52 rows only in b",
            f"  a: rank=0, step=0, {row}",
            f"  b: rank=0, step=4, {row}",
        ]
    )


def test_rows_in_two_files_of_a_set_are_reported(runs):
    report = diff_databases(runs["step"], runs["overlap"], limit=1)
    row = "target=('Functional.linear.input.0', 0, 0), metric='backward'"
    assert report.format() == "\n".join(
        [
            "2 tables differ",
            "trend_data: 0 rows only in a, 26 rows only in b",
            f"  b: rank=0, step=2, {row}, norm=0.3, max=0.2, min=-0.2, mean=0.0",
            "trend_data (set b): 26 rows in more than one file",
            f"  b: rank=0, step=2, {row} in {SPLIT.format(0, 2)}, {SPLIT.format(2, 3)}",
        ]
    )
    assert not diff_databases(runs["overlap"], runs["overlap"]).equal


def test_a_set_combines_global_stats_and_fills_missing_columns_with_null(tmp_path):
    """Monitor-like files: each has the stat columns and metrics its own rows use."""
    stats = ("norm", "min", "max", "zeros")
    forward = (0, 0, IN0, "forward", 1.0, -1.0, 1.0, None)
    backward = (1, 5, IN0, "backward", 2.0, -2.0, 2.0, 0.0)
    combined = (1, 0, 5, "norm,min,max", "zeros,norm,min,max", None, None)
    whole = Content(stats=stats, trend=(forward, backward), global_stats=(combined,))
    first = Content(stats=stats[:3], trend=(forward[:-1],), global_stats=((0, 0, 0, "norm,min,max", None, None, None),))
    second = Content(stats=stats, trend=(backward,), global_stats=((1, 5, 5, None, "norm,min,max,zeros", None, None),))
    parts = [write_db(tmp_path / "first.db", first), write_db(tmp_path / "second.db", second, base=20)]
    assert diff_databases(parts, write_db(tmp_path / "whole.db", whole, base=7)).equal
    changed = Content(stats=stats, trend=whole.trend, global_stats=((1, 0, 6, *whole.global_stats[0][3:]),))
    report = diff_databases(parts, write_db(tmp_path / "changed.db", changed))
    assert report.tables[0].examples_a == (
        "#1 max_rank=1, min_step=0, max_step=5, forward='norm,min,max', backward='norm,min,max,zeros', "
        "recompute=NULL, parameters_grad=NULL",
    )


def test_a_set_with_a_column_of_two_types_is_an_error(tmp_path):
    first = write_db(tmp_path / "first.db")
    second = write_db(tmp_path / "second.db", Content(ddl_edit=("mean REAL", "mean TEXT")))
    with pytest.raises(DiffError) as raised:
        diff_databases([first, second], first)
    assert str(raised.value) == (f"{second}: column trend_data.mean is TEXT, not REAL as in the set's other files of a")


def test_a_directory_of_several_runs_or_kinds_is_a_usage_error(tmp_path):
    for name in ("dump_data.trend.db", "monitor_data.trend.db", "run2.dump_data.steps-000000-000009.trend.db"):
        write_db(tmp_path / name)
    with pytest.raises(DiffUsageError) as raised:
        diff_databases(tmp_path, tmp_path / "dump_data.trend.db")
    assert str(raised.value) == (
        f"{tmp_path} holds the databases of more than one run or kind (dump_data.trend.db, monitor_data.trend.db, "
        f"run2.dump_data.trend.db); choose one with a quoted pattern, like '{tmp_path}/dump_data*.trend.db'"
    )
    assert diff_databases(tmp_path / "run2.*.trend.db", tmp_path / "dump_data*.trend.db").equal


def test_ids_of_a_set_are_a_usage_error(runs):
    with pytest.raises(DiffUsageError) as raised:
        diff_databases(runs["step"], runs["step set"], ids=True)
    assert str(raised.value) == (
        "ids cannot be compared for a set of databases (b: 2 files, each numbering its own ids); "
        "compare its files one by one"
    )
    single = sorted(runs["step set"].iterdir())[:1]
    assert diff_databases(single, single, ids=True).equal


def test_an_empty_directory_a_pattern_without_match_and_an_empty_list(tmp_path):
    db = write_db(tmp_path / "a.db")
    (tmp_path / "empty").mkdir()
    cases = [
        (tmp_path / "empty", DiffError, f"cannot open {tmp_path / 'empty'}: a directory without *.trend.db files"),
        (tmp_path / "x*.db", DiffError, f"cannot open {tmp_path / 'x*.db'}: no file matches this pattern"),
        ([], DiffUsageError, "an empty list of databases; give at least one path"),
    ]
    for side, error, message in cases:
        with pytest.raises(error) as raised:
            diff_databases(side, db)
        assert (type(raised.value), str(raised.value)) == (error, message)


def test_command_line_and_python_api_take_sets(runs):
    directory, whole = runs["step set"], runs["step"]
    assert (invoke("diff", directory, whole).exit_code, invoke("diff", directory, whole).stdout) == (
        0, "logically identical\n",
    )  # fmt: skip
    assert invoke("diff", f"{directory}/*.trend.db", whole).exit_code == 0
    assert trendconv.diff([str(path) for path in sorted(directory.iterdir())], whole).equal
    several = invoke("diff", *sorted(directory.iterdir()), whole)
    assert (several.exit_code, several.stderr) == (
        2, "error: diff compares two sides, A and B, not 3 paths; give a set of databases as a directory or as a "
        "quoted pattern ('out/*.trend.db')\n",
    )  # fmt: skip
    ids = invoke("diff", directory, whole, "--ids")
    assert (ids.exit_code, ids.stderr) == (
        2, "error: ids cannot be compared for a set of databases (a: 2 files, each numbering its own ids); "
        "compare its files one by one\n",
    )  # fmt: skip
    with pytest.raises(trendconv.UsageError):
        trendconv.diff(directory, whole, ids=True)


def test_a_damaged_database_is_one_line(tmp_path):
    """The read of the good side, left unfinished, is closed without a second error (printed as 'Exception
    ignored in ...' by Python, once a traceback)."""
    good = trendconv.convert(make_data(tmp_path, steps=4, ranks=2), tmp_path / "out")[0].load.db
    damaged = tmp_path / "damaged.db"
    content = bytearray(good.read_bytes())
    page = 4096
    for start in range(2 * page, len(content), page):
        content[start + 100 : start + 400] = b"\xab" * 300
    damaged.write_bytes(bytes(content))
    result = run_cli("diff", good, damaged)  # a process of its own: what Python prints at its end is seen
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == f"error: cannot read {damaged}: database disk image is malformed\n"
