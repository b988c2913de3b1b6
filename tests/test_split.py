"""Split output (docs/user-guide.md, "Big runs"): one standalone database per range of steps, built by parallel
loaders; --max-db-size; --name; the previous output's files replaced as a set."""

from __future__ import annotations

import os
import shutil
import sqlite3
import types
from pathlib import Path

import pytest
from helpers import TAGS_BY_NAME, invoke, query
from reference import run_msprobe

import trendconv
from datagen.dump import generate
from datagen.monitor import generate as generate_monitor
from trendconv.loading import stage
from trendconv.loading.split import parse_size

TREND = """
SELECT t.rank, t.step, m.target_name, m.vpp_stage, m.micro_step, k.metric_name, t.*
FROM trend_data t JOIN monitoring_targets m USING (target_id) JOIN monitoring_metrics k USING (metric_id)
"""


def by_name(db: Path) -> list[tuple]:
    """Rows by names: the ids, which each database of a split numbers on its own, left out."""
    return [row[:6] + row[10:] for row in query(db, TREND)]


def union(dbs: list[Path]) -> list[tuple]:
    return sorted(row for db in dbs for row in by_name(db))


@pytest.fixture(scope="module")
def dump_data(tmp_path_factory) -> Path:
    data = tmp_path_factory.mktemp("split") / "data"
    generate(data, steps=5, ranks=2, layers=2, seed=3)
    return data


def databases(out: Path) -> list[str]:
    return sorted(path.name for path in out.glob("*.trend.db"))


STEP_PARTS = [
    "dump_data.steps-000000-000001.trend.db",
    "dump_data.steps-000002-000003.trend.db",
    "dump_data.steps-000004-000004.trend.db",
]


