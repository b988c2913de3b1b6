"""The parse stage end to end: shards, their metadata, parallel determinism, resume, bad input."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
from collections.abc import Iterator
from pathlib import Path

import orjson
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from helpers import (
    A1_CONSTRUCT,
    A1_DATA,
    A2_CONSTRUCT,
    A2_DATA,
    ACTV,
    RUN,
    UNHASHABLE_DATA,
    T,
    V,
    invoke,
    write_file_set,
    write_json,
    write_run,
)

from trendconv import api, shards
from trendconv.errors import DataError
from trendconv.formats import FORMATS
from trendconv.formats.dump.parse import parse_file_set
from trendconv.formats.dump.shard import SCHEMA
from trendconv.parsing import ParseTask, plan


def shard_rows(path: Path) -> list[dict]:
    return pq.read_table(path).to_pylist()


def test_a2_shard_rows_micro_step(tmp_path):
    write_file_set(tmp_path / "data" / "step0" / "rank0", A2_DATA, A2_CONSTRUCT)
    api.parse(tmp_path / "data", tmp_path / "work", api.ParseOptions(), workers=1, input_format="dump")
    rows = shard_rows(tmp_path / "work" / "dump" / "shards" / "step0_rank0.parquet")
    got = [(r["local_micro_step"], r["metric"], r["target_name"], r["micro_step"], r["norm"], r["key"]) for r in rows]
    assert got == [
        (0, "forward", "Module.m.M.input.0", 0, 1.0, "Module.m.M.forward.0"),
        (0, "forward", "Module.m.M.parameters.w", 0, 2.0, "Module.m.M.forward.0"),
        (1, "forward", "Functional.relu.input.0", 0, 5.0, "Functional.relu.3.forward"),
        (1, "forward", "Module.m.M.input.0", 0, 3.0, "Module.m.M.forward.1"),
        (1, "forward", "Module.m.M.parameters.w", 0, 4.0, "Module.m.M.forward.1"),
        (0, "parameters_grad", "Module.m.M.w", 0, 0.1, "Module.m.M.parameters_grad.0"),
        (1, "parameters_grad", "Module.m.M.w", 1, 0.2, "Module.m.M.parameters_grad.1"),
        (0, "parameters_grad", "Module.m.M.w", 5, 0.5, "Module.m.M.parameters_grad.5"),
        (0, "parameters_grad", "Module.m.M.w", 0, 0.7, "Module.m.M.parameters_grad"),
    ]
    assert {(r["step"], r["rank"], r["vpp_stage"]) for r in rows} == {(0, 0, 0)}


def test_a2_shard_rows_step_mode(tmp_path):
    write_file_set(tmp_path / "data" / "step0" / "rank0", A2_DATA)
    api.parse(tmp_path / "data", tmp_path / "work", api.ParseOptions(micro_step=False), workers=1, input_format="dump")
    rows = shard_rows(tmp_path / "work" / "dump" / "shards" / "step0_rank0.parquet")
    got = [(r["local_micro_step"], r["target_name"], r["micro_step"]) for r in rows]
    assert got == [
        (0, "Module.m.M.input.0", 0),
        (0, "Module.m.M.parameters.w", 0),
        (0, "Functional.relu.input.0", 3),
        (0, "Module.m.M.input.0", 1),
        (0, "Module.m.M.parameters.w", 1),
        (0, "Module.m.M.w", 0),
        (0, "Module.m.M.w", 1),
        (0, "Module.m.M.w", 5),
        (0, "Module.m.M.w", 0),
    ]


def test_shard_keeps_raw_values_and_metadata(a1_data, tmp_path):
    work = tmp_path / "work"
    api.parse(a1_data, work, api.ParseOptions(mapping=((".net.", ".n."),)), workers=1, input_format="dump")
    path = work / "dump" / "shards" / "step1_rank0.parquet"
    rows = shard_rows(path)
    assert [r["target_name"] for r in rows[:3]] == [
        "Module.n.Net.input.0",
        "Module.n.Net.output.0",
        "Module.n.Net.parameters.weight",
    ]
    assert (rows[6]["target_name"], str(rows[6]["mean"])) == ("Module.n.Net.output.0", "inf")  # raw, unclipped
    assert (rows[8]["metric"], str(rows[8]["mean"])) == ("recompute", "nan")  # the bare NaN token
    meta = shards.read_meta(path, FORMATS["dump"])
    dump = a1_data / "step1" / "proc4242" / "dump.json"
    construct = a1_data / "step1" / "proc4242" / "construct.json"
    assert meta == {
        "shard_format": 2,
        "trendconv_version": "0.1.0",
        "input_format": "dump",
        "options": {"micro_step": True, "mapping_sha256": api.ParseOptions(mapping=((".net.", ".n."),)).mapping_sha256},
        "step": 1,
        "rank": 0,
        "item": "proc4242",
        "sources": [
            {"path": "step1/proc4242/dump.json", "size": dump.stat().st_size, "mtime_ns": dump.stat().st_mtime_ns},
            {
                "path": "step1/proc4242/construct.json",
                "size": construct.stat().st_size,
                "mtime_ns": construct.stat().st_mtime_ns,
            },
        ],
        "micro_steps": 2,
        "rows": 13,
        "rows_per_metric": {"backward": 3, "forward": 7, "parameters_grad": 1, "recompute": 2},
        "skipped": {"null": 1, "unsupported dtype": 1},
    }


def test_list_or_object_type_and_dtype_are_skipped(tmp_path):
    write_file_set(tmp_path / "data" / "step0" / "rank0", UNHASHABLE_DATA)
    api.parse(tmp_path / "data", tmp_path / "work", api.ParseOptions(micro_step=False), workers=1, input_format="dump")
    path = tmp_path / "work" / "dump" / "shards" / "step0_rank0.parquet"
    assert [(r["target_name"], r["norm"]) for r in shard_rows(path)] == [
        ("Module.m.M.input.2", 3.0),
        ("Module.m.M.b", 7.0),
    ]
    assert shards.read_meta(path, FORMATS["dump"])["skipped"] == {"non-tensor": 2, "unsupported dtype": 3}


def test_shards_read_as_one_dataset_with_dictionary_strings(a1_data, tmp_path):
    api.parse(a1_data, tmp_path / "work", api.ParseOptions(), workers=1, input_format="dump")
    table = ds.dataset(tmp_path / "work" / "dump" / "shards", format="parquet").to_table()
    assert table.num_rows == 26
    assert str(table.schema.field("target_name").type) == "dictionary<values=string, indices=int32, ordered=0>"
    assert sorted(set(zip(table["step"].to_pylist(), table["rank"].to_pylist()))) == [(0, 0), (1, 0)]


def test_a_shards_meta_is_in_its_footer_once(a1_data, tmp_path):
    """The meta is the file's key-value metadata under `trendconv`, not also inside the serialized Arrow schema
    (a chunk's footer held every unit's meta twice); reading the file gives it as the schema's metadata."""
    api.parse(a1_data, tmp_path / "work", api.ParseOptions(), workers=1, input_format="dump")
    path = tmp_path / "work" / "dump" / "shards" / "step0_rank0.parquet"
    parquet = pq.ParquetFile(path)
    raw = parquet.metadata.metadata[b"trendconv"]
    assert orjson.loads(raw) == shards.read_meta(path, FORMATS["dump"])
    assert parquet.schema_arrow.metadata is None
    assert raw not in base64.b64decode(parquet.metadata.metadata[b"ARROW:schema"])  # where the second copy was
    assert parquet.read().schema.metadata == {b"trendconv": raw}


