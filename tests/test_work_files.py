"""WORK contents that trendconv did not write as they are (edited footers, manifests, work.json, foreign files),
and all-or-nothing conversion of dump and monitor data together."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest
from helpers import A1_CONSTRUCT, A1_DATA, ACTV, GRAD, RUN, invoke, write_file_set, write_run

from trendconv import api, schemas, shards, workdir
from trendconv.blocks import SpilledBlocks
from trendconv.cli import report
from trendconv.errors import DataError
from trendconv.formats import FORMATS
from trendconv.formats.monitor import builder as monitor_builder
from trendconv.formats.monitor.builder import MonitorBuilder
from trendconv.parsing import manifest_shards
from trendconv.parsing.reuse import present_shards

INT64 = "an integer from -9223372036854775808 to 9223372036854775807"
COUNT = "an integer from 0 to 9223372036854775807"
AGAIN = "run `trendconv parse` again"  # as the CLI words it; the library: "run `trendconv.parse()` again"
DUMP_SHARD = Path(".trendconv/dump/shards/step0_rank0.parquet")
# The monitor shards of a parse share one chunk file (its name is a digest): the first unit's is actv_0-1.csv's.
MONITOR_SHARD = Path(".trendconv/monitor/shards/_chunks")


def located(out: Path, shard: Path) -> Path:
    """The file of SHARD in OUT: the dump shard itself, or the monitor shards' one chunk file."""
    if shard != MONITOR_SHARD:
        return out / shard
    [chunk] = (out / shard).iterdir()
    return chunk


def first_unit(change):
    """CHANGE applied to the entry of the first unit in a chunk's footer."""
    return lambda document: {**document, "units": [change(document["units"][0]), *document["units"][1:]]}


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> tuple[Path, Path]:
    """(DATA, OUT): dump data of two steps beside monitor data, converted once; tests work on copies of OUT."""
    root = tmp_path_factory.mktemp("converted")
    data = root / "data"
    write_run(data, {"actv_0-1.csv": ACTV, "grad_reduced_0-1.csv": GRAD})
    for step in (0, 1):
        write_file_set(data / f"step{step}" / "rank0", A1_DATA, A1_CONSTRUCT)
    api.run_all(data, root / "out", api.ParseOptions(), workers=1, input_format="auto")
    return data, root / "out"


@pytest.fixture
def out(converted, tmp_path) -> Path:
    copy = tmp_path / "out"
    shutil.copytree(converted[1], copy)
    return copy


@pytest.fixture
def data(converted) -> Path:
    return converted[0]


def set_footer(path: Path, change) -> None:
    """Rewrite the footer document of the shard at PATH as CHANGE(document) returns it (JSON, or raw bytes)."""
    table = pq.read_table(path)
    new = change(orjson.loads(pq.ParquetFile(path).metadata.metadata[shards.META_KEY]))
    raw = new if isinstance(new, bytes) else json.dumps(new).encode()
    pq.write_table(table.replace_schema_metadata({shards.META_KEY: raw}), path)


def databases(out: Path) -> dict[str, tuple[int, bytes]]:
    """The databases in OUT, by name: inode and bytes, to tell `left alone` from `rewritten`."""
    return {path.name: (path.stat().st_ino, path.read_bytes()) for path in out.glob("*.trend.db") if path.is_file()}