@pytest.mark.parametrize("micro_step", [True, False])
def test_split_steps_gives_standalone_databases_holding_the_unsplit_rows(dump_data, tmp_path, micro_step):
    whole = trendconv.convert(dump_data, tmp_path / "whole", workers=1, micro_step=micro_step)[0].load.db
    summary = trendconv.convert(dump_data, tmp_path / "split", workers=2, micro_step=micro_step, split_steps=2)[0]
    out = tmp_path / "split"
    assert databases(out) == STEP_PARTS
    assert [part.db.name for part in summary.load.parts] == STEP_PARTS
    assert union([out / name for name in STEP_PARTS]) == sorted(by_name(whole))
    assert summary.load.rows == query(whole, "SELECT count(*) FROM trend_data")[0][0]
    for name, steps in zip(STEP_PARTS, [(0, 1), (2, 3), (4, 4)]):
        db = out / name
        assert oct(db.stat().st_mode & 0o777) == "0o640"
        assert query(db, "PRAGMA integrity_check") == [("ok",)]
        own_steps = query(db, "SELECT min(step), max(step), max(rank) FROM trend_data")[0]
        assert query(db, "SELECT min_step, max_step, max_rank FROM global_stats") == [
            (own_steps[0], own_steps[1], own_steps[2])
        ]
        if not micro_step:
            assert own_steps[:2] == steps
        # Only the targets, tags and tag links its own rows use.
        assert query(
            db, "SELECT count(*) FROM monitoring_targets WHERE target_id NOT IN (SELECT target_id FROM trend_data)"
        ) == [(0,)]
        assert query(
            db,
            "SELECT count(*) FROM tag_target_mapping WHERE target_id NOT IN (SELECT target_id FROM monitoring_targets)",
        ) == [(0,)]
        assert query(
            db, "SELECT count(*) FROM monitoring_tags WHERE tag_id NOT IN (SELECT tag_id FROM tag_target_mapping)"
        ) == [(0,)]
        indexes = {name for (name,) in query(db, "SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert {"idx_trend_metric_step", "idx_trend_metric_target", "idx_ttm_target"} <= indexes
    assert invoke("check", out).exit_code == 0


@pytest.fixture(scope="module")
def uneven_data(tmp_path_factory) -> Path:
    """Six steps of two ranks whose micro-step counts differ: 3, 4, 3, 3, 3 or 4 (rank 1 has 4), 3."""
    root = tmp_path_factory.mktemp("uneven")
    generate(root / "data", steps=6, ranks=2, layers=2, micro_batches=2, seed=5)
    generate(root / "three", steps=6, ranks=2, layers=2, micro_batches=3, seed=6)
    for part in ("step1", "step4/rank1"):
        shutil.rmtree(root / "data" / part)
        shutil.copytree(root / "three" / part, root / "data" / part)
    return root / "data"


UNEVEN_PARTS = ["dump_data.steps-000000-000002.trend.db", "dump_data.steps-000003-000005.trend.db"]


def test_uneven_micro_steps_continue_across_the_databases_of_run_and_of_load(uneven_data, tmp_path):
    # `run` loads the first database while parsing and a loader process the second; `load` builds both in loader
    # processes: the same bytes, the unsplit rows, and global steps that go on where the step before ends.
    whole = trendconv.convert(uneven_data, tmp_path / "whole", workers=1)[0].load.db
    summary = trendconv.convert(uneven_data, tmp_path / "run", workers=2, split_steps=3)[0]
    assert [part.db.name for part in summary.load.parts] == databases(tmp_path / "run") == UNEVEN_PARTS
    trendconv.load(tmp_path / "run" / ".trendconv", tmp_path / "load", split_steps=3, load_workers=2)
    for name in UNEVEN_PARTS:
        assert (tmp_path / "run" / name).read_bytes() == (tmp_path / "load" / name).read_bytes()
    assert union([tmp_path / "run" / name for name in UNEVEN_PARTS]) == sorted(by_name(whole))
    steps = [query(tmp_path / "run" / name, "SELECT min_step, max_step FROM global_stats")[0] for name in UNEVEN_PARTS]
    assert steps == [(0, 9), (10, 19)]  # 3 + 4 + 3 micro steps, then 3 + 4 + 3


def test_micro_step_global_steps_continue_across_the_databases(dump_data, tmp_path):
    whole = trendconv.convert(dump_data, tmp_path / "whole", workers=1)[0].load.db
    trendconv.convert(dump_data, tmp_path / "split", workers=1, split_steps=2)
    steps = [query(tmp_path / "split" / name, "SELECT min_step, max_step FROM global_stats")[0] for name in STEP_PARTS]
    ((low, high),) = query(whole, "SELECT min_step, max_step FROM global_stats")
    assert steps[0][0] == low and steps[-1][1] == high
    assert [later[0] for later in steps[1:]] == [earlier[1] + 1 for earlier in steps[:-1]]


def test_every_worker_and_loader_count_gives_the_same_bytes(dump_data, tmp_path):
    outputs = []
    for workers, loaders in ((1, 1), (2, 2), (2, 3)):
        out = tmp_path / f"out{workers}{loaders}"
        trendconv.convert(dump_data, out, workers=workers, load_workers=loaders, split_steps=2)
        outputs.append([(out / name).read_bytes() for name in STEP_PARTS])
    assert outputs[0] == outputs[1] == outputs[2]
    # `load` from the same WORK builds the same files.
    trendconv.load(tmp_path / "out11" / ".trendconv", tmp_path / "loaded", split_steps=2, load_workers=2)
    assert [(tmp_path / "loaded" / name).read_bytes() for name in STEP_PARTS] == outputs[0]


def test_the_first_database_of_a_split_is_the_reference_of_its_steps_ids_included(dump_data, tmp_path):
    """A database of a split numbers targets as the reference does on DATA holding only its step directories."""
    subset = tmp_path / "subset"
    for step in (0, 1):
        shutil.copytree(dump_data / f"step{step}", subset / f"step{step}")
    alone = trendconv.convert(subset, tmp_path / "alone", workers=1)[0].load.db
    trendconv.convert(dump_data, tmp_path / "split", workers=1, split_steps=2)
    result = invoke("diff", "--ids", alone, tmp_path / "split" / STEP_PARTS[0])
    assert (result.exit_code, result.stdout.splitlines()[0]) == (0, "logically identical")


@pytest.mark.reference
def test_in_step_mode_each_database_is_the_reference_on_its_step_directories(dump_data, tmp_path):
    trendconv.convert(dump_data, tmp_path / "split", workers=2, micro_step=False, split_steps=2)
    for name, steps in zip(STEP_PARTS, [(0, 1), (2, 3), (4,)]):
        subset = tmp_path / name / "data"
        for step in steps:
            shutil.copytree(dump_data / f"step{step}", subset / f"step{step}")
        reference = run_msprobe(subset, tmp_path / name / "reference", micro_step=False)
        result = invoke("diff", "--ids", reference, tmp_path / "split" / name)
        assert (result.exit_code, result.stdout.splitlines()[0]) == (0, "logically identical"), result.stdout


def test_max_db_size_splits_at_step_directories_and_every_file_stays_under_it(dump_data, tmp_path):
    whole = trendconv.convert(dump_data, tmp_path / "whole", workers=1)[0].load
    step_rows = whole.rows // 5
    cap = 77824 + 3 * step_rows * 160  # the tables, and three steps' rows at the estimate of 160 bytes a row
    summary = trendconv.convert(dump_data, tmp_path / "out", workers=2, max_db_size=cap)[0].load
    assert [part.db.name for part in summary.parts] == [
        "dump_data.steps-000000-000002.trend.db",
        "dump_data.steps-000003-000004.trend.db",
    ]
    assert all(part.size <= cap for part in summary.parts)
    # The first database, loaded while parsing, and the rest, by the loaders, are what `load` builds at once.
    again = trendconv.load(tmp_path / "out" / ".trendconv", tmp_path / "again", max_db_size=cap, load_workers=2)[0]
    assert [part.db.read_bytes() for part in again.parts] == [part.db.read_bytes() for part in summary.parts]
    # Small runs stay one file with today's name.
    assert databases(tmp_path / "whole") == ["dump_data.trend.db"]


def test_a_step_directory_larger_than_the_cap_is_a_clear_error(dump_data, tmp_path):
    result = invoke("run", dump_data, "--db", tmp_path / "out", "-j", "1", "-q", "--max-db-size", "100K")
    rows = shard_rows_of_step(tmp_path / "out" / ".trendconv", 0)
    assert (result.exit_code, result.stderr) == (
        1,
        f"error: the step directory of step 0: {rows} rows, up to {77824 + rows * 160} bytes in a database (160 "
        "bytes a row at most, and 77824 for its tables), more than the 102400 bytes of --max-db-size, and a step "
        "directory is never divided; raise "
        "--max-db-size (the Trend Analyzer opens files up to 5368709120 bytes)\n",
    )
    assert databases(tmp_path / "out") == []
    assert [path.name for path in (tmp_path / "out").iterdir()] == [".trendconv"]


def test_every_database_has_its_tables_whatever_its_rows(tmp_path):
    # A database of a few rows is 19 pages: the split counts them, so a cap below them is a clear error, not a
    # database above the cap (which the check after the build calls a trendconv bug), and a cap a little above
    # them divides the run.
    data = tmp_path / "data"
    generate(data, steps=3, ranks=1, layers=1, seed=2, tiny=True)  # 24 rows a step
    result = invoke("run", data, "--db", tmp_path / "low", "-j", "1", "-q", "--max-db-size", "50K")
    assert (result.exit_code, result.stderr) == (
        1,
        f"error: the step directory of step 0: 24 rows, up to {77824 + 24 * 160} bytes in a database (160 bytes a "
        "row at most, and 77824 for its tables), more than the 51200 bytes of --max-db-size, and a step directory "
        "is never divided; raise --max-db-size (the Trend Analyzer opens files up to 5368709120 bytes)\n",
    )
    result = invoke("run", data, "--db", tmp_path / "out", "-j", "1", "-q", "--max-db-size", "85K")
    assert (result.exit_code, result.stderr) == (0, "")
    names = databases(tmp_path / "out")
    assert names == ["dump_data.steps-000000-000001.trend.db", "dump_data.steps-000002-000002.trend.db"]
    assert [(tmp_path / "out" / name).stat().st_size for name in names] == [77824, 77824]


def test_a_split_runs_load_time_counts_each_seal_once(tmp_path, monkeypatch):
    # A clock that moves only while a database is sealed, by 100 s a seal: the first database of a split by size
    # is sealed while parsing, the second after it; the load took the 200 s of the whole run, not 300.
    from trendconv import api
    from trendconv.formats.dump.builder import DumpBuilder

    clock = types.SimpleNamespace(now=1000.0)
    fake_time = types.SimpleNamespace(perf_counter=lambda: clock.now)
    monkeypatch.setattr(api, "time", fake_time)
    monkeypatch.setattr(stage, "time", fake_time)
    seal = DumpBuilder.seal

    def slow_seal(builder):
        clock.now += 100.0
        seal(builder)

    monkeypatch.setattr(DumpBuilder, "seal", slow_seal)
    data = tmp_path / "data"
    generate(data, steps=3, ranks=1, layers=1, seed=2, tiny=True)
    summary = trendconv.convert(data, tmp_path / "out", workers=1, max_db_size="85K")[0]
    assert len(summary.load.parts) == 2
    assert (summary.seconds["load"], summary.seconds["total"]) == (200.0, 200.0)


def shard_rows_of_step(work: Path, step: int) -> int:
    """The rows the shards of STEP hold, as `trendconv inspect` counts them."""
    return sum(entry["rows"] for entry in trendconv.inspect(work)["shards"] if entry["step"] == step)


@pytest.mark.parametrize(
    ("text", "size"),
    [("123", 123), ("5G", 5 * 1024**3), ("5GiB", 5 * 1024**3), ("5GB", 5 * 10**9), ("1.5K", 1536), ("10 MB", 10**7)],
)
def test_sizes(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--max-db-size", "lots"],
            "error: 'lots' is not a size: give bytes, or a number with K, M, G or T (like 5G or 500M)\n",
        ),
        (["--max-db-size", "0"], "error: '0' is not a size from 1 byte to 8 EiB\n"),
        (
            ["--name", "../up"],
            "error: '../up' is not a run name: up to 100 letters, digits, '-', '_' or '.', starting "
            "with a letter or digit\n",
        ),
    ],
)
def test_usage_errors(dump_data, tmp_path, args, message):
    result = invoke("run", dump_data, "--db", tmp_path / "out", "-q", *args)
    assert (result.exit_code, result.stderr) == (2, message)
    assert not (tmp_path / "out").exists()


