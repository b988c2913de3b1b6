"""Scanning DATA for step*/rank*|proc*/dump.json (docs/dump-format.md §1), built in tmp_path.

trendconv sorts directory listings and refuses duplicate step/rank numbers (the reference lets the later
listed directory win, depending on listing order).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trendconv.errors import DataError, UsageError
from trendconv.formats.dump.scan import FileSet, scan


def item(data: Path, step_dir: str, name: str, *, dump: bool = True) -> Path:
    path = data / step_dir / name
    path.mkdir(parents=True)
    if dump:
        (path / "dump.json").write_text('{"data": {}}')
    return path


def ranks(result) -> list[tuple[int, int, str]]:
    return [(fs.step, fs.rank, fs.item) for fs in result.file_sets]


NO_VALID = (
    "No valid 'rank*' or 'proc*' directories found in: {}. Expected directory names like 'rank0' or 'proc0'. "
    "Skipped entries: {}"
)


def test_spec_example_ranks_then_mapped_procs(tmp_path):
    for name in ("rank-1", "rank02", "proc77", "proc5"):
        item(tmp_path, "step2", name)
    result = scan(tmp_path)
    assert [(fs.rank, fs.item) for fs in result.file_sets] == [
        (-1, "rank-1"),
        (2, "rank02"),
        (3, "proc5"),
        (4, "proc77"),
    ]
    assert result.proc_mappings == {2: {"proc5": 3, "proc77": 4}}
    assert list(result.proc_mappings[2].items()) == [("proc5", 3), ("proc77", 4)]
    assert result.warnings == []
    assert result.file_sets[0] == FileSet(2, -1, "rank-1", "step2", tmp_path)


def test_spec_example_single_proc(tmp_path):
    item(tmp_path, "step0", "proc2016")
    result = scan(tmp_path)
    assert result.file_sets == [FileSet(0, 0, "proc2016", "step0", tmp_path)]
    assert result.proc_mappings == {0: {"proc2016": 0}}
    assert result.warnings == []


def test_file_set_paths(tmp_path):
    item(tmp_path, "step2", "rank02")
    (fs,) = scan(tmp_path).file_sets
    assert fs.dir == tmp_path / "step2" / "rank02"
    assert fs.dump_json == tmp_path / "step2" / "rank02" / "dump.json"
    assert fs.construct_json == tmp_path / "step2" / "rank02" / "construct.json"  # not checked, only remembered
    assert fs.relative("dump.json") == "step2/rank02/dump.json"


def test_steps_in_numeric_order(tmp_path):
    for step in ("step10", "step2", "step1", "step-2", "step1_1"):
        item(tmp_path, step, "rank0")
    assert [(fs.step, fs.step_dir) for fs in scan(tmp_path).file_sets] == [
        (-2, "step-2"),
        (1, "step1"),
        (2, "step2"),
        (10, "step10"),
        (11, "step1_1"),
    ]


@pytest.mark.parametrize(("name", "number"), [("step01", 1), ("step1_0", 10), ("step-2", -2), ("step+3", 3)])
def test_step_numbers_parse_as_python_int(tmp_path, name, number):
    item(tmp_path, name, "rank0")
    assert ranks(scan(tmp_path)) == [(number, 0, "rank0")]


def test_non_step_names_are_ignored_silently(tmp_path):
    for name in ("stepA", "step", "step1a", "foo", "Step3", "step1__0"):
        item(tmp_path, name, "rank0")
    (tmp_path / "step7").write_text("a file")
    item(tmp_path, "step4", "rank1")
    result = scan(tmp_path)
    assert ranks(result) == [(4, 1, "rank1")]
    assert result.warnings == []


@pytest.mark.parametrize(("name", "number"), [("rank0", 0), ("rank02", 2), ("rank-1", -1), ("rank1_0", 10)])
def test_rank_numbers_parse_as_python_int(tmp_path, name, number):
    item(tmp_path, "step0", name)
    assert ranks(scan(tmp_path)) == [(0, number, name)]


def test_procs_start_after_the_largest_rank(tmp_path):
    for name in ("proc9", "rank3", "proc100", "rank0", "proc10"):
        item(tmp_path, "step0", name)
    result = scan(tmp_path)
    assert ranks(result) == [(0, 0, "rank0"), (0, 3, "rank3"), (0, 4, "proc9"), (0, 5, "proc10"), (0, 6, "proc100")]
    assert list(result.proc_mappings[0].items()) == [("proc9", 4), ("proc10", 5), ("proc100", 6)]


def test_rank_and_proc_with_the_same_number_are_not_duplicates(tmp_path):
    item(tmp_path, "step0", "rank1")
    item(tmp_path, "step0", "proc1")
    assert ranks(scan(tmp_path)) == [(0, 1, "rank1"), (0, 2, "proc1")]


def test_only_negative_ranks_then_procs(tmp_path):
    item(tmp_path, "step0", "rank-5")
    item(tmp_path, "step0", "proc3")
    assert ranks(scan(tmp_path)) == [(0, -5, "rank-5"), (0, -4, "proc3")]


def test_proc_mapping_is_per_step(tmp_path):
    item(tmp_path, "step0", "rank0")
    item(tmp_path, "step0", "proc7")
    item(tmp_path, "step1", "proc7")
    result = scan(tmp_path)
    assert ranks(result) == [(0, 0, "rank0"), (0, 1, "proc7"), (1, 0, "proc7")]
    assert result.proc_mappings == {0: {"proc7": 1}, 1: {"proc7": 0}}


def test_no_proc_mapping_without_procs(tmp_path):
    item(tmp_path, "step0", "rank0")
    assert scan(tmp_path).proc_mappings == {}


def test_missing_dump_json_warns_and_drops_the_item(tmp_path):
    item(tmp_path, "step0", "rank0", dump=False)
    item(tmp_path, "step0", "rank1")
    result = scan(tmp_path)
    assert ranks(result) == [(0, 1, "rank1")]
    assert result.warnings == [f"No 'dump.json' file found in: {tmp_path / 'step0' / 'rank0'}"]


def test_dump_json_that_is_a_directory_is_missing(tmp_path):
    path = item(tmp_path, "step0", "rank0", dump=False)
    (path / "dump.json").mkdir()
    item(tmp_path, "step1", "rank0")
    result = scan(tmp_path)
    assert ranks(result) == [(1, 0, "rank0")]
    assert result.warnings == [f"No 'dump.json' file found in: {path}"]


def test_construct_json_is_not_checked(tmp_path):
    path = item(tmp_path, "step0", "rank0")
    assert not (path / "construct.json").exists()
    assert ranks(scan(tmp_path)) == [(0, 0, "rank0")]


def test_proc_start_uses_kept_ranks_only(tmp_path):
    item(tmp_path, "step0", "rank5", dump=False)
    item(tmp_path, "step0", "rank1")
    item(tmp_path, "step0", "proc9")
    result = scan(tmp_path)
    assert ranks(result) == [(0, 1, "rank1"), (0, 2, "proc9")]
    assert result.warnings == [f"No 'dump.json' file found in: {tmp_path / 'step0' / 'rank5'}"]


def test_step_whose_ranks_all_lack_dump_json_takes_no_slot(tmp_path):
    item(tmp_path, "step0", "rank0", dump=False)
    item(tmp_path, "step0", "proc3", dump=False)
    item(tmp_path, "step1", "rank0")
    result = scan(tmp_path)
    assert ranks(result) == [(1, 0, "rank0")]
    assert result.proc_mappings == {}
    assert result.warnings == [
        f"No 'dump.json' file found in: {tmp_path / 'step0' / 'proc3'}",
        f"No 'dump.json' file found in: {tmp_path / 'step0' / 'rank0'}",
    ]


def test_step_without_valid_items_warns_with_skipped_names(tmp_path):
    step0 = tmp_path / "step0"
    step0.mkdir()
    (step0 / "rank3").write_text("a file")
    (step0 / "rankX").mkdir()
    (step0 / "proc").mkdir()
    (step0 / "foo").mkdir()  # not listed
    item(tmp_path, "step1", "rank0")
    result = scan(tmp_path)
    assert ranks(result) == [(1, 0, "rank0")]
    assert result.warnings == [NO_VALID.format(step0, "proc, rank3, rankX")]


def test_step_without_any_rank_or_proc_entry(tmp_path):
    (tmp_path / "step0" / "foo").mkdir(parents=True)
    (tmp_path / "step1").mkdir()
    item(tmp_path, "step2", "rank0")
    result = scan(tmp_path)
    assert ranks(result) == [(2, 0, "rank0")]
    none = "(none — no rank*/proc* entries at all)"
    assert result.warnings == [NO_VALID.format(tmp_path / "step0", none), NO_VALID.format(tmp_path / "step1", none)]


def test_only_invalid_rank_dirs_is_a_data_error_with_the_warning(tmp_path):
    (tmp_path / "step0" / "rankabc").mkdir(parents=True)
    with pytest.raises(DataError) as info:
        scan(tmp_path)
    assert str(info.value) == (
        f"{tmp_path}: no dump data: no step directory holds a rank*/proc* directory with a dump.json"
    )
    assert info.value.warnings == [NO_VALID.format(tmp_path / "step0", "rankabc")]


def test_only_items_without_dump_json_is_a_data_error(tmp_path):
    item(tmp_path, "step0", "rank0", dump=False)
    with pytest.raises(DataError) as info:
        scan(tmp_path)
    assert str(info.value) == (
        f"{tmp_path}: no dump data: no step directory holds a rank*/proc* directory with a dump.json"
    )
    assert info.value.warnings == [f"No 'dump.json' file found in: {tmp_path / 'step0' / 'rank0'}"]


def test_duplicate_step_numbers_are_refused(tmp_path):
    item(tmp_path, "step1", "rank0")
    item(tmp_path, "step01", "rank0")
    with pytest.raises(DataError) as info:
        scan(tmp_path)
    assert str(info.value) == f"{tmp_path}: 'step01' and 'step1' both mean step 1; rename one of them"


def test_duplicate_rank_numbers_are_refused(tmp_path):
    item(tmp_path, "step0", "rank1")
    item(tmp_path, "step0", "rank01")
    with pytest.raises(DataError) as info:
        scan(tmp_path)
    assert str(info.value) == f"{tmp_path / 'step0'}: 'rank01' and 'rank1' both mean rank 1; rename one of them"


def test_duplicate_proc_numbers_are_refused(tmp_path):
    item(tmp_path, "step0", "proc7")
    item(tmp_path, "step0", "proc007")
    with pytest.raises(DataError) as info:
        scan(tmp_path)
    assert str(info.value) == f"{tmp_path / 'step0'}: 'proc007' and 'proc7' both mean proc 7; rename one of them"


def test_empty_data_is_a_data_error(tmp_path):
    with pytest.raises(DataError) as info:
        scan(tmp_path)
    assert str(info.value) == f"{tmp_path}: no dump data: no 'step*' directories (expected names like 'step0')"
    assert info.value.warnings == []


def test_data_without_step_dirs_is_a_data_error(tmp_path):
    (tmp_path / "foo" / "rank0").mkdir(parents=True)
    (tmp_path / "foo" / "rank0" / "dump.json").write_text('{"data": {}}')
    with pytest.raises(DataError) as info:
        scan(tmp_path)
    assert str(info.value) == f"{tmp_path}: no dump data: no 'step*' directories (expected names like 'step0')"


def test_nonexistent_data_is_a_usage_error(tmp_path):
    data = tmp_path / "missing"
    with pytest.raises(UsageError) as info:
        scan(data)
    assert str(info.value) == f"{data}: DATA does not exist"


def test_data_that_is_a_file_is_a_usage_error(tmp_path):
    data = tmp_path / "file"
    data.write_text("x")
    with pytest.raises(UsageError) as info:
        scan(data)
    assert str(info.value) == f"{data}: DATA is not a directory"


def test_step_number_beyond_int64_is_an_error(tmp_path):
    """Deliberate difference: SQLite integers are 64-bit, so such a step could not be stored."""
    item(tmp_path, "step99999999999999999999", "rank0")
    with pytest.raises(DataError) as raised:
        scan(tmp_path)
    assert str(raised.value) == (
        f"{tmp_path / 'step99999999999999999999'}: the number 99999999999999999999 does not fit a 64-bit integer"
    )