def test_shard_columns_have_no_statistics_and_dictionaries_only_for_strings(a1_data, tmp_path):
    api.parse(a1_data, tmp_path / "work", api.ParseOptions(), workers=1, input_format="dump")
    metadata = pq.ParquetFile(tmp_path / "work" / "dump" / "shards" / "step0_rank0.parquet").metadata
    columns = [metadata.row_group(0).column(index) for index in range(metadata.num_columns)]
    assert [column.statistics for column in columns] == [None] * len(SCHEMA)
    dictionary_encoded = [column.path_in_schema for column in columns if "RLE_DICTIONARY" in column.encodings]
    assert dictionary_encoded == ["metric", "target_name", "key"]


def many_file_sets(data: Path, steps: int = 3, ranks: int = 3) -> None:
    for step in range(steps):
        for rank in range(ranks):
            write_file_set(data / f"step{step}" / f"rank{rank}", A1_DATA, A1_CONSTRUCT)


@pytest.mark.parametrize("workers", [2, 4])
def test_shards_identical_whatever_the_worker_count(tmp_path, workers):
    many_file_sets(tmp_path / "data")
    api.parse(tmp_path / "data", tmp_path / "one", api.ParseOptions(), workers=1, input_format="dump")
    api.parse(tmp_path / "data", tmp_path / "many", api.ParseOptions(), workers=workers, input_format="dump")
    one, many = tmp_path / "one" / "dump" / "shards", tmp_path / "many" / "dump" / "shards"
    names = sorted(p.name for p in one.iterdir())
    assert names == sorted(p.name for p in many.iterdir())
    assert len(names) == 9
    for name in names:
        assert (one / name).read_bytes() == (many / name).read_bytes()