def test_name_lets_several_runs_share_a_directory(dump_data, tmp_path):
    out = tmp_path / "logdir"
    trendconv.convert(dump_data, out, work=tmp_path / "wa", workers=1, name="runA")
    trendconv.convert(dump_data, out, work=tmp_path / "wb", workers=1, name="runB", split_steps=3)
    assert databases(out) == [
        "runA.dump_data.trend.db",
        "runB.dump_data.steps-000000-000002.trend.db",
        "runB.dump_data.steps-000003-000004.trend.db",
    ]


def test_a_new_split_replaces_the_old_set_and_leaves_what_it_did_not_write(dump_data, tmp_path):
    out = tmp_path / "out"
    trendconv.convert(dump_data, out, workers=1, split_steps=2)
    foreign = out / "dump_data.steps-000100-000199.trend.db"
    foreign.write_bytes(b"someone else's")
    changed = out / STEP_PARTS[2]
    changed.write_bytes(b"edited since")
    summary = trendconv.convert(dump_data, out, workers=1, split_steps=3)[0]
    assert databases(out) == [
        "dump_data.steps-000000-000002.trend.db",
        "dump_data.steps-000003-000004.trend.db",
        "dump_data.steps-000004-000004.trend.db",
        "dump_data.steps-000100-000199.trend.db",
    ]
    assert summary.load.warnings == [
        f"{path}: left in place, though this output does not include it: trendconv did not write it, or it changed "
        f"since; the Trend Analyzer lists it beside the new databases (`rm '{path}'` if it is stale)"
        for path in (changed, foreign)
    ]
    # Back to one database: the split's files go, the ones not ours stay.
    trendconv.convert(dump_data, out, workers=1)
    assert databases(out) == [
        "dump_data.steps-000004-000004.trend.db",
        "dump_data.steps-000100-000199.trend.db",
        "dump_data.trend.db",
    ]


