"""Subsets: --steps/--ranks SPEC on parse, run and data2db (and steps=/ranks= in the Python API).

A subset's database equals the conversion of a DATA holding only the selected directories (monitor: files), and
nothing outside the selection is listed, looked at or opened. tests/test_reference.py compares subsets with msprobe.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest
from helpers import (
    A1_CONSTRUCT,
    A1_DATA,
    A2_CONSTRUCT,
    A2_DATA,
    ACTV,
    GRAD,
    RUN,
    invoke,
    query,
    write_file_set,
    write_run,
)

import trendconv
from trendconv.errors import DataError, UsageError
from trendconv.formats.dump import scan as dump_scan
from trendconv.formats.monitor import scan as monitor_scan
from trendconv.selection import Numbers, Selection, SpecError, from_record, parse_spec

RUN1 = "Feb20_16-27-57-rank1-c3d4e5f6"


# ---- SPEC


@pytest.mark.parametrize(
    ("spec", "text", "spans"),
    [
        ("0-9,12", "0-9,12", ((0, 9), (12, 12))),
        ("5,0-1,2-3", "0-3,5", ((0, 3), (5, 5))),  # sorted; adjacent ranges are one
        (" 3 , 1-2", "1-3", ((1, 3),)),  # blanks around a part are fine
        ("4,4,2-6", "2-6", ((2, 6),)),
        ("007", "7", ((7, 7),)),
        ("9223372036854775807", "9223372036854775807", ((2**63 - 1, 2**63 - 1),)),
    ],
)
def test_a_spec_is_numbers_and_inclusive_ranges(spec, text, spans):
    numbers = parse_spec(spec)
    assert numbers == Numbers(spans)
    assert numbers.text == text


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "empty: give numbers and inclusive ranges, like 0-9,12"),
        (" ", "empty: give numbers and inclusive ranges, like 0-9,12"),
        ("1,,3", "'1,,3' has an empty part: give numbers and ranges between commas, like 0-9,12"),
        ("1,", "'1,' has an empty part: give numbers and ranges between commas, like 0-9,12"),
        ("-1", "'-1' is negative: only steps and ranks from 0 up can be selected"),
        ("-3-5", "'-3-5' is negative: only steps and ranks from 0 up can be selected"),
        ("2--1", "'2--1' is negative: only steps and ranks from 0 up can be selected"),
        ("5-2", "'5-2' is a reversed range: write 2-5"),
        ("1-2-3", "'1-2-3' is not a number or a range A-B, like 0-9,12"),
        ("a", "'a' is not a number or a range A-B, like 0-9,12"),
        ("1-", "'1-' is not a number or a range A-B, like 0-9,12"),
        ("\u0661", "'\u0661' is not a number or a range A-B, like 0-9,12"),  # an Arabic-Indic digit
        ("9223372036854775808", "9223372036854775808 does not fit a 64-bit integer"),
    ],
)
def test_a_malformed_spec_says_which_part_and_why(spec, message):
    with pytest.raises(SpecError) as caught:
        parse_spec(spec)
    assert str(caught.value) == message


def test_contains_covers_and_meets():
    numbers = parse_spec("2-4,8")
    assert [n for n in range(10) if numbers.contains(n)] == [2, 3, 4, 8]
    assert [numbers.covers(*span) for span in ((2, 4), (3, 3), (4, 5), (8, 8), (0, 1), (2, 8))] == [
        True, True, False, True, False, False
    ]  # fmt: skip
    assert [numbers.meets(*span) for span in ((0, 1), (0, 2), (5, 7), (5, 8), (4, 9), (9, 99))] == [
        False, True, False, True, True, False
    ]  # fmt: skip


def test_a_selection_in_words_and_as_recorded():
    selection = Selection(parse_spec("3,0-1"), parse_spec("4"))
    assert str(selection) == "steps 0-1,3, ranks 4"
    assert selection.record() == {"steps": "0-1,3", "ranks": "4"}
    assert from_record(selection.record()) == selection
    assert str(Selection(ranks=parse_spec("2"))) == "ranks 2"
    assert not Selection() and from_record(None) == Selection()


# ---- usage errors, exit 2


@pytest.mark.parametrize("command", ["parse", "run", "data2db"])
@pytest.mark.parametrize(
    ("flag", "spec", "message"),
    [
        ("--steps", "5-2", "Invalid value for '--steps': '5-2' is a reversed range: write 2-5"),
        ("--ranks", "0,,1", "Invalid value for '--ranks': '0,,1' has an empty part: give numbers and ranges"),
        ("--ranks", "-1", "Invalid value for '--ranks': '-1' is negative: only steps and ranks from 0 up"),
        ("--steps", "x", "Invalid value for '--steps': 'x' is not a number or a range A-B, like 0-9,12"),
        ("--steps", "", "Invalid value for '--steps': empty: give numbers and inclusive ranges, like 0-9,12"),
    ],
)
def test_a_bad_spec_is_a_usage_error_on_every_command(tmp_path, command, flag, spec, message):
    data = _dump(tmp_path)
    where = {"parse": [data, "--work", tmp_path / "w"], "run": [data, "--db", tmp_path / "o"]}
    args = where.get(command, ["--data", data, "--db", tmp_path / "o"])
    result = invoke(command, *args, flag, spec)
    assert result.exit_code == 2
    assert message in " ".join(result.stderr.split())
    assert not (tmp_path / "w").exists() and not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"steps": "5-2"}, "steps='5-2': '5-2' is a reversed range: write 2-5"),
        (
            {"ranks": "1,,2"},
            "ranks='1,,2': '1,,2' has an empty part: give numbers and ranges between commas, like 0-9,12",
        ),
        ({"steps": 3}, "steps must be a string like '0-9,12', not 3"),
        ({"ranks": [0, 1]}, "ranks must be a string like '0-9,12', not [0, 1]"),
    ],
)
def test_the_python_api_names_its_parameters(tmp_path, kwargs, message):
    data = _dump(tmp_path)
    for call in (
        lambda: trendconv.convert(data, tmp_path / "o", **kwargs),
        lambda: trendconv.parse(data, tmp_path / "w", **kwargs),
    ):
        with pytest.raises(UsageError) as caught:
            call()
        assert str(caught.value) == message


# ---- dump data


def _dump(root: Path, steps: int = 3, ranks: int = 3) -> Path:
    data = root / "data"
    for step in range(steps):
        for rank in range(ranks):
            content = (A1_DATA, A1_CONSTRUCT) if (step + rank) % 2 else (A2_DATA, A2_CONSTRUCT)
            write_file_set(data / f"step{step}" / f"rank{rank}", *content)
    return data


def _copy(data: Path, root: Path, relatives: list[str]) -> Path:
    """A DATA holding only RELATIVES (directories or files) of DATA."""
    for relative in relatives:
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if (data / relative).is_dir() else shutil.copy2)(data / relative, target)
    return root


def _same(a: Path, b: Path) -> None:
    result = invoke("diff", "--ids", a, b)
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("micro_step", [True, False])
def test_a_dump_subset_is_the_conversion_of_a_data_holding_only_it(tmp_path, micro_step):
    data = _dump(tmp_path)
    chosen = [f"step{step}/rank{rank}" for step in (0, 2) for rank in (1, 2)]
    alone = _copy(data, tmp_path / "alone", chosen)
    mode = "--micro-step" if micro_step else "--no-micro-step"
    whole = invoke("run", alone, "--db", tmp_path / "whole", mode, "-j", "1")
    subset = invoke("run", data, "--db", tmp_path / "subset", mode, "-j", "1", "--steps", "0,2", "--ranks", "1-2")
    assert whole.exit_code == 0 and subset.exit_code == 0, subset.output
    assert "  selected steps 0,2, ranks 1-2; left out unread: 1 × step directory, 2 × rank/proc directory" in (
        subset.stdout.splitlines()
    )
    _same(tmp_path / "whole" / "dump_data.trend.db", tmp_path / "subset" / "dump_data.trend.db")
    assert query(tmp_path / "subset" / "dump_data.trend.db", "SELECT DISTINCT rank FROM trend_data") == [(1,), (2,)]


def test_nothing_outside_the_selection_is_listed_looked_at_or_opened(tmp_path, monkeypatch):
    data = _dump(tmp_path)
    (data / "step1" / "rank01").mkdir()  # listing step1 would find two rank 1 directories: an error
    for step in (0, 2):
        (data / f"step{step}" / "rank2" / "dump.json").write_text("{not json")  # opening it would fail
        (data / f"step{step}" / "rank7").mkdir()  # looking at it would warn: no dump.json
    for selected, stderr in [  # each trap springs once its directory is selected
        ("1", f"error: {data / 'step1'}: 'rank01' and 'rank1' both mean rank 1; rename one of them"),
        ("0 --ranks 2", f"error: {data / 'step0' / 'rank2' / 'dump.json'}"),
        ("0 --ranks 7", f"warning: No 'dump.json' file found in: {data / 'step0' / 'rank7'}"),
    ]:
        trapped = invoke("run", data, "--db", tmp_path / "all", "-j", "1", "--steps", *selected.split())
        assert trapped.exit_code == 1 and trapped.stderr.startswith(stderr), trapped.stderr
    listed, looked_at = [], []
    monkeypatch.setattr(dump_scan, "list_dir", _recording(dump_scan.list_dir, listed))
    monkeypatch.setattr(dump_scan, "is_file", _recording(dump_scan.is_file, looked_at))
    result = invoke(
        "run", data, "--db", tmp_path / "out", "--format", "dump", "-j", "1", "--steps", "0,2", "--ranks", "0-1"
    )
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    assert listed == [data, data / "step0", data / "step2"]
    assert looked_at == [data / f"step{s}" / f"rank{r}" / "dump.json" for s in (0, 2) for r in (0, 1)]
    assert query(tmp_path / "out" / "dump_data.trend.db", "SELECT DISTINCT rank FROM trend_data") == [(0,), (1,)]


def _recording(function, calls: list):
    def recorded(path):
        calls.append(path)
        return function(path)

    return recorded


def test_ranks_are_those_of_the_proc_mapping(tmp_path):
    data = tmp_path / "data"
    write_file_set(data / "step0" / "rank0", A1_DATA, A1_CONSTRUCT)
    write_file_set(data / "step0" / "proc77", A2_DATA, A2_CONSTRUCT)  # rank 2
    write_file_set(data / "step0" / "proc5", A1_DATA, A1_CONSTRUCT)  # rank 1
    (data / "step0" / "proc9").mkdir()  # no dump.json: no rank, so not selected, and no warning
    full = trendconv.convert(data, tmp_path / "full", workers=1)[0]
    subset = trendconv.convert(data, tmp_path / "subset", workers=1, ranks="2")[0]
    assert subset.parse.left_out == {"rank/proc directory": 2}
    assert full.warnings == [f"No 'dump.json' file found in: {data / 'step0' / 'proc9'}"]
    assert subset.warnings == []
    by_name = "SELECT m.target_name, t.rank, t.norm FROM trend_data t JOIN monitoring_targets m USING (target_id)"
    rank2 = query(full.load.db, by_name + " WHERE t.rank = 2 ORDER BY 1, 2, 3")
    assert query(subset.load.db, by_name + " ORDER BY 1, 2, 3") == rank2
    assert len(rank2) > 0


def test_a_selection_that_matches_nothing_is_a_data_error_naming_it(tmp_path):
    data = _dump(tmp_path)
    result = invoke("run", data, "--db", tmp_path / "out", "--steps", "5-9", "--ranks", "0")
    assert result.exit_code == 1
    assert result.stderr == (
        f"error: {data}: no dump data in the selection (steps 5-9, ranks 0): no selected step directory holds a "
        "selected rank*/proc* directory with a dump.json\n"
    )
    assert not (tmp_path / "out" / "dump_data.trend.db").exists()


def test_work_remembers_the_selection_and_keeps_the_other_shards(tmp_path):
    data, work, out = _dump(tmp_path), tmp_path / "work", tmp_path / "out"
    first = trendconv.parse(data, work, workers=1, steps="0-1")[0]
    assert (first.files, first.parsed, first.selection) == (6, 6, "steps 0-1")
    manifest = orjson.loads((work / "dump" / "manifest.json").read_bytes())
    assert manifest["selection"] == {"steps": "0-1", "ranks": None}
    assert orjson.loads((work / "dump" / "work.json").read_bytes())["selection"] == manifest["selection"]
    trendconv.load(work, out)
    alone = _copy(data, tmp_path / "alone", ["step0", "step1"])
    _same(trendconv.convert(alone, tmp_path / "whole", workers=1)[0].load.db, out / "dump_data.trend.db")
    inspected = trendconv.inspect(work)
    assert inspected["selection"] == {"steps": "0-1", "ranks": None}
    table = invoke("inspect", work).stdout.splitlines()
    assert table[1] == f"DATA {data.resolve()} (micro-step, mapping sha256 4f53cda18c2b, selected steps 0-1)"
    assert [(entry["step"], entry["rank"], entry["status"]) for entry in inspected["shards"]] == [
        (step, rank, "ok") for step in (0, 1) for rank in range(3)
    ]
    # another selection: its own manifest; shards of the first are kept, and reused once selected again
    second = trendconv.parse(data, work, workers=1, steps="2", ranks="1")[0]
    assert (second.files, second.parsed, second.reused, second.removed_orphans) == (1, 1, 0, 0)
    trendconv.load(work, out)
    assert query(out / "dump_data.trend.db", "SELECT DISTINCT rank FROM trend_data") == [(1,)]
    third = trendconv.parse(data, work, workers=1)[0]
    assert (third.files, third.parsed, third.reused, third.selection) == (9, 2, 7, None)
    assert "selection" not in orjson.loads((work / "dump" / "manifest.json").read_bytes())


def test_a_parse_of_everything_removes_shards_of_units_gone_from_data(tmp_path):
    data, work = _dump(tmp_path), tmp_path / "work"
    trendconv.parse(data, work, workers=1)
    shutil.rmtree(data / "step2")
    selected = trendconv.parse(data, work, workers=1, steps="0")[0]
    assert selected.removed_orphans == 0  # step 2 is outside the selection: its shards wait
    assert trendconv.parse(data, work, workers=1)[0].removed_orphans == 3


# ---- monitor data


def _split(text: str, step: int) -> str:
    """TEXT's header and its rows of STEP."""
    header, *rows = text.splitlines(keepends=True)
    return header + "".join(row for row in rows if row.split(",")[2] == str(step))