def test_resume_reuses_unchanged_shards_and_reparses_changed_ones(tmp_path):
    many_file_sets(tmp_path / "data", steps=2, ranks=2)
    work = tmp_path / "work"
    first = api.parse(tmp_path / "data", work, api.ParseOptions(), workers=1, input_format="dump")
    assert (first.parsed, first.reused) == (4, 0)
    changed = tmp_path / "data" / "step1" / "rank0" / "dump.json"
    changed.write_text(changed.read_text() + "\n")
    (work / "dump" / "shards" / "step0_rank1.parquet").write_bytes(b"PAR1 truncated")
    second = api.parse(tmp_path / "data", work, api.ParseOptions(), workers=1, input_format="dump")
    assert (second.parsed, second.reused) == (2, 2)
    third = api.parse(tmp_path / "data", work, api.ParseOptions(micro_step=False), workers=1, input_format="dump")
    assert (third.parsed, third.reused) == (4, 0)


def test_orphan_shards_are_removed(tmp_path):
    many_file_sets(tmp_path / "data", steps=1, ranks=2)
    work = tmp_path / "work"
    api.parse(tmp_path / "data", work, api.ParseOptions(), workers=1, input_format="dump")
    for path in (tmp_path / "data" / "step0" / "rank1").iterdir():
        path.unlink()
    summary = api.parse(tmp_path / "data", work, api.ParseOptions(), workers=1, input_format="dump")
    assert summary.removed_orphans == 1
    assert [p.name for p in (work / "dump" / "shards").iterdir()] == ["step0_rank0.parquet"]
    assert json.loads((work / "dump" / "manifest.json").read_text())["shards"] == ["step0_rank0.parquet"]


def test_parse_cli_summary(a1_data, tmp_path):
    result = invoke("parse", a1_data, "--work", tmp_path / "work")
    assert result.exit_code == 0
    assert result.stdout == (
        f"parsed 2 file sets into {tmp_path / 'work'}/dump/shards: 2 parsed, 0 reused\n"
        "  rows 26\n  skipped 2 × null\n  skipped 2 × unsupported dtype\n"
    )


def test_missing_dump_json_is_warned_and_skipped(a1_data, tmp_path):
    (a1_data / "step1" / "rank7").mkdir()
    result = invoke("parse", a1_data, "--work", tmp_path / "work", "--quiet")
    assert result.exit_code == 0
    assert result.stderr == f"warning: No 'dump.json' file found in: {a1_data / 'step1' / 'rank7'}\n"