def test_a_split_after_one_database_replaces_it_unless_it_changed_since(dump_data, tmp_path):
    out = tmp_path / "out"
    trendconv.convert(dump_data, out, workers=1)
    summary = trendconv.convert(dump_data, out, workers=1, split_steps=2)[0]
    assert databases(out) == STEP_PARTS
    assert summary.load.warnings == []
    # One database again, then a copy put in its place (as msprobe data2db would write it): not ours to remove.
    trendconv.convert(dump_data, out, workers=1)
    whole = out / "dump_data.trend.db"
    copy = whole.read_bytes()
    whole.unlink()
    whole.write_bytes(copy)
    summary = trendconv.convert(dump_data, out, workers=1, split_steps=2)[0]
    assert databases(out) == [*STEP_PARTS, "dump_data.trend.db"]
    assert summary.load.warnings == [
        f"{whole}: left in place, though this output does not include it: trendconv did not write it, or it changed "
        f"since; the Trend Analyzer lists it beside the new databases (`rm '{whole}'` if it is stale)"
    ]


def test_a_failed_database_replaces_none_of_the_old_set(dump_data, tmp_path):
    out = tmp_path / "out"
    trendconv.convert(dump_data, out, workers=1, split_steps=2)
    before = {name: (out / name).read_bytes() for name in STEP_PARTS}
    shard = out / ".trendconv" / "dump" / "shards" / "step4_rank1.parquet"
    shard.write_bytes(shard.read_bytes()[:-40] + bytes(40))  # the footer of the last database's shard
    result = invoke("load", out / ".trendconv", "--db", out, "--split-steps", "1", "--load-workers", "2", "-q")
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: {shard}: ")
    assert {name: (out / name).read_bytes() for name in databases(out)} == before
    assert sorted(path.name for path in out.iterdir() if path.name.endswith(".tmp")) == []


