"""The public Python API (`import trendconv`): convert, parse, load, inspect, diff, their options and errors."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import A1_CONSTRUCT, A1_DATA, ACTV, GRAD, make_data, write_file_set, write_run

import trendconv
from trendconv.loading.outputs import writing

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sample_dump"


class Recorder(trendconv.Progress):
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def planned(self, format: str, units: int) -> None:
        self.calls.append(("planned", format, units))

    def parsed(self, format: str, *, reused: bool) -> None:
        self.calls.append(("parsed", format, reused))

    def loaded(self, format: str) -> None:
        self.calls.append(("loaded", format))


@pytest.fixture
def both(tmp_path: Path) -> Path:
    """Dump data of two file sets beside monitor data of two CSV files."""
    data = tmp_path / "data"
    write_file_set(data / "step0" / "rank0", A1_DATA, A1_CONSTRUCT)
    write_file_set(data / "step1" / "rank0", A1_DATA, A1_CONSTRUCT)
    write_run(data, {"actv_0-1.csv": ACTV, "grad_reduced_0-1.csv": GRAD})
    return data


def test_convert_takes_str_paths_and_returns_a_summary_per_format(both, tmp_path):
    progress = Recorder()
    summaries = trendconv.convert(str(both), str(tmp_path / "out"), workers=1, progress=progress)
    assert [(s.format, s.load.db, s.parse.files, s.work) for s in summaries] == [
        ("dump", tmp_path / "out" / "dump_data.trend.db", 2, tmp_path / "out" / ".trendconv"),
        ("monitor", tmp_path / "out" / "monitor_data.trend.db", 2, tmp_path / "out" / ".trendconv"),
    ]
    assert isinstance(summaries[0], trendconv.ConvertSummary)
    # dump streams: a step directory's shards are loaded once the next one's first shard is parsed (a split
    # decides by whole step directories); monitor loads once every file is parsed
    assert progress.calls == [
        ("planned", "dump", 2),
        ("parsed", "dump", False),
        ("parsed", "dump", False),
        ("loaded", "dump"),
        ("loaded", "dump"),
        ("planned", "monitor", 2),
        ("parsed", "monitor", False),
        ("parsed", "monitor", False),
        ("loaded", "monitor"),
        ("loaded", "monitor"),
    ]


def test_parse_then_load_is_convert(both, tmp_path):
    [converted] = trendconv.convert(both, tmp_path / "out", format="dump", micro_step=False, workers=1)
    progress = Recorder()
    parsed = trendconv.parse(both, tmp_path / "work", format="dump", micro_step=False, workers=1, progress=progress)
    assert [(s.format, s.parsed, s.reused, s.shard_dir) for s in parsed] == [
        ("dump", 2, 0, tmp_path / "work" / "dump" / "shards")
    ]
    loaded = trendconv.load(tmp_path / "work", tmp_path / "loaded", index=True, progress=progress)
    assert [(s.db.name, s.rows, s.shards) for s in loaded] == [("dump_data.trend.db", converted.load.rows, 2)]
    assert loaded[0].db.read_bytes() == converted.load.db.read_bytes()
    assert progress.calls == [
        ("planned", "dump", 2),
        ("parsed", "dump", False),
        ("parsed", "dump", False),
        ("planned", "dump", 2),
        ("loaded", "dump"),
        ("loaded", "dump"),
    ]


def test_a_mapping_is_a_dict_or_the_path_of_a_json_file(tmp_path):
    data = make_data(tmp_path, steps=1, ranks=1)
    (tmp_path / "mapping.json").write_text('{".net.": ".n."}')
    by_dict = trendconv.convert(data, tmp_path / "dict", mapping={".net.": ".n."}, workers=1)[0].load.db
    by_file = trendconv.convert(data, tmp_path / "file", mapping=str(tmp_path / "mapping.json"), workers=1)[0].load.db
    assert by_dict.read_bytes() == by_file.read_bytes()
    assert trendconv.diff(by_dict, tmp_path / "dict" / "dump_data.trend.db").equal is True
    plain = trendconv.convert(data, tmp_path / "plain", workers=1)[0].load.db
    found = trendconv.diff(plain, by_dict, limit=1)
    assert (found.equal, [table.table for table in found.tables]) == (
        False,
        ["monitoring_tags", "monitoring_targets", "tag_target_mapping", "trend_data"],
    )


def test_inspect_and_diff(tmp_path):
    shutil.copytree(EXAMPLE, tmp_path / "data")
    trendconv.convert(tmp_path / "data", tmp_path / "out", workers=1)
    document = trendconv.inspect(tmp_path / "out" / ".trendconv")
    assert (document["input_format"], document["complete"], document["totals"]["shards"]) == ("dump", True, 2)
    with pytest.raises(trendconv.DataError) as raised:
        trendconv.diff(tmp_path / "out" / "dump_data.trend.db", tmp_path / "missing.db")
    assert str(raised.value) == f"cannot open {tmp_path / 'missing.db'}: no such file"


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda data, out: trendconv.convert(data, out, workers=0),
            trendconv.UsageError,
            "workers must be an integer from 1 to 128, not 0",
        ),
        (
            lambda data, out: trendconv.convert(data, out, workers=2.0),
            trendconv.UsageError,
            "workers must be an integer from 1 to 128, not 2.0",
        ),
        (
            lambda data, out: trendconv.convert(data, out, format="csv"),
            trendconv.UsageError,
            "format 'csv': expected 'auto', 'dump' or 'monitor'",
        ),
        (
            lambda data, out: trendconv.parse(data, out, micro_step="yes"),
            trendconv.UsageError,
            "micro_step must be True or False, not 'yes'",
        ),
        (
            lambda data, out: trendconv.convert(data, out, mapping={"a": 1}),
            trendconv.UsageError,
            'mapping must map strings to strings, like {".TE": "."}, not {\'a\': 1}',
        ),
        (
            lambda data, out: trendconv.convert(data, out, mapping={"": "b"}),
            trendconv.UsageError,
            "mapping: a key must not be empty",
        ),
        (
            lambda data, out: trendconv.convert(data, out, executor="ray"),
            trendconv.UsageError,
            "executor 'ray': expected 'local', 'dask' or an Executor (trendconv.executors)",
        ),
        (
            lambda data, out: trendconv.inspect(out, format="csv"),
            trendconv.UsageError,
            "format 'csv': expected 'auto', 'dump' or 'monitor'",
        ),
    ],
)
def test_errors_name_the_parameters(tmp_path, call, error, message):
    with pytest.raises(error) as raised:
        call(make_data(tmp_path, steps=1, ranks=1), tmp_path / "out")
    assert str(raised.value) == message
    assert raised.value.exit_status == trendconv.ExitStatus.USAGE_ERROR


def test_a_path_that_is_not_utf8_is_a_usage_error(tmp_path):
    out = tmp_path / "ou\udcfft"  # byte 0xff in the name
    with pytest.raises(trendconv.UsageError) as raised:
        trendconv.convert(make_data(tmp_path), out)
    assert str(raised.value) == f"{out}: not a UTF-8 path (the bytes shown as \\udcXX); rename it"
    assert not out.exists()


def test_an_output_in_use_or_a_document_in_its_place_is_named_in_python_terms(tmp_path):
    """The command line says --db and --name instead (tests/test_follow.py, tests/test_hostile_inputs.py)."""
    data, out = make_data(tmp_path), tmp_path / "out"
    out.mkdir()
    with writing([out / "dump_data.trend.db"]), pytest.raises(trendconv.UsageError) as raised:
        trendconv.convert(data, out, workers=1)
    assert str(raised.value) == (
        f"{out / 'dump_data.trend.db'}: another trendconv process is writing this output (a follower, or a run with "
        "another WORK); wait until it stops, or choose another `out` or `name`"
    )
    document = out / "dump_data.trend.db"
    document.write_text("notes\n")
    with pytest.raises(trendconv.OutputError) as raised:
        trendconv.convert(data, out, workers=1)
    assert str(raised.value) == (
        f"{document}: cannot write the database: a file that is not a SQLite database has its name; move it away "
        f"(`mv '{document}' '{document}.bak'`) or choose another `out`"
    )
    assert document.read_text() == "notes\n"


def test_a_data_error_says_what_fixes_it_in_python_terms(tmp_path):
    data = tmp_path / "data"
    write_file_set(data / "step0" / "rank0", A1_DATA)  # no construct.json
    with pytest.raises(trendconv.DataError) as raised:
        trendconv.convert(data, tmp_path / "out", workers=1)
    assert str(raised.value) == (
        f"{data / 'step0' / 'rank0' / 'construct.json'}: construct.json not found (step 0, rank 0); micro-step mode "
        "needs it, use `micro_step=False` to convert without it"
    )
    assert [s.load.rows for s in trendconv.convert(data, tmp_path / "out", micro_step=False, workers=1)] == [13]


SCRIPT = """import trendconv