def full_disk_at(path: Path) -> Path:
    """Make writing PATH's temporary file (`.<name>.<pid>.tmp`) fail as a full disk does: it points to /dev/full."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.symlink_to("/dev/full")
    return tmp


def test_full_disk_on_work_json_or_manifest_is_a_clear_error(a1_data, tmp_path):
    work = tmp_path / "work"
    part = work / "dump"
    part.mkdir(parents=True)
    tmp = full_disk_at(part / "work.json")
    result = invoke("parse", a1_data, "--work", work, "--workers", "1")
    assert (result.exit_code, result.stderr) == (
        1,
        f"error: {part / 'work.json'}: cannot write: No space left on device\n",
    )
    assert (sorted(path.name for path in work.iterdir()), list(part.iterdir())) == (["dump", "lock"], [])
    full_disk_at(part / "manifest.json")
    result = invoke("parse", a1_data, "--work", work, "--workers", "1")
    assert (result.exit_code, result.stderr) == (
        1,
        f"error: {part / 'manifest.json'}: cannot write: No space left on device\n",
    )
    assert sorted(path.name for path in part.iterdir()) == ["shards", "work.json"]
    assert not tmp.is_symlink()
    resumed = api.parse(a1_data, work, api.ParseOptions(), workers=1, input_format="dump")
    assert (resumed.parsed, resumed.reused, (part / "manifest.json").is_file()) == (0, 2, True)


def test_a_failed_worker_names_the_file_and_keeps_finished_shards(tmp_path):
    many_file_sets(tmp_path / "data", steps=2, ranks=2)
    bad = tmp_path / "data" / "step1" / "rank1" / "dump.json"
    bad.write_text('{"data": {"Module.net.Net.forward.0": {"input_args": null}}}')
    result = invoke("parse", tmp_path / "data", "--work", tmp_path / "work", "--workers", "2")
    assert result.exit_code == 1
    assert result.stderr == (
        f"error: {bad}, step 1, rank 1, key 'Module.net.Net.forward.0': 'input_args' is null, expected a list\n"
    )
    assert not (tmp_path / "work" / "dump" / "manifest.json").exists()
    finished = sorted(p.name for p in (tmp_path / "work" / "dump" / "shards").iterdir())
    assert finished == ["step0_rank0.parquet", "step0_rank1.parquet", "step1_rank0.parquet"]


def bad_input_cases(root: Path) -> list[tuple[list, str]]:
    """(arguments, exact stderr) for each kind of bad input of issue 2."""
    data = root / "data"
    item = data / "step0" / "rank0"
    dump, construct = item / "dump.json", item / "construct.json"
    return [
        (
            "truncated dump",
            '{"data": {"a": ',
            None,
            f"error: {dump}: invalid JSON: Expecting value at line 1 column 16\n",
        ),
        ("top not object", "[1, 2]", None, f"error: {dump}, step 0, rank 0: top level is a list, expected an object\n"),
        (
            "no data",
            '{"task": "statistics"}',
            None,
            f"error: {dump}, step 0, rank 0: no 'data' object at the top level\n",
        ),
        (
            "data not object",
            '{"data": [1]}',
            None,
            f"error: {dump}, step 0, rank 0: 'data' is a list, expected an object\n",
        ),
        (
            "output not list",
            '{"data": {"Module.a.A.forward.0": {"output": {"x": 1}}}}',
            None,
            f"error: {dump}, step 0, rank 0, key 'Module.a.A.forward.0': 'output' is an object, expected a list\n",
        ),
        (
            "backward input null",
            '{"data": {"Module.a.A.backward.0": {"input": null}}}',
            None,
            f"error: {dump}, step 0, rank 0, key 'Module.a.A.backward.0': 'input' is null, expected a list\n",
        ),
        (
            "truncated construct",
            '{"data": {}}',
            '{"Module.a.A.forward.0": nul',
            f"error: {construct}: invalid JSON: Expecting value at line 1 column 26\n",
        ),
        (
            "construct cycle",
            '{"data": {}}',
            '{"Module.a.forward.0": "Module.b.forward.0", "Module.b.forward.0": "Module.a.forward.0"}',
            f"error: {construct}: cycle in the parent chain at key 'Module.a.forward.0'\n",
        ),
        (
            "missing construct",
            '{"data": {}}',
            "",
            f"error: {construct}: construct.json not found (step 0, rank 0); micro-step mode needs it, "
            "use --no-micro-step to convert without it\n",
        ),
    ]


@pytest.mark.parametrize("case", range(9))
def test_bad_input_gives_one_line_error_and_exit_1(tmp_path, case):
    name, dump_text, construct_text, expected = bad_input_cases(tmp_path)[case]
    item = tmp_path / "data" / "step0" / "rank0"
    item.mkdir(parents=True)
    (item / "dump.json").write_text(dump_text)
    if construct_text is None:
        write_json(item / "construct.json", {})
    elif construct_text:
        (item / "construct.json").write_text(construct_text)
    result = invoke("parse", tmp_path / "data", "--work", tmp_path / "work")
    assert (name, result.exit_code, result.stderr) == (name, 1, expected)
    assert not (tmp_path / "work" / "dump" / "manifest.json").exists()


def test_unreadable_dump_json(tmp_path):
    item = tmp_path / "data" / "step0" / "rank0"
    (item / "dump.json").mkdir(parents=True)  # a directory is not a regular file: warned, skipped
    result = invoke("parse", tmp_path / "data", "--work", tmp_path / "work")
    assert result.exit_code == 1
    assert result.stderr == (
        f"warning: No 'dump.json' file found in: {item}\n"
        f"error: {tmp_path / 'data'}: no dump data: no step directory holds a rank*/proc* directory with a dump.json\n"
    )


@pytest.mark.parametrize(
    ("mapping_text", "message"),
    [
        ('["a", "b"]', 'a mapping must be a JSON object of strings, like {".TE": "."}'),
        ('{"a": 1}', 'a mapping must be a JSON object of strings, like {".TE": "."}'),
        ('{"a": ', "invalid JSON: Expecting value at line 1 column 7"),
        ('{"": "x"}', "a mapping key must not be empty"),
    ],
)
def test_bad_mapping_is_a_usage_error(a1_data, tmp_path, mapping_text, message):
    mapping = tmp_path / "mapping.json"
    mapping.write_text(mapping_text)
    result = invoke("parse", a1_data, "--work", tmp_path / "work", "--mapping", mapping)
    assert (result.exit_code, result.stderr) == (2, f"error: {mapping}: {message}\n")


def test_empty_and_missing_data(tmp_path):
    (tmp_path / "empty").mkdir()
    empty = invoke("parse", tmp_path / "empty", "--work", tmp_path / "work")
    assert (empty.exit_code, empty.stderr) == (
        1,
        f"error: {tmp_path / 'empty'}: neither dump data (step*/rank*/dump.json) nor monitor data (run directories "
        "like 'Feb20_16-27-56-rank0-1a2b3c4d' holding <metric>_<a>-<b>.csv files)\n",
    )
    dump = invoke("parse", tmp_path / "empty", "--work", tmp_path / "work", "--format", "dump")
    assert (dump.exit_code, dump.stderr) == (
        1,
        f"error: {tmp_path / 'empty'}: no dump data: no 'step*' directories (expected names like 'step0')\n",
    )
    missing = invoke("parse", tmp_path / "nope", "--work", tmp_path / "work")
    assert (missing.exit_code, missing.stderr) == (2, f"error: {tmp_path / 'nope'}: DATA does not exist\n")


def test_statistics_of_every_json_kind(tmp_path):
    stats = {"Norm": "  2.5 ", "Max": True, "Min": [1, 2], "type": "torch.Tensor", "dtype": "torch.bfloat16"}
    data = {"Functional.f.0.forward": {"input_args": [stats, {"type": "torch.Tensor", "dtype": "torch.float16"}]}}
    write_file_set(tmp_path / "data" / "step0" / "rank0", data)
    api.parse(tmp_path / "data", tmp_path / "work", api.ParseOptions(micro_step=False), workers=1, input_format="dump")
    rows = shard_rows(tmp_path / "work" / "dump" / "shards" / "step0_rank0.parquet")
    assert [(r["norm"], r["max"], r["min"], r["mean"]) for r in rows] == [(2.5, 1.0, None, None), (None,) * 4]


def test_parse_cli_rejects_worker_counts_out_of_range(a1_data, tmp_path):
    for count in ("0", "129"):
        result = invoke("parse", a1_data, "--work", tmp_path / "work", "--workers", count)
        assert result.exit_code == 2
        assert "Invalid value for '--workers' / '-j'" in result.stderr


def test_t_helper_matches_spec_shape():
    assert T(1, 2, 3, 4) == {
        "type": "torch.Tensor",
        "dtype": "torch.float32",
        "shape": [2],
        "Max": 2,
        "Min": 3,
        "Mean": 4,
        "Norm": 1,
    }


def test_shared_construct_json_gives_each_file_set_its_own_rows(tmp_path):
    """Namings are remembered per construct.json content; what depends on the entry is still read per entry."""
    construct = {"Module.m.M.forward.0": None, "Functional.relu.0.forward": "Module.m.M.forward.0"}
    first = {"Functional.relu.0.forward": {"input_args": [V(1)], "output": [], "is_recompute": False}}
    second = {"Functional.relu.0.forward": {"input_args": [V(2)], "output": [V(3)], "is_recompute": True}}
    write_file_set(tmp_path / "data" / "step0" / "rank0", first, construct)
    write_file_set(tmp_path / "data" / "step1" / "rank0", second, construct)
    write_file_set(tmp_path / "data" / "step2" / "rank0", first, {"Functional.relu.0.forward": None})
    api.parse(tmp_path / "data", tmp_path / "work", api.ParseOptions(), workers=1, input_format="dump")
    got = [
        [(r["metric"], r["target_name"], r["norm"]) for r in shard_rows(tmp_path / "work" / "dump" / "shards" / name)]
        for name in ("step0_rank0.parquet", "step1_rank0.parquet", "step2_rank0.parquet")
    ]
    assert got == [
        [("forward", "Functional.relu.input.0", 1.0)],
        [("recompute", "Functional.relu.input.0", 2.0), ("recompute", "Functional.relu.output.0", 3.0)],
        [("forward", "Functional.relu.input.0", 1.0)],
    ]


def test_a_bad_construct_json_is_reported_for_each_file_set(tmp_path):
    for step in (0, 1):
        write_file_set(tmp_path / "data" / f"step{step}" / "rank0", A2_DATA, ["not", "an", "object"])
    _, tasks = plan(tmp_path / "data", tmp_path / "work", api.ParseOptions(), FORMATS["dump"])
    for step, task in enumerate(tasks):
        with pytest.raises(DataError, match=f"step{step}/rank0/construct.json: top level is"):
            parse_file_set(task.unit, task.options)


def test_a_task_travels_to_a_worker_as_its_fields_alone(tmp_path):
    """Tasks and monitor units are slotted, their paths made when asked for (the main process holds one of each
    for every file): a pickled task is its fields, and the worker's task makes the same paths and order."""
    import pickle

    from trendconv.formats import FORMATS
    from trendconv.formats.monitor.scan import CsvFile
    from trendconv.options import ParseOptions
    from trendconv.parsing import ParseTask

    run = "Feb20_16-27-56-rank3-1a2b3c4d"
    unit = CsvFile(3, run, "actv_0-9.csv", "actv", tmp_path / "data", 120, 0, 9)
    task = ParseTask(unit, ParseOptions(), tmp_path / "work" / "monitor", FORMATS["monitor"], 7)
    back = pickle.loads(pickle.dumps(task))
    assert (hasattr(task, "__dict__"), hasattr(unit, "__dict__")) == (False, False)
    assert (back.unit, back.options, back.part, back.format.name, back.position) == (
        unit,
        task.options,
        task.part,
        "monitor",
        7,
    )
    assert (back.unit.size, back.unit.first, back.unit.last) == (120, 0, 9)
    assert (back.shard_path, back.shard_file, back.unit.path, back.unit.order) == (
        tmp_path / f"work/monitor/shards/{run}/actv_0-9.csv.parquet",
        f"{tmp_path}/work/monitor/shards/{run}/actv_0-9.csv.parquet",
        tmp_path / f"data/{run}/actv_0-9.csv",
        (3, run, "actv", 0, 9, "actv_0-9.csv"),
    )
    # a unit made without the scan's steps reads them from its name
    assert CsvFile(3, run, "actv_0-9.csv", "actv", tmp_path / "data").order == unit.order