def test_a_database_that_outgrows_the_estimate_is_refused_not_written(dump_data, tmp_path, monkeypatch):
    from trendconv.formats.dump.format import DumpFormat

    monkeypatch.setattr(DumpFormat, "row_bytes", 1)
    result = invoke("run", dump_data, "--db", tmp_path / "out", "-j", "1", "-q", "--max-db-size", "130K")
    db = tmp_path / "out" / "dump_data.trend.db"  # all five steps fit, by the estimate
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: {db}: ")
    assert result.stderr.endswith(
        "bytes, more than the 133120 bytes of --max-db-size: the split's estimate of the database sizes fell short, "
        "a trendconv bug (please report it); --split-steps N makes smaller files\n"
    )
    assert databases(tmp_path / "out") == []


@pytest.mark.parametrize("micro_step", [True, False])
def test_monitor_data_splits_by_the_step_ranges_of_its_files(tmp_path, micro_step):
    data = tmp_path / "monitor"
    generate_monitor(data, ranks=2, steps=6, layers=1, step_interval=2, seed=5)
    whole = trendconv.convert(data, tmp_path / "whole", format="monitor", workers=1, micro_step=micro_step)[0]
    summary = trendconv.convert(
        data, tmp_path / "split", format="monitor", workers=2, micro_step=micro_step, split_steps=2
    )[0]
    names = [part.db.name for part in summary.load.parts]
    assert names == [
        "monitor_data.steps-000000-000002.trend.db",
        "monitor_data.steps-000004-000006.trend.db",
        "monitor_data.steps-000008-000010.trend.db",
    ]
    dbs = [tmp_path / "split" / name for name in names]
    assert union(dbs) == sorted(by_name(whole.load.db))
    tags = sorted({row for db in dbs for row in query(db, TAGS_BY_NAME)})
    whole_tags = query(whole.load.db, TAGS_BY_NAME)
    assert {row[:3] for row in tags} == {row[:3] for row in whole_tags}
    if micro_step:
        spans = [query(db, "SELECT min_step, max_step FROM global_stats")[0] for db in dbs]
        assert [later[0] for later in spans[1:]] == [earlier[1] + 1 for earlier in spans[:-1]]