def leftovers(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*.tmp"))


# --- the footer schema, key by key ----------------------------------------------------------------------------------


def without(key: str):
    return lambda meta: {name: value for name, value in meta.items() if name != key}


def setting(key: str, value):
    return lambda meta: {**meta, key: value}


DUMP_FOOTERS = [
    (lambda meta: [1, 2], "the document is a list of 2, expected an object"),
    (lambda meta: None, "the document is null, expected an object"),
    (without("step"), "no 'step'"),
    (without("options"), "no 'options'"),
    (setting("zzz", 1), "unexpected key 'zzz'"),
    (setting("step", "0"), f"'step' is a string ('0'), expected {INT64}"),
    (setting("step", True), f"'step' is true, expected {INT64}"),
    (setting("step", 2**63), f"'step' is 9223372036854775808, expected {INT64}"),
    (setting("rank", 1.0), f"'rank' is 1.0, expected {INT64}"),
    (setting("rank", [0]), f"'rank' is a list of 1, expected {INT64}"),
    (
        setting("micro_steps", 2**63 + 1),
        "'micro_steps' is 9223372036854775809, expected an integer from -9223372036854775807 to 9223372036854775808",
    ),
    (
        setting("micro_steps", 1e300),
        "'micro_steps' is 1e+300, expected an integer from -9223372036854775807 to 9223372036854775808",
    ),
    (setting("item", "../rank0"), "'item' is a string ('../rank0'), expected a file name"),
    (setting("trendconv_version", ""), "'trendconv_version' is a string (''), expected a non-empty string"),
    (setting("rows", -1), f"'rows' is -1, expected {COUNT}"),
    (setting("rows", 14), "'rows' is 14, the shard holds 13"),
    (setting("skipped", {"null": [1]}), f"'skipped.null' is a list of 1, expected {COUNT}"),
    (setting("skipped", []), "'skipped' is an empty list, expected an object"),
    (setting("sources", []), "'sources' is an empty list, expected a non-empty list"),
    (setting("sources", [None]), "'sources[0]' is null, expected an object"),
    (setting("shard_format", "2"), "'shard_format' is a string ('2'), expected 2"),
    (setting("input_format", ["dump"]), "'input_format' is a list of 1, expected 'dump'"),
    (setting("input_format", "monitor"), "a monitor shard where dump shards belong"),
    (
        lambda meta: {**meta, "options": {**meta["options"], "micro_step": "true"}},
        "'options.micro_step' is a string ('true'), expected true or false",
    ),
    (
        lambda meta: {**meta, "options": {**meta["options"], "mapping_sha256": "x"}},
        "'options.mapping_sha256' is a string ('x'), expected a sha256 digest (64 hex digits)",
    ),
    (lambda meta: {**meta, "options": {"micro_step": True}}, "no 'options.mapping_sha256'"),
    (
        lambda meta: {**meta, "sources": [{**meta["sources"][0], "size": "3133"}]},
        f"'sources[0].size' is a string ('3133'), expected {COUNT}",
    ),
    (
        lambda meta: {**meta, "rows_per_metric": {**meta["rows_per_metric"], "forward": 8}},
        "'rows_per_metric' adds up to 14, not 'rows'",
    ),
    (setting("rows_per_metric", {"forward": 13, "x": 0}), "'rows_per_metric' counts an unknown metric 'x'"),
]
MONITOR_FOOTERS = [
    (setting("rank", 100000), "'rank' is 100000, expected an integer from 0 to 99999"),
    (setting("metric", "zz"), "'metric' is a string ('zz'), expected a monitor metric name"),
    (setting("stats", ["zz"]), "'stats[0]' is a string ('zz'), expected a monitor stat name"),
    (setting("stats", ["norm", "norm"]), "'stats' lists an entry twice"),
    (setting("has_micro_step", "yes"), "'has_micro_step' is a string ('yes'), expected true or false"),
    (setting("micro_steps_per_step", [[0]]), "'micro_steps_per_step[0]' is a list of 1, expected a list of two"),
    (setting("micro_steps_per_step", [[0, -1]]), f"'micro_steps_per_step[0][1]' is -1, expected {COUNT}"),
    (setting("micro_steps_per_step", [[0, "2"]]), f"'micro_steps_per_step[0][1]' is a string ('2'), expected {COUNT}"),
    (
        setting("micro_steps_per_step", [[1, 2], [0, 2]]),
        "'micro_steps_per_step' is not in ascending order of distinct steps",
    ),
    (setting("micro_steps_per_step", []), "'micro_steps_per_step' is an empty list for 8 rows"),
    (
        setting("file", "grad_reduced_0-1.csv"),
        "'file' 'grad_reduced_0-1.csv' is not a CSV file name of metric 'actv'",
    ),
    (setting("file", "actv_0-1.csv/../x"), "'file' is a string ('actv_0-1.csv/../x'), expected a file name"),
    (
        setting("run_dir", "Feb20_16-27-56-rank1-b2f0e6a1"),
        "'run_dir' 'Feb20_16-27-56-rank1-b2f0e6a1' is not a run directory of rank 0",
    ),
    (setting("rows_per_metric", {"actv": 4, "exp_avg": 4}), "'rows_per_metric' is not the rows of metric 'actv'"),
    (setting("input_format", "dump"), "a dump shard where monitor shards belong"),
    (without("stats"), "no 'stats'"),
]


@pytest.mark.parametrize(("change", "message"), DUMP_FOOTERS)
def test_dump_footer_schema(converted, change, message):
    meta = shards.read_meta(converted[1] / DUMP_SHARD, FORMATS["dump"])
    with pytest.raises(schemas.Invalid) as caught:
        schemas.check_meta(change(meta), FORMATS["dump"], meta["rows"])
    assert str(caught.value) == message


@pytest.mark.parametrize(("change", "message"), MONITOR_FOOTERS)
def test_monitor_footer_schema(converted, change, message):
    [meta, _] = shards.read_chunk(located(converted[1], MONITOR_SHARD), FORMATS["monitor"])
    meta = {key: value for key, value in meta.items() if key not in ("chunk", "row_start")}
    with pytest.raises(schemas.Invalid) as caught:
        schemas.check_meta(change(meta), FORMATS["monitor"], meta["rows"])
    assert str(caught.value) == message


def test_the_footers_the_parse_writes_pass(converted):
    work = converted[1] / ".trendconv"
    assert [shard.meta["step"] for shard in manifest_shards(work, FORMATS["dump"])] == [0, 1]
    assert [shard.meta["file"] for shard in manifest_shards(work, FORMATS["monitor"])] == [
        "actv_0-1.csv",
        "grad_reduced_0-1.csv",
    ]


# --- tampered footers through load, run and inspect ------------------------------------------------------------------

FOOTER_KINDS = {
    "a list": (DUMP_SHARD, lambda meta: [meta], "unexpected footer: the document is a list of 1, expected an object"),
    "not JSON": (DUMP_SHARD, lambda meta: b'{"step": ', "not a readable trendconv shard (unexpected end of data: "),
    "a number as a string": (DUMP_SHARD, setting("micro_steps", "2"), "unexpected footer: 'micro_steps' is a string"),
    "huge micro_steps": (DUMP_SHARD, setting("micro_steps", 2**63 + 5), "unexpected footer: 'micro_steps' is 92233"),
    "the other format": (DUMP_SHARD, setting("input_format", "monitor"), "unexpected footer: a monitor shard where"),
    "another step": (DUMP_SHARD, setting("step", 1), "unexpected footer: it describes step1_rank0.parquet"),
    "a monitor key missing": (
        MONITOR_SHARD,
        first_unit(without("has_micro_step")),
        "unexpected footer: units[0]: no 'has_micro_step'",
    ),
    "a chunk key missing": (MONITOR_SHARD, without("chunk"), "unexpected footer: no 'chunk'"),
    "rows that overlap": (
        MONITOR_SHARD,
        first_unit(setting("row_start", 1)),
        "unexpected footer: 'units[0].row_start' is 1, expected 0",
    ),
}


@pytest.mark.parametrize("kind", FOOTER_KINDS)
def test_a_tampered_footer_is_one_line_for_load_reparsed_by_run_corrupt_for_inspect(out, data, kind):
    shard, change, message = FOOTER_KINDS[kind]
    shard = located(out, shard).relative_to(out)
    set_footer(out / shard, change)
    before = databases(out)
    loaded = invoke("load", out / ".trendconv", "--db", out)
    assert loaded.exit_code == 1
    assert loaded.stderr.startswith(f"error: {out / shard}: {message}")
    assert loaded.stderr.endswith(f"; {AGAIN}\n") and loaded.stderr.count("\n") == 1
    assert databases(out) == before and leftovers(out) == []
    fmt = "monitor" if shard.parent == MONITOR_SHARD else "dump"
    inspected = orjson.loads(invoke("inspect", out / ".trendconv", "--format", fmt, "--json").stdout)
    # the monitor shards share the damaged chunk
    statuses = ["corrupt", "ok"] if fmt == "dump" else ["corrupt", "corrupt"]
    assert [entry["status"] for entry in inspected["shards"]] == statuses
    rerun = invoke("run", data, "--db", out, "-j", "1")
    assert rerun.exit_code == 0, rerun.output
    units, counts = ("file sets", "1 parsed, 1 reused")
    if fmt == "monitor":
        units, counts = ("monitor CSV files", "2 parsed, 0 reused")
    assert f"  2 {units}: {counts} (shards in {out / '.trendconv'})" in rerun.stdout.splitlines()
    # a damaged chunk whose footer names it is trendconv's, and goes; one that does not say so is left in place
    assert (out / shard).exists() == (fmt == "dump" or kind == "a chunk key missing")
    assert {name: content for name, (_, content) in databases(out).items()} == {
        name: content for name, (_, content) in before.items()
    }


def test_a_shard_of_another_shard_format_is_stale(out):
    set_footer(out / DUMP_SHARD, setting("shard_format", 1))
    inspected = orjson.loads(invoke("inspect", out / ".trendconv", "--json").stdout)
    assert [entry["status"] for entry in inspected["shards"]] == ["stale", "ok"]
    loaded = invoke("load", out / ".trendconv", "--db", out)
    assert (loaded.exit_code, loaded.stderr) == (
        1,
        f"error: {out / DUMP_SHARD}: shard format 1, this trendconv reads format 2; {AGAIN}\n",
    )


def test_a_footer_that_does_not_match_its_rows(out):
    """Values within the footer's bounds that the rows contradict: the footer would shape the database."""
    before = databases(out)
    set_footer(out / DUMP_SHARD, setting("micro_steps", 1))
    loaded = invoke("load", out / ".trendconv", "--db", out)
    assert (loaded.exit_code, loaded.stderr) == (
        1,
        f"error: {out / DUMP_SHARD}: the rows do not match the footer (micro step 1 in the rows, 1 micro step in "
        "the footer); delete it and run `trendconv parse` again\n",
    )
    set_footer(out / DUMP_SHARD, setting("micro_steps", 2))
    chunk = located(out, MONITOR_SHARD)
    set_footer(chunk, first_unit(setting("micro_steps_per_step", [[0, 2**62], [1, 2]])))
    loaded = invoke("load", out / ".trendconv", "--db", out)
    assert (loaded.exit_code, loaded.stderr) == (
        1,
        f"warning: {out / 'dump_data.trend.db'}: left unchanged: the monitor data failed, and the databases of all "
        "formats are replaced together or not at all\n"
        f"error: {chunk}: the rows do not match the footer (their micro-step counts per step are not "
        "the footer's); delete it and run `trendconv parse` again\n",
    )
    assert databases(out) == before and leftovers(out) == []


def flip_in_rows(path: Path, column: str) -> None:
    """Change one bit of the last byte of COLUMN's data page in the shard file PATH: the rows change, the footer
    does not."""
    metadata = pq.ParquetFile(path).metadata.row_group(0)
    [chunk] = [metadata.column(i) for i in range(metadata.num_columns) if metadata.column(i).path_in_schema == column]
    offset = chunk.data_page_offset + chunk.total_compressed_size - 1
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 1
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("shard", [DUMP_SHARD, MONITOR_SHARD], ids=["dump", "monitor"])
def test_a_changed_byte_in_the_rows_fails_the_load(out, shard):
    """Shards carry page checksums: one changed bit in a statistic's page, which Snappy decompresses without
    complaint into another number, is refused with the file's name, and no database is replaced."""
    before = databases(out)
    path = located(out, shard)
    flip_in_rows(path, "mean")
    loaded = invoke("load", out / ".trendconv", "--db", out)
    kept = (
        ""
        if shard == DUMP_SHARD
        else f"warning: {out / 'dump_data.trend.db'}: left unchanged: the monitor data failed, and the databases of "
        "all formats are replaced together or not at all\n"
    )
    assert (loaded.exit_code, loaded.stderr) == (
        1,
        f"{kept}error: {path}: not a readable trendconv shard (could not verify page integrity, CRC checksum "
        "verification failed for page_ordinal 0); delete it and run `trendconv parse` again\n",
    )
    assert databases(out) == before and leftovers(out) == []


def test_the_rows_of_a_unit_in_a_chunk_are_checked_where_the_load_takes_them(tmp_path):
    """`UnitRows.span` (the monitor load's path for units in a chunk): the unit's rows must lie in the file and its
    columns be there with the shard types, or the chunk replaced since the parse is named."""
    import pyarrow as pa

    from trendconv.formats.monitor.shard import schema as monitor_schema

    kinds = monitor_schema(["norm"])
    values = {"int64": [1, 2], "double": [0.5, 1.5]}
    good = pa.table(
        [pa.array(values.get(str(field.type), ["a", "b"])).cast(field.type) for field in kinds], schema=kinds
    )
    path = tmp_path / "chunk.parquet"
    shards.write_shard(path, good, {"chunk": 1})

    def span(meta: dict, stats: list[str]) -> tuple[int, int]:
        return shards.UnitRows().span(shards.Shard(path, {"chunk": str(path), **meta}), monitor_schema(stats))

    assert span({"row_start": 1, "rows": 1}, ["norm"]) == (1, 1)
    with pytest.raises(DataError) as beyond:
        span({"row_start": 1, "rows": 2}, ["norm"])
    assert str(beyond.value) == (
        f"{path}: the rows do not match the footer (rows 1 to 2 of 2); delete it and run `trendconv.parse()` again"
    )
    with pytest.raises(DataError) as missing:
        span({"row_start": 0, "rows": 1}, ["norm", "max"])
    assert str(missing.value) == (
        f"{path}: the rows do not match the footer (rows 0 to 0 of 2); delete it and run `trendconv.parse()` again"
    )
    shards.write_shard(path, good.set_column(6, "norm", pa.array([1, 2])), {"chunk": 1})  # norm as int64
    with pytest.raises(DataError) as typed:
        span({"row_start": 0, "rows": 1}, ["norm"])
    assert str(typed.value) == f"{path}: unexpected shard columns; run `trendconv.parse()` again"


def test_monitor_step_slots_beyond_64_bits(out):
    set_footer(located(out, MONITOR_SHARD), first_unit(setting("micro_steps_per_step", [[0, 2**62], [1, 2**62 + 1]])))
    with pytest.raises(DataError) as caught:
        api.load(out / ".trendconv", out, input_format="monitor")
    assert str(caught.value) == (
        f"{RUN}/actv_0-1.csv: step 1, micro_step 4611686018427387904: with the micro-step slots of the steps before, "
        "the global steps reach 9223372036854775808, beyond a 64-bit integer (`micro_step=False` keeps the original "
        "step numbers)"
    )


# --- manifest.json and work.json ---------------------------------------------------------------------------------


def edit_json(path: Path, change) -> None:
    new = change(json.loads(path.read_text()))
    path.write_bytes(new if isinstance(new, bytes) else json.dumps(new).encode())


MANIFESTS = [
    (setting("shards", []), "unexpected contents: 'shards' is an empty list, expected a non-empty list"),
    (setting("shards", [1]), "unexpected contents: 'shards[0]' is 1, expected a relative path ending in .parquet"),
    (
        setting("shards", ["../manifest.json"]),
        "unexpected contents: 'shards[0]' is a string ('../manifest.json'), expected a relative path ending in "
        ".parquet",
    ),
    (
        setting("shards", ["/etc/passwd.parquet"]),
        "unexpected contents: 'shards[0]' is a string ('/etc/passwd.parquet'), expected a relative path ending in "
        ".parquet",
    ),
    (lambda doc: {**doc, "shards": doc["shards"] * 2}, "unexpected contents: 'shards' lists an entry twice"),
    (
        setting("shards", "step0_rank0.parquet"),
        "unexpected contents: 'shards' is a string ('step0_rank0.parquet'), expected a non-empty list",
    ),  # fmt: skip
    (without("options"), "unexpected contents: no 'options'"),
    (setting("extra", None), "unexpected contents: unexpected key 'extra'"),
    (
        setting("input_format", "monitor"),
        "unexpected contents: 'input_format' is a string ('monitor'), expected 'dump'",
    ),
    (setting("shard_format", 10**30), "unexpected contents: 'shard_format' is 1e+30, expected 2"),
    (lambda doc: None, "unexpected contents: the document is null, expected an object"),
    (lambda doc: b'{"shards": [', "unreadable"),
]


@pytest.mark.parametrize(("change", "message"), MANIFESTS)
def test_a_tampered_manifest_is_one_line(out, change, message):
    manifest = out / ".trendconv" / "dump" / "manifest.json"
    edit_json(manifest, change)
    before = databases(out)
    loaded = invoke("load", out / ".trendconv", "--db", out)
    assert (loaded.exit_code, loaded.stderr) == (1, f"error: {manifest}: {message}; {AGAIN}\n")
    assert databases(out) == before and leftovers(out) == []
    inspected = orjson.loads(invoke("inspect", out / ".trendconv", "--json").stdout)
    assert inspected["complete"] is False


def test_a_manifest_naming_a_shard_that_is_not_there(out):
    edit_json(
        out / ".trendconv" / "dump" / "manifest.json",
        lambda doc: {**doc, "shards": ["step0_rank0.parquet", "x.parquet"]},
    )
    loaded = invoke("load", out / ".trendconv", "--db", out)
    missing = out / ".trendconv" / "dump" / "shards" / "x.parquet"
    assert (loaded.exit_code, loaded.stderr) == (1, f"error: {missing}: shard missing; {AGAIN} to rebuild it\n")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (setting("data", None), "'data' is null, expected a non-empty string"),
        (without("data"), "no 'data'"),
        (setting("options", []), "'options' is an empty list, expected an object"),
        (lambda doc: [doc], "the document is a list of 1, expected an object"),
        (setting("input_format", "monitor"), "'input_format' is a string ('monitor'), expected 'dump'"),
    ],
)
def test_a_tampered_work_json_is_one_line_for_inspect(out, change, message):
    work_json = out / ".trendconv" / "dump" / "work.json"
    edit_json(work_json, change)
    inspected = invoke("inspect", out / ".trendconv")
    assert (inspected.exit_code, inspected.stderr) == (
        1,
        f"error: {work_json}: unexpected contents: {message}; {AGAIN}\n",
    )