print("top-level code ran")
[summary] = trendconv.convert({data!r}, "out", workers=2)
print("rows", summary.load.rows)
"""


def test_a_script_without_a_main_guard_runs_with_several_workers(tmp_path):
    """Worker processes do not run the script again: without `if __name__ == "__main__":` it converts once."""
    data = make_data(tmp_path, steps=2, ranks=2)
    (tmp_path / "script.py").write_text(SCRIPT.format(data=str(data)))
    ran = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "top-level code ran\nrows 52\n", "")


def test_importing_trendconv_imports_none_of_the_library():
    code = (
        "import sys, trendconv; trendconv.convert, trendconv.DataError, trendconv.Progress; "
        "print(sorted(m for m in ('pyarrow', 'apsw', 'msgspec', 'typer', 'multiprocessing') if m in sys.modules))"
    )
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (ran.returncode, ran.stdout) == (0, "[]\n")
    assert sorted(trendconv.__all__) == sorted(
        ["__version__", "convert", "follow", "parse", "load", "inspect", "diff", "Progress", "ConvertSummary"]
        + ["ParseSummary", "LoadSummary", "DiffReport", "TrendconvError", "DataError", "UsageError", "OutputError"]
        + ["InternalError", "ExitStatus"]
    )


DOC = Path(__file__).resolve().parent.parent / "docs" / "python-api.md"


def doc_examples() -> list[tuple[str, str | None]]:
    """The ```python blocks of docs/python-api.md, each with the ```text block right after it (its output), if any."""
    blocks = re.findall(r"```(\w+)\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    return [
        (code, blocks[i + 1][1] if i + 1 < len(blocks) and blocks[i + 1][0] == "text" else None)
        for i, (kind, code) in enumerate(blocks)
        if kind == "python"
    ]


def test_the_examples_of_docs_python_api_md(tmp_path, monkeypatch, capsys):
    shutil.copytree(EXAMPLE, tmp_path / "examples" / "sample_dump")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    examples = doc_examples()
    assert len(examples) == 8
    for code, output in examples:
        exec(compile(code, str(DOC), "exec"), namespace)
        assert capsys.readouterr().out == (output or ""), code