def test_the_garbage_collector_is_paused_while_the_stages_run_and_back_after(tmp_path):
    """trendconv.collector: off while the parse and the load run in this process (seen from their callbacks),
    on again after; a caller that had it off keeps it off."""
    import gc

    import trendconv
    from trendconv.progress import Progress

    seen = []

    class Seen(Progress):
        def parsed(self, format, *, reused):
            seen.append(("parsed", gc.isenabled()))

        def loaded(self, format):
            seen.append(("loaded", gc.isenabled()))

    write_run(
        tmp_path / "data", {f"actv_{step}-{step}.csv": f"vpp_stage,name,step,norm\n0,w,{step},1.5\n" for step in (0, 1)}
    )
    assert gc.isenabled()
    trendconv.convert(tmp_path / "data", tmp_path / "out", work=tmp_path / "work", workers=1, progress=Seen())
    assert gc.isenabled()
    assert sorted(set(seen)) == [("loaded", False), ("parsed", False)]
    gc.disable()
    try:
        trendconv.convert(tmp_path / "data", tmp_path / "again", work=tmp_path / "work2", workers=1)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_tasks_shard_file_is_its_shard_path_as_text(tmp_path):
    """The main process keys and compares tasks by `shard_file`, made without a Path; the manifest names each
    unit's shard by `Format.shard_name`, which is that path under the shard directory."""
    data = tmp_path / "data"
    write_run(data, {"actv_0-1.csv": ACTV})
    for step in range(2):
        write_file_set(data / f"step{step}" / "rank0", A1_DATA, A1_CONSTRUCT)
    tasks = [task for fmt in FORMATS.values() for task in plan(data, tmp_path / "work", api.ParseOptions(), fmt)[1]]
    names = ["step0_rank0.parquet", "step1_rank0.parquet", f"{RUN}/actv_0-1.csv.parquet"]
    assert [task.shard_file for task in tasks] == [str(task.shard_path) for task in tasks]
    assert [task.shard_path.relative_to(shards.shard_dir(task.part)).as_posix() for task in tasks] == names
    assert [task.format.shard_name(task.unit) for task in tasks] == names