def _monitor(root: Path) -> Path:
    data = root / "mdata"
    for run in (RUN, RUN1):
        files = {f"actv_{step}-{step}.csv": _split(ACTV, step) for step in (0, 1)}
        write_run(data, {**files, "grad_reduced_0-1.csv": GRAD}, run)
    return data


def test_a_monitor_subset_takes_whole_files_whose_steps_are_all_selected(tmp_path):
    data = _monitor(tmp_path)
    alone = _copy(data, tmp_path / "alone", [f"{RUN1}/actv_1-1.csv"])
    whole = trendconv.convert(alone, tmp_path / "whole", workers=1)[0]
    subset = trendconv.convert(data, tmp_path / "subset", workers=1, steps="1", ranks="1")[0]
    assert subset.parse.left_out == {"monitor CSV file": 2, "run directory": 1}
    assert subset.warnings == [
        f"1 monitor CSV file only partly inside the selected steps left out (first: {RUN1}/grad_reduced_0-1.csv): "
        "a file is taken only when its name's steps <a>-<b> are all selected (steps 1, ranks 1); select all of its "
        "steps to take it"
    ]
    _same(whole.load.db, subset.load.db)
    both = trendconv.convert(data, tmp_path / "both", workers=1, steps="0-1")[0]
    assert (both.parse.files, both.parse.left_out, both.warnings) == (6, {}, [])