def test_directories_where_work_files_should_be(out, data):
    work = out / ".trendconv"
    dump = work / "dump"
    (dump / "manifest.json").unlink()
    (dump / "manifest.json").mkdir()
    loaded = invoke("load", work, "--db", out)
    assert (loaded.exit_code, loaded.stderr) == (1, f"error: {dump / 'manifest.json'}: not a file; {AGAIN}\n")
    rerun = invoke("run", data, "--db", out)
    assert (rerun.exit_code, rerun.stderr) == (
        1,
        f"error: {dump / 'manifest.json'}: cannot remove the old manifest: Is a directory\n",
    )
    (dump / "manifest.json").rmdir()
    (dump / "shards" / "step1_rank0.parquet").unlink()
    (dump / "shards" / "step1_rank0.parquet").mkdir()
    rerun = invoke("run", data, "--db", out)
    assert (rerun.exit_code, rerun.stderr) == (
        1,
        f"error: {dump / 'shards' / 'step1_rank0.parquet'}: cannot write: Is a directory\n",
    )
    shutil.rmtree(work / "monitor")
    (work / "monitor").write_text("not a directory")
    (dump / "shards" / "step1_rank0.parquet").rmdir()
    rerun = invoke("run", data, "--db", out)
    assert rerun.stderr.splitlines()[-1] == (
        f"error: {work / 'monitor'}: cannot use it as the WORK directory: Not a directory"
    )
    assert leftovers(out) == []