def test_the_heap_is_trimmed_once_per_batch_of_rows_given_to_the_writer_and_before_the_indexes(tmp_path, monkeypatch):
    """trendconv.heap: the load gives freed memory back each ROWS rows it hands its writer, and once its rows are
    in (before the index sorts); a Trimmer counts rows across batches."""
    import trendconv
    from trendconv import heap
    from trendconv.loading import build

    calls = []
    monkeypatch.setattr(heap, "trim", lambda: calls.append("trim"))
    trimmer = heap.Trimmer(10)
    for rows in (4, 5, 1, 25, 9):
        trimmer.add(rows)
        calls.append(rows)
    assert calls == [4, 5, "trim", 1, "trim", 25, 9]

    calls.clear()
    monkeypatch.setattr(heap, "ROWS", 3)
    monkeypatch.setattr(build, "trim", lambda: calls.append("before the indexes"))
    rows = "".join(f"0,w{index},{step},1.5\n" for index in range(2) for step in (0, 1))
    write_run(tmp_path / "data", {f"actv_{step}-{step}.csv": f"vpp_stage,name,step,norm\n{rows}" for step in (0, 1)})
    trendconv.convert(tmp_path / "data", tmp_path / "out", work=tmp_path / "work", workers=1)
    assert calls == ["trim", "before the indexes"]  # 8 rows in one batch: one trim, as 3 rows went by
    heap.trim()  # the real one: glibc's malloc_trim here (Linux), nothing where there is none