def test_monitor_files_and_runs_outside_the_selection_are_not_opened(tmp_path, monkeypatch):
    data = _monitor(tmp_path)
    (data / "run_a-rank7-x").mkdir()  # a run directory's name without a time: an error once looked at
    write_run(data, {"actv_0-0.csv": "vpp_stage,name\n0,a,1,2,3\n"}, "Feb20_16-27-58-rank2-0a0b0c0d")
    (data / RUN / "actv_5-5.csv").write_text("vpp_stage,name\n0,a,1,2,3\n")  # more fields than the header
    assert invoke("run", data, "--db", tmp_path / "all").exit_code == 1
    listed = []
    monkeypatch.setattr(monitor_scan, "list_dir", _recording(monitor_scan.list_dir, listed))
    flags = ["--format", "monitor", "-j", "1", "--steps", "0-1", "--ranks", "0-1"]
    result = invoke("run", data, "--db", tmp_path / "out", *flags)
    assert result.exit_code == 0, result.output
    assert listed == [data, data / RUN, data / RUN1]
    assert "  selected steps 0-1, ranks 0-1; left out unread: 1 × monitor CSV file, 2 × run directory" in (
        result.stdout.splitlines()
    )
    assert query(tmp_path / "out" / "monitor_data.trend.db", "SELECT count(*) FROM trend_data") == [(24,)]


def test_a_monitor_selection_that_matches_nothing_is_a_data_error_naming_it(tmp_path):
    data = _monitor(tmp_path)
    with pytest.raises(DataError) as caught:
        trendconv.convert(data, tmp_path / "out", steps="0-4", ranks="3")
    assert str(caught.value) == (
        f"{data}: no monitor data in the selection (steps 0-4, ranks 3): no selected run directory holds a metric "
        "CSV file whose steps are all selected"
    )