def test_the_names_under_the_shard_directory_are_listed_once_or_not_at_all(out):
    """A parse looks at WORK's shard directory once (`present_shards`), not at each unit's shard file; where the
    listing fails, each shard is looked at on its own (the test above has the errors that follow)."""
    dump, monitor = out / ".trendconv" / "dump", out / ".trendconv" / "monitor"
    [chunk] = (monitor / "shards" / "_chunks").iterdir()
    assert [present_shards(dump), present_shards(monitor), present_shards(out / "nothing")] == [
        {"step0_rank0.parquet", "step1_rank0.parquet"},
        {"_chunks", f"_chunks/{chunk.name}"},
        set(),
    ]
    shutil.rmtree(dump / "shards")
    (dump / "shards").write_text("not a directory")
    assert present_shards(dump) is None


def test_a_fifo_in_place_of_a_shard_is_never_opened(out):
    shard = out / DUMP_SHARD
    shard.unlink()
    os.mkfifo(shard)
    loaded = invoke("load", out / ".trendconv", "--db", out)
    assert (loaded.exit_code, loaded.stderr) == (1, f"error: {shard}: shard missing; {AGAIN} to rebuild it\n")
    with pytest.raises(DataError) as caught:
        shards.read_meta(shard, FORMATS["dump"])
    assert str(caught.value) == f"{shard}: not a readable trendconv shard (not a file); run `trendconv.parse()` again"