def test_the_plans_tasks_are_made_when_asked_for_in_processing_order(tmp_path, monkeypatch):
    """trendconv.parsing.Tasks: a task per unit, its position its index, made on each use; a scan that gives its
    units out of processing order has them sorted (stably) by the plan."""
    data = tmp_path / "data"
    for step in (0, 1, 2):
        write_file_set(data / f"step{step}" / "rank0", A1_DATA, A1_CONSTRUCT)
    fmt = FORMATS["dump"]
    scan = fmt.scan
    monkeypatch.setattr(fmt, "scan", lambda data: dataclasses.replace(scan(data), units=scan(data).units[::-1]))
    _, tasks = plan(data, tmp_path / "work", api.ParseOptions(), fmt)
    got = [(task.unit.step, task.position) for task in tasks]
    assert (len(tasks), got) == (3, [(0, 0), (1, 1), (2, 2)])
    assert (tasks[-1].unit.step, tasks[-1].position, [task.position for task in tasks[1:]]) == (2, 2, [1, 2])
    assert tasks[1] == tasks[1] and tasks[1] is not tasks[1]
    assert tasks[1] == ParseTask(tasks.units[1], tasks.options, tasks.part, fmt, 1)


def test_chunk_jobs_are_made_as_the_executor_takes_them(tmp_path):
    """A chunked parse hands its executor a generator: a job's tasks exist while it is in flight, not the whole
    run's at once."""
    from trendconv.parsing import runner

    data = tmp_path / "data"
    write_run(data, {f"actv_{step}-{step}.csv": f"vpp_stage,name,step,norm\n0,w,{step},1.5\n" for step in range(3)})
    _, tasks = plan(data, tmp_path / "work", api.ParseOptions(), FORMATS["monitor"])
    jobs = runner.chunk_jobs(tasks, set())
    assert isinstance(jobs, Iterator)
    assert [[task.unit.name for task in job.tasks] for job in jobs] == [
        ["actv_0-0.csv", "actv_1-1.csv", "actv_2-2.csv"]
    ]