def test_the_summary_lists_each_database(dump_data, tmp_path):
    result = invoke("run", dump_data, "--db", tmp_path / "out", "-j", "2", "--split-steps", "2")
    lines = result.stdout.splitlines()
    sizes = [(tmp_path / "out" / name).stat().st_size for name in STEP_PARTS]
    assert result.exit_code == 0
    assert lines[0] == f"wrote 3 databases ({sum(sizes)} bytes) in {tmp_path / 'out'}, split by steps:"
    assert [line.split(":")[0] for line in lines[1:4]] == [f"  {name}" for name in STEP_PARTS]
    assert lines[1].startswith(f"  {STEP_PARTS[0]}: {sizes[0]} bytes, 4 shards, rows ")
    assert "(each database has its own)" in lines[5]
    assert "load" in lines[-1] and "(3 databases at once)" in lines[-1]


def test_no_temporary_file_or_record_is_left_by_a_split_but_its_own(dump_data, tmp_path):
    out = tmp_path / "out"
    trendconv.convert(dump_data, out, workers=2, split_steps=2)
    assert sorted(os.listdir(out)) == [".dump_data.trend.db.files.json", ".trendconv", *STEP_PARTS]
    assert sqlite3.connect(out / STEP_PARTS[0]).execute("PRAGMA journal_mode").fetchone() == ("delete",)


def test_shard_lists_give_back_what_they_were_given():
    """The load stage's compressed shard lists (trendconv.loading.records): order, indexing, pickling, any byte
    of a file name, every value of a meta."""
    import pickle

    from trendconv.loading.records import ShardList, packed
    from trendconv.shards import Shard

    names = [os.fsdecode(b"/w/\xff-%d.parquet" % number) for number in range(600)]
    given = [Shard(Path(name), {"rows": n, "f": 0.1, "s": "é", "l": [None, True]}) for n, name in enumerate(names)]
    kept = ShardList(given[:10])
    kept.extend(packed(shard) for shard in given[10:300])
    for shard in given[300:]:
        kept.append(shard)
    assert len(kept) == 600 and list(kept) == given
    assert [kept[0], kept[299], kept[-1], *kept[255:258]] == [given[0], given[299], given[-1], *given[255:258]]
    assert list(pickle.loads(pickle.dumps(kept))) == given
    with pytest.raises(IndexError):
        kept[600]


def test_a_spilled_shard_list_keeps_its_blocks_in_an_unnamed_file_of_its_directory(tmp_path):
    """`run` keeps the shards it has taken on disk until the parse ends (ShardList(spill=...)): the same shards
    back, only their blocks' ends in memory, no name left in the directory, and pickled whole for a loader."""
    import pickle

    from trendconv.loading.records import ShardList
    from trendconv.shards import Shard

    given = [Shard(f"/w/{number}.parquet", {"rows": number, "s": "é"}) for number in range(600)]
    kept = ShardList(spill=tmp_path)
    assert (kept._blocks._file, os.listdir(tmp_path)) == (None, [])  # nothing made before the first block
    for shard in given:
        kept.append(shard)
    kept.close()
    assert isinstance(kept._blocks._file.name, int)  # O_TMPFILE: a descriptor, no name (Linux)
    assert (len(kept._blocks), os.listdir(tmp_path)) == (3, [])
    assert os.fstat(kept._blocks._file.fileno()).st_size == kept._blocks._ends[-1]  # written through, unbuffered
    assert list(kept) == given and [kept[599], kept[256], kept[0]] == [given[599], given[256], given[0]]
    again = pickle.loads(pickle.dumps(kept))
    assert type(again._blocks) is list and list(again) == given


def test_a_spilled_shard_list_that_cannot_write_names_the_directory(tmp_path):
    from trendconv.errors import OutputError
    from trendconv.loading.records import ShardList
    from trendconv.shards import Shard

    kept = ShardList(spill=tmp_path / "gone")
    with pytest.raises(OutputError) as raised:
        kept.extend(Shard(f"/w/{number}.parquet", {"rows": number}) for number in range(3))
    assert str(raised.value) == f"{tmp_path / 'gone'}: cannot write: No such file or directory"