# --- files under the shard directory that trendconv did not write -------------------------------------------------


def test_only_trendconv_shards_of_units_gone_from_data_are_removed(out, data, tmp_path):
    shard_dir = out / ".trendconv" / "dump" / "shards"
    external = tmp_path / "external"
    external.mkdir()
    (external / "mine.parquet").write_text("a user's file")
    foreign = {
        "mine.parquet": lambda path: path.write_text("a user's file"),
        "step7_rank0.parquet": lambda path: path.write_text("not a shard, with a shard's name"),
        "step9_rank0.parquet": lambda path: shutil.copy(shard_dir / "step1_rank0.parquet", path),  # says step 1
        "step5_rank0.parquet": lambda path: path.symlink_to(shard_dir / "step0_rank0.parquet"),
        "backup/step0_rank0.parquet": lambda path: shutil.copy(shard_dir / "step0_rank0.parquet", path),
        "folder.parquet": lambda path: path.mkdir(),
        "fifo.parquet": os.mkfifo,
    }
    (shard_dir / "backup").mkdir()
    for name, make in foreign.items():
        make(shard_dir / name)
    (shard_dir / "linked").symlink_to(external)
    (shard_dir / "notes.txt").write_text("notes")
    more = tmp_path / "more"
    shutil.copytree(data, more)
    write_file_set(more / "step2" / "rank0", A1_DATA, A1_CONSTRUCT)
    assert invoke("run", more, "--db", out, "-j", "1", "-q").exit_code == 0
    shutil.rmtree(more / "step2")
    rerun = invoke("run", more, "--db", out, "-j", "1", "--format", "dump")
    assert rerun.exit_code == 0, rerun.output
    assert rerun.stderr == (
        f"warning: {shard_dir}: left 7 files named *.parquet in place, as trendconv did not write them (first: "
        "backup/step0_rank0.parquet); they are not loaded\n"
    )
    remaining = sorted(str(path.relative_to(shard_dir)) for path in shard_dir.rglob("*"))
    assert remaining == sorted(
        [*foreign, "backup", "linked", "notes.txt", "step0_rank0.parquet", "step1_rank0.parquet"]
    )  # step2_rank0.parquet, trendconv's shard of the step that is gone, is removed
    assert (external / "mine.parquet").read_text() == "a user's file"
    summary = api.parse(more, out / ".trendconv", api.ParseOptions(), workers=1, input_format="dump")
    assert (summary.removed_orphans, len(summary.warnings)) == (0, 1)