def test_a_manifest_out_of_processing_order_loads_as_one_in_order(tmp_path):
    """`load` keeps a manifest's shards as they come while they are in processing order (records.in_order); one
    that lists them otherwise (edited by hand, or written by another tool) is sorted first: the same database."""
    import trendconv

    many_file_sets(tmp_path / "data", steps=2, ranks=2)
    work = tmp_path / "work"
    trendconv.parse(tmp_path / "data", work, workers=1)
    trendconv.load(work, tmp_path / "in_order")
    manifest = work / "dump" / "manifest.json"
    document = json.loads(manifest.read_text())
    assert document["shards"] == [
        "step0_rank0.parquet",
        "step0_rank1.parquet",
        "step1_rank0.parquet",
        "step1_rank1.parquet",
    ]
    document["shards"].reverse()
    manifest.write_text(json.dumps(document))
    trendconv.load(work, tmp_path / "reversed")
    name = FORMATS["dump"].db_name
    assert (tmp_path / "reversed" / name).read_bytes() == (tmp_path / "in_order" / name).read_bytes()


def test_shard_files_are_listed_one_at_a_time_in_the_order_of_their_sorted_paths(tmp_path):
    """shards.list_shards walks the shard directory lazily (a re-run of 100,000 units held a list of their Paths)
    in the order `sorted` gives their Paths: a directory's entries right after it; links to directories not
    followed; entries named otherwise left out."""
    from trendconv.shards import list_shards

    directory = shards.shard_dir(tmp_path / "part")
    for name in ("a/x.parquet", "a-b.parquet", "b.parquet", "b/y.parquet", "z.parquet/q.parquet", "c.txt", "A.parquet"):
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text("x")
    os.symlink(directory / "a", directory / "link.parquet")
    found = list_shards(tmp_path / "part")
    assert isinstance(found, Iterator)
    names = ["A.parquet", "a/x.parquet", "a-b.parquet", "b/y.parquet", "b.parquet", "link.parquet", "z.parquet"]
    assert [path.relative_to(directory).as_posix() for path in found] == [*names, "z.parquet/q.parquet"]
    assert list(list_shards(tmp_path / "nothing")) == []


def test_the_orphan_check_names_the_units_only_when_a_shard_file_is_there(tmp_path):
    """A first parse (no shard files) makes no unit's shard name; with one file there, each unit is named once."""
    from trendconv.formats.dump.scan import scan
    from trendconv.parsing.reuse import remove_orphans

    many_file_sets(tmp_path / "data", steps=2, ranks=2)
    units = scan(tmp_path / "data").file_sets
    fmt = FORMATS["dump"]
    named = []

    class Counting:
        def __getattr__(self, name):
            return getattr(fmt, name)

        def shard_name(self, unit):
            named.append(unit)
            return fmt.shard_name(unit)

    part = tmp_path / "work" / "dump"
    assert remove_orphans(part, units, Counting()) == (0, [])
    assert named == []
    stray = shards.shard_dir(part) / "stray.parquet"
    stray.parent.mkdir(parents=True)
    stray.write_text("not a shard")
    assert remove_orphans(part, units, Counting()) == (0, [stray])
    assert named == units