def test_shards_in_order_are_kept_compressed_and_others_sorted_as_sorted_sorts_them():
    """`load` keeps a manifest's shards as they come (trendconv.loading.records.in_order): in a compressed list
    while they are in processing order, as this trendconv writes them, else sorted, equal keys in the order given."""
    from trendconv.loading.records import ShardList, in_order
    from trendconv.shards import Shard

    def shards_of(*keys):
        return [Shard(f"/w/{index}.parquet", {"step": step, "rank": rank}) for index, (step, rank) in enumerate(keys)]

    def key(meta):
        return (meta["step"], meta["rank"])

    given = shards_of(*((step, rank) for step in range(3) for rank in range(200)))
    kept = in_order(given, key)
    assert (type(kept), list(kept)) == (ShardList, given)
    mixed = shards_of((1, 0), (0, 1), (0, 1), (0, 0), (2, 0))
    kept = in_order(mixed, key)
    assert [shard.text for shard in kept] == [
        "/w/3.parquet",
        "/w/1.parquet",
        "/w/2.parquet",
        "/w/0.parquet",
        "/w/4.parquet",
    ]
    assert [shard.meta for shard in kept] == [shard.meta for shard in sorted(mixed, key=lambda shard: key(shard.meta))]


def test_a_shard_made_from_text_is_the_shard_of_that_path():
    """A shard list gives its shards back with their paths as text (`Shard.text`): the Path is made when asked
    for, and such a shard equals the one made with the Path."""
    from trendconv.shards import Shard

    name = os.fsdecode(b"/w/\xff/a.parquet")
    given, kept = Shard(Path(name), {"rows": 1}), Shard(name, {"rows": 1})
    assert (kept.text, given.text, kept.path, kept == given, kept == Shard(name, {"rows": 2})) == (
        name,
        name,
        Path(name),
        True,
        False,
    )


def _meta(fmt_name: str, step: int, rows: int) -> dict:
    """The footer fields that place a shard in its group: a step directory, or a CSV file of two steps."""
    if fmt_name == "dump":
        return {"step": step, "rows": rows}
    return {"file": f"grad_reduced_{step}-{step + 1}.csv", "metric": "grad_reduced", "rows": rows}


@pytest.mark.parametrize("fmt_name", ["dump", "monitor"])
def test_an_unsplit_output_is_the_part_the_partitioner_makes(fmt_name):
    """`partition` takes one database without grouping the shards when it fits: the same steps, group and row
    counts and name as group by group, the shards in processing order; past the size, the groups decide."""
    from trendconv.formats import FORMATS
    from trendconv.loading.split import TABLES_BYTES, Census, Partitioner, Split, groups, partition
    from trendconv.shards import Shard

    fmt = FORMATS[fmt_name]
    metas = [_meta(fmt_name, step, rows) for step, rows in [(7, 3), (2, 5), (7, 1), (4, 0), (2, 2)]]
    given = [Shard(Path(f"/w/{number}.parquet"), meta) for number, meta in enumerate(metas)]
    grouped = Partitioner(fmt, Split(name="run"))
    for steps, members in groups(fmt, given):
        grouped.add(steps, members)
    [expected] = grouped.named()
    [one] = partition(fmt, given, Split(name="run"))
    last = 8 if fmt_name == "monitor" else 7
    fields = (one.first, one.last, one.groups, one.rows, one.name)
    assert fields == (2, last, 3, 11, f"run.{fmt.db_name}")
    assert fields == (expected.first, expected.last, expected.groups, expected.rows, expected.name)
    assert list(one.shards) == given
    census = Census()  # as `run` counts the shards while they come: then the metas are not read again

    class Unread(list):
        def __iter__(self):
            raise AssertionError("the shards' metas were read again")

    for meta in metas:
        census.add(fmt, meta)
    [counted] = partition(fmt, Unread(given), Split(name="run"), census)
    assert (counted.first, counted.last, counted.groups, counted.rows, counted.name) == fields
    divided = partition(fmt, given, Split(max_size=TABLES_BYTES + 8 * fmt.row_bytes))
    assert [(part.first, part.last, part.rows, [shard.path.name for shard in part.shards]) for part in divided] == [
        (2, last - 3, 7, ["1.parquet", "4.parquet", "3.parquet"]),
        (7, last, 4, ["0.parquet", "2.parquet"]),
    ]