def test_monitor_chunks_of_a_run_gone_from_data_are_removed(out, data, tmp_path):
    more = tmp_path / "more"
    shutil.copytree(data, more)
    old_run = "Feb19_10-00-00-rank1-0000aaaa"
    write_run(more, {"actv_0-1.csv": ACTV}, run=old_run)
    assert invoke("run", more, "--db", out, "-j", "1", "-q").exit_code == 0  # the new run's file: a chunk of its own
    chunks_dir = out / ".trendconv" / "monitor" / "shards" / "_chunks"
    [first, new] = sorted(chunks_dir.iterdir(), key=lambda path: path.stat().st_mtime_ns)
    assert [meta["run_dir"] for meta in shards.read_chunk(new, FORMATS["monitor"])] == [old_run]
    (chunks_dir / "mine.parquet").write_text("a user's file")
    shutil.rmtree(more / old_run)
    summary = api.parse(more, out / ".trendconv", api.ParseOptions(), workers=1, input_format="monitor")
    assert (summary.removed_orphans, summary.reused) == (1, 2)
    assert sorted(path.name for path in chunks_dir.iterdir()) == sorted([first.name, "mine.parquet"])
    assert summary.warnings == [
        f"{chunks_dir.parent}: left 1 file named *.parquet in place, as trendconv did not write them (first: "
        "_chunks/mine.parquet); they are not loaded"
    ]


def test_a_chunk_is_kept_while_one_of_its_units_is_good(out, data, tmp_path):
    """A changed CSV file is parsed alone into a chunk of its own; the old chunk stays for the unchanged file."""
    more = tmp_path / "more"
    shutil.copytree(data, more)
    chunks_dir = out / ".trendconv" / "monitor" / "shards" / "_chunks"
    [first] = chunks_dir.iterdir()
    with (more / RUN / "grad_reduced_0-1.csv").open("a") as changed:
        changed.write("0,late.weight,1,1.0\n")
    summary = api.parse(more, out / ".trendconv", api.ParseOptions(), workers=1, input_format="monitor")
    assert (summary.parsed, summary.reused, summary.removed_orphans) == (1, 1, 0)
    [second] = [path for path in chunks_dir.iterdir() if path != first]
    assert [meta["file"] for meta in shards.read_chunk(second, FORMATS["monitor"])] == ["grad_reduced_0-1.csv"]
    loaded = manifest_shards(out / ".trendconv", FORMATS["monitor"])
    assert [(shard.meta["file"], shard.file) for shard in loaded] == [
        ("actv_0-1.csv", first),
        ("grad_reduced_0-1.csv", second),
    ]
    shutil.copy(data / RUN / "grad_reduced_0-1.csv", more / RUN / "grad_reduced_0-1.csv")  # a new mtime: stale
    again = api.parse(more, out / ".trendconv", api.ParseOptions(), workers=1, input_format="monitor")
    assert (again.parsed, again.reused) == (1, 1)
    assert len(list(chunks_dir.iterdir())) == 2  # the second chunk, now of no use, is gone; a third holds the file


# --- all or nothing ----------------------------------------------------------------------------------------------


def broken_monitor(data: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of DATA whose dump data changed (a new database would differ) and with a monitor CSV that fails."""
    copy = tmp_path / "changed"
    shutil.copytree(data, copy)
    write_file_set(copy / "step2" / "rank0", A1_DATA, A1_CONSTRUCT)
    bad = copy / RUN / "other_0-0.csv"
    bad.write_bytes(b"vpp_stage,name,step,norm\n0,w,0,1,2\n")
    return copy, bad


@pytest.mark.parametrize("command", ["run", "data2db"])
def test_auto_replaces_no_database_unless_all_formats_convert(out, data, tmp_path, command):
    changed, bad = broken_monitor(data, tmp_path)
    before = databases(out)
    if command == "run":
        result = invoke("run", changed, "--db", out, "-j", "1")
    else:
        result = invoke("data2db", "--data", changed, "--db", out)
    assert (result.exit_code, result.stderr) == (
        1,
        f"warning: {out / 'dump_data.trend.db'}: left unchanged: the monitor data failed, and the databases of all "
        f"formats are replaced together or not at all\nerror: {bad}: line 2: 5 fields, the header has 4\n",
    )
    assert result.stdout == ""
    assert databases(out) == before and leftovers(out) == []
    bad.unlink()
    fixed = invoke("run", changed, "--db", out, "-j", "1", "-q")
    assert fixed.exit_code == 0, fixed.output
    after = databases(out)
    assert after["dump_data.trend.db"][1] != before["dump_data.trend.db"][1]
    assert sorted(after) == ["dump_data.trend.db", "monitor_data.trend.db"]


def test_an_interrupted_auto_run_replaces_no_database(out, data, tmp_path, monkeypatch):
    changed, bad = broken_monitor(data, tmp_path)
    bad.unlink()
    before = databases(out)

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(MonitorBuilder, "seal", interrupted)
    result = invoke("run", changed, "--db", out, "-j", "1")
    assert (result.exit_code, result.stderr) == (130, "error: interrupted\n")
    assert databases(out) == before and leftovers(out) == []


def test_load_of_both_formats_replaces_both_or_neither(out, monkeypatch):
    before = databases(out)
    records = {path.name: path.read_bytes() for path in out.glob(".*.files.json")}

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(MonitorBuilder, "seal", interrupted)
    result = invoke("load", out / ".trendconv", "--db", out)
    assert (result.exit_code, result.stderr) == (130, "error: interrupted\n")
    assert databases(out) == before and leftovers(out) == []
    assert {path.name: path.read_bytes() for path in out.glob(".*.files.json")} == records
    assert sorted(records) == [".dump_data.trend.db.files.json", ".monitor_data.trend.db.files.json"]
    monkeypatch.undo()
    (out / "monitor_data.trend.db").unlink()
    (out / "monitor_data.trend.db").mkdir()
    result = invoke("load", out / ".trendconv", "--db", out)
    assert (result.exit_code, result.stderr) == (
        1,
        f"error: {out / 'monitor_data.trend.db'}: cannot write the database: it is a directory\n",
    )
    assert databases(out) == {"dump_data.trend.db": before["dump_data.trend.db"]} and leftovers(out) == []
    (out / "monitor_data.trend.db").rmdir()
    result = invoke("load", out / ".trendconv", "--db", out)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [line.split(" (")[0] for line in lines[::2]] == [
        f"wrote {out / 'dump_data.trend.db'}",
        f"wrote {out / 'monitor_data.trend.db'}",
    ]
    assert {name: content for name, (_, content) in databases(out).items()} == {
        name: content for name, (_, content) in before.items()
    }


def test_progress_bars_start_over_for_each_format(monkeypatch):
    monkeypatch.setattr(report.sys.stderr, "isatty", lambda: True)
    progress = report.Bars(("parse", "load"), enabled=True)
    with progress:
        progress.planned("dump", 2)
        progress.parsed("dump", reused=False)
        progress.planned("monitor", 3)
        bars = [(task.description, task.total, task.completed) for task in progress._progress.tasks]
    assert bars == [("parse", 3, 0), ("load ", 3, 0)]


@pytest.mark.parametrize("command", [("load", "--db"), ("inspect", "--format")])
def test_a_work_that_is_a_file_or_missing_is_named_as_such(tmp_path, command):
    (tmp_path / "a file").write_text("not a WORK directory")
    value = {"--db": tmp_path / "out", "--format": "monitor"}[command[1]]
    for work, problem in [(tmp_path / "a file", "is not a directory"), (tmp_path / "nothing", "does not exist")]:
        result = invoke(command[0], work, command[1], value)
        assert (result.exit_code, result.stderr) == (2, f"error: {work}: WORK {problem}\n")


def test_a_refused_second_rename_puts_the_first_database_back(out, data, tmp_path, monkeypatch):
    """The databases go in place one after the other: when the monitor's rename fails (an immutable file, another
    user's file in a sticky directory), the dump database already renamed is put back, or removed if it is new."""
    changed, bad = broken_monitor(data, tmp_path)
    bad.unlink()

    def refused(*args):
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(monitor_builder, "publish", refused)
    before = databases(out)
    result = invoke("run", changed, "--db", out, "-j", "1", "-q")
    message = f"error: {out / 'monitor_data.trend.db'}: cannot write the database: Operation not permitted\n"
    assert (result.exit_code, result.stderr) == (1, message)
    assert databases(out) == before and leftovers(out) == []
    (out / "dump_data.trend.db").unlink()
    result = invoke("run", changed, "--db", out, "-j", "1", "-q")
    assert (result.exit_code, result.stderr) == (1, message)
    assert sorted(databases(out)) == ["monitor_data.trend.db"] and leftovers(out) == []


def test_monitor_shards_parsed_with_other_options_are_named():
    """The monitor plan reads the metas once, in order: the first whose options differ from the first one is named."""
    from trendconv.formats.monitor.plan import plan_monitor

    def meta(file: str, micro_step: bool) -> dict:
        options = {"micro_step": micro_step, "mapping_sha256": "0" * 64}
        return {
            "options": options,
            "metric": "actv",
            "rows": 1,
            "stats": ["norm"],
            "rank": 0,
            "run_dir": "r0",
            "file": file,
            "micro_steps_per_step": [[0, 1]],
        }

    metas = iter([meta("actv_0-0.csv", True), meta("actv_1-1.csv", True), meta("actv_2-2.csv", False)])
    with pytest.raises(DataError) as caught:
        plan_monitor(metas)
    assert str(caught.value) == (
        "r0/actv_2-2.csv: parsed with no-micro-step, mapping sha256 000000000000, the other shards with micro-step, "
        "mapping sha256 000000000000; re-run parse"
    )
    assert plan_monitor(iter([meta("actv_0-0.csv", True)])).metrics == ["actv"]


DOCUMENTS = [
    {"a": 1},
    {},
    {"z": [], "b": {"y": [1, {"q": 'é\n"x'}], "a": []}, "m": "\u2028", "n": None, "f": 1.5},
    {"shards": ["a", 'b\\"c'], "located": [[None, 3], ["x/y.parquet", 2]]},
]


@pytest.mark.parametrize("document", DOCUMENTS)
def test_a_work_document_is_written_as_orjson_writes_it(tmp_path, document):
    path = tmp_path / "doc.json"
    workdir.write_json_atomic(path, document)
    assert path.read_bytes() == orjson.dumps(document, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
    assert os.listdir(tmp_path) == ["doc.json"]


@pytest.mark.parametrize("count", [0, 1, workdir.Streamed.BLOCK, workdir.Streamed.BLOCK * 2 + 1])
def test_a_streamed_list_is_written_as_the_whole_list_would_be(tmp_path, count):
    names = [f"run/é{number}.parquet" for number in range(count)]
    path = tmp_path / "manifest.json"
    workdir.write_json_atomic(path, {"shards": workdir.Streamed(iter(names)), "input_format": "monitor"})
    whole = {"shards": names, "input_format": "monitor"}
    assert path.read_bytes() == orjson.dumps(whole, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


def test_a_chunk_that_does_not_match_its_rows_is_found_before_the_next_chunk_is_loaded(tmp_path, monkeypatch):
    """The loader checks the units it took from a chunk file together, once the units of the next chunk come: a
    footer that the rows contradict in the first of two chunks fails the load as one in the last does (at `seal`)."""
    import trendconv
    from trendconv.parsing import runner

    monkeypatch.setattr(runner, "CHUNK_UNITS", 1)  # a chunk file per CSV file
    data, work = tmp_path / "data", tmp_path / "work"
    write_run(data, {"actv_0-1.csv": ACTV, "grad_reduced_0-1.csv": GRAD})
    trendconv.parse(data, work, format="monitor", workers=1)
    located = orjson.loads((work / "monitor" / "manifest.json").read_bytes())["located"]
    assert [count for _, count in located] == [1, 1]
    first = work / "monitor" / "shards" / located[0][0]  # actv_0-1.csv's, loaded first
    set_footer(first, first_unit(setting("micro_steps_per_step", [[0, 3], [1, 2]])))
    loaded = invoke("load", work, "--db", tmp_path / "out")
    assert (loaded.exit_code, loaded.stderr) == (
        1,
        f"error: {first}: the rows do not match the footer (their micro-step counts per step are not the footer's); "
        "delete it and run `trendconv parse` again\n",
    )
    assert not (tmp_path / "out" / "monitor_data.trend.db").exists()


@pytest.mark.parametrize(("colliding", "spilled"), [(False, True), (True, True), (False, False)])
def test_chunk_lookups_find_each_units_metas_in_file_name_order(tmp_path, monkeypatch, colliding, spilled):
    """An earlier parse's chunks are kept by their units' hashed shard names (trendconv.parsing.reuse.Chunks): a
    unit held by two chunks (a stale entry and a new one) gives both metas in file-name order, a unit held by none
    none, and names whose hashes collide (every name, here) still give only their own metas."""
    from trendconv.parsing import reuse

    if colliding:
        monkeypatch.setattr(reuse, "_key", lambda name: 7)
    fmt = FORMATS["monitor"]

    def meta(file: str, chunk: str) -> dict:
        return {"run_dir": RUN, "file": file, "chunk": chunk}

    chunks = reuse.Chunks(tmp_path if spilled else None, fmt)
    first = [meta(f"actv_{step}-{step}.csv", "a") for step in range(300)]
    second = [meta("actv_5-5.csv", "b"), meta("actv_grad_0-0.csv", "b")]
    chunks.add(tmp_path / "a.parquet", first)
    chunks.add(tmp_path / "b.parquet", second)
    chunks.close()
    assert chunks.paths == [tmp_path / "a.parquet", tmp_path / "b.parquet"]
    assert chunks.held(f"{RUN}/actv_5-5.csv.parquet") == [first[5], second[0]]
    assert chunks.held(f"{RUN}/actv_grad_0-0.csv.parquet") == [second[1]]
    assert chunks.held(f"{RUN}/actv_299-299.csv.parquet") == [first[299]]
    assert chunks.held(f"{RUN}/actv_300-300.csv.parquet") == []
    assert (chunks.metas(1), os.listdir(tmp_path)) == (second, [])  # the metas wait in a file without a name
    assert type(chunks._metas._blocks) is (SpilledBlocks if spilled else list)
