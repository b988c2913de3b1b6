"""The C reader of regular monitor CSV files (trendconv.formats.monitor._cells) against the general path.

Every file is parsed with the C reader and with it switched off; the rows must be the same values, bit for bit.
What the C reader refuses goes to the general path (pyarrow's reader and the cell rules), which gives the rows or
the error.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from helpers import RUN

from datagen.monitor import generate
from trendconv.errors import DataError
from trendconv.formats.monitor import regular, rules, shard
from trendconv.formats.monitor.scan import CsvFile, scan_monitor
from trendconv.options import ParseOptions

pytestmark = pytest.mark.c_parts  # nothing to compare when the C part is off

HEADER = "vpp_stage,name,step,micro_step,min,max,norm,zeros,nans,mean,shape,dtype\n"
ROW = '0,a.b.0.c,3,1,-0.5,2.0,1.25,0.0,0.0,1e-06,"[1, 2]",torch.bfloat16\n'


def table_values(table) -> dict:
    """A shard table as exact values: dictionary columns decoded (each path encodes them its own way), floats as
    their bits (NaN, -0.0 and the last digit all count)."""
    found = {}
    for field, column in zip(table.schema, table.columns):
        cells = column.to_pylist()
        if field.type == "double":
            cells = [None if cell is None else struct.pack("<d", cell) for cell in cells]
        found[field.name] = (str(field.type), cells)
    return found


def outcome(csv_file: CsvFile, options: ParseOptions) -> tuple[str, object]:
    """The file's shard as the parse writes it (its table and meta), or its error."""
    try:
        rows, meta = shard.rows_of(csv_file, options)
    except DataError as exc:
        return "error", str(exc)
    return "rows", (table_values(shard.table_of([rows])), meta)


def both_paths(csv_file: CsvFile, monkeypatch, options: ParseOptions | None = None) -> bool:
    """Assert that the C reader and the general path agree on CSV_FILE; whether the C reader took it."""
    options = options or ParseOptions()
    took = regular.regular_buffers(csv_file.path.read_bytes()) is not None
    fast = outcome(csv_file, options)
    with monkeypatch.context() as patch:
        patch.setattr(regular, "_cells", None)
        general = outcome(csv_file, options)
    assert fast == general
    return took


def csv_file(tmp_path: Path, content: bytes, name: str = "actv_0-0.csv") -> CsvFile:
    directory = tmp_path / "data" / RUN
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_bytes(content)
    return CsvFile(0, RUN, name, name.rsplit("_", 1)[0], tmp_path / "data")


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"nan_every": 2, "integer_counts": True},
        {"ranks": 4, "tp": 2, "pp": 2, "layers": 4, "squash_name": True, "monitor_mbs_grad": True},
        {"ops": ("norm", "min", "max", "zeros", "nans", "mean", "shape", "dtype", "id"), "extras": ("bak",)},
    ],
)
def test_generated_files_take_the_c_reader_and_give_the_general_rows(tmp_path, monkeypatch, settings):
    generate(tmp_path / "data", **{"ranks": 2, "steps": 2, "layers": 2, **settings})
    files = scan_monitor(tmp_path / "data").files
    took = [both_paths(found, monkeypatch, ParseOptions(mapping=((".0.", ".zero."),))) for found in files]
    assert took == [True] * len(files)


REGULAR = {
    "plain": HEADER + ROW,
    "crlf, no newline at the end": (HEADER + ROW + ROW).replace("\n", "\r\n")[:-2],
    "empty lines": HEADER + "\n" + ROW + "\n\n" + ROW,
    "number spellings": HEADER + '0,n,0,0,.5,1.,1E5,-0.0,inf,-inf,"x",y\n0,m,-1,-2,nan,,0,7,1e-300,2.5e+3,"x",y\n',
    "quoted other columns": HEADER + '0,n,0,0,1,2,3,4,5,6,"[1, ""2""]","a,\nb"\n',
    "no step or micro_step column": "vpp_stage,name,norm\n0,n,1.5\n1,m,2\n",
    "repeated column: the first counts": "vpp_stage,name,norm,norm\n0,n,1.5,9\n",
    "no stat column": "vpp_stage,name,step\n0,n,1\n",
    "long keys": HEADER + "-123456789012345678,n,123456789012345678,0,1,1,1,1,1,1,x,y\n",
    "UTF-8 names": HEADER + "0,módulo.ß,0,0,1,1,1,1,1,1,x,y\n",
    "NAN is no NA spelling": HEADER + "0,NAN,0,0,1,1,1,1,1,1,x,y\n",
    "text first name, number later": HEADER + "0,a,0,0,1,1,1,1,1,1,x,y\n0,1,0,0,1,1,1,1,1,1,x,y\n",
}

GENERAL = {
    "quoted header": '"vpp_stage",name,norm\n0,n,1\n',
    "byte order mark": "\ufeff" + HEADER + ROW,
    "leading empty line": "\n" + HEADER + ROW,
    "bare carriage return": HEADER + ROW.replace("\n", "\r") + ROW,
    "short row": HEADER + "0,n,0,0,1\n",
    "long row": HEADER + ROW[:-1] + ",extra\n",
    "quoted name": HEADER + '0,"n",0,0,1,1,1,1,1,1,x,y\n',
    "quoted key": HEADER + '"0",n,0,0,1,1,1,1,1,1,x,y\n',
    "quote inside a field": HEADER + '0,n,0,0,1,1,1,1,1,1,x"y,z\n',
    "text after a closing quote": HEADER + '0,n,0,0,1,1,1,1,1,1,"x"y,z\n',
    "unclosed quote": HEADER + '0,n,0,0,1,1,1,1,1,1,"x,z\n',
    "number first name": HEADER + "0,1,0,0,1,1,1,1,1,1,x,y\n0,a,0,0,1,1,1,1,1,1,x,y\n",
    "boolean first name": HEADER + "0,True,0,0,1,1,1,1,1,1,x,y\n",
    "plus sign key": HEADER + "+1,n,0,0,1,1,1,1,1,1,x,y\n",
    "19-digit key": HEADER + "0,n,1234567890123456789,0,1,1,1,1,1,1,x,y\n",
    "float key": HEADER + "0,n,1.0,0,1,1,1,1,1,1,x,y\n",
    "empty key": HEADER + "0,n,,0,1,1,1,1,1,1,x,y\n",
    "overflowing stat": HEADER + "0,n,0,0,1e400,1,1,1,1,1,x,y\n",
    "underflowing stat": HEADER + "0,n,0,0,1e-320,1,1,1,1,1,x,y\n",
    "NaN spelling": HEADER + "0,n,0,0,NaN,1,1,1,1,1,x,y\n",
    "spaces around a stat": HEADER + "0,n,0,0, 2 ,1,1,1,1,1,x,y\n",
    "boolean stat": HEADER + "0,n,0,0,True,1,1,1,1,1,x,y\n",
    "text stat": HEADER + "0,n,0,0,abc,1,1,1,1,1,x,y\n",
    "no name column": "vpp_stage,step,norm\n0,1,2\n",
    "no vpp_stage column": "name,step,norm\nn,1,2\n",
    "header only": HEADER,
}


@pytest.mark.parametrize("case", sorted(REGULAR))
def test_regular_files_take_the_c_reader(tmp_path, monkeypatch, case):
    assert both_paths(csv_file(tmp_path, REGULAR[case].encode()), monkeypatch) is True


@pytest.mark.parametrize("case", sorted(GENERAL))
def test_other_files_take_the_general_path(tmp_path, monkeypatch, case):
    assert both_paths(csv_file(tmp_path, GENERAL[case].encode()), monkeypatch) is False


@pytest.mark.parametrize("token", rules.NA_TOKENS)
def test_a_name_that_is_an_na_spelling_takes_the_general_path(tmp_path, monkeypatch, token):
    content = HEADER + ROW + ROW.replace("a.b.0.c", token)
    assert both_paths(csv_file(tmp_path, content.encode()), monkeypatch) is False


def test_bytes_that_are_not_utf8_are_the_general_paths_error(tmp_path, monkeypatch):
    found = csv_file(tmp_path, (HEADER + ROW).encode().replace(b"torch", b"t\xffrch"))
    assert both_paths(found, monkeypatch) is False
    with pytest.raises(DataError) as error:
        shard.rows_of(found, ParseOptions())
    assert str(error.value) == f"{found.path}: line 2, field 12: not UTF-8 text"


def test_the_c_part_refuses_bad_column_indexes():
    with pytest.raises(ValueError) as error:
        regular._cells.rows(b"a,b\n1,2\n", 4, 2, 0, (0,), ())
    assert str(error.value) == "column index out of range or repeated"
    with pytest.raises(ValueError) as error:
        regular._cells.rows(b"a,b\n1,2\n", 4, 2, 2, (), ())
    assert str(error.value) == "width, name or start out of range"


def chunk_outcome(files: list[CsvFile], options: ParseOptions) -> tuple[dict, list[dict]]:
    parts = [shard.rows_of(found, options) for found in files]
    return table_values(shard.table_of([rows for rows, _ in parts])), [meta for _, meta in parts]


def test_a_chunk_of_regular_and_other_files_is_the_table_of_the_general_path(tmp_path, monkeypatch):
    """The regular files of a chunk are joined from the C reader's buffers; the table and every file's meta must be
    those of the general path, whatever mix of files, metrics, ranks and stat columns the chunk holds."""
    steps = "vpp_stage,name,step,micro_step,norm\n0,n,3,1,1\n0,m,1,0,2\n0,k,3,4,4\n0,k,1,-7,4\n"
    no_micro_step = "vpp_stage,name,step,norm\n0,n,3,1\n0,m,1,2\n0,k,3,4\n"
    contents = [REGULAR[case] for case in sorted(REGULAR)] + [steps, no_micro_step]
    contents += [GENERAL[case] for case in sorted(GENERAL)]
    files = []
    for index, content in enumerate(contents * 2):
        metric = ("actv", "grad_reduced", "param_origin")[index % 3]
        found = csv_file(tmp_path, content.encode(), f"{metric}_{index}-{index}.csv")
        found = CsvFile(index % 2, found.run_dir, found.name, metric, found.data)
        try:
            shard.rows_of(found, ParseOptions())
        except DataError:
            continue  # a file that does not parse ends its chunk: tested with the parse stage
        files.append(found)
    options = ParseOptions(mapping=(("n", "renamed"),))
    fast = chunk_outcome(files, options)
    with monkeypatch.context() as patch:
        patch.setattr(regular, "_cells", None)
        general = chunk_outcome(files, options)
    assert fast == general
    assert len(files) == 2 * (len(REGULAR) + 2 + len(GENERAL) - 1)  # all but the long row
    assert sum(isinstance(shard.rows_of(found, options)[0], shard.Regular) for found in files) == 2 * (len(REGULAR) + 2)
    assert fast[1][len(REGULAR)]["micro_steps_per_step"] == [[1, 1], [3, 5]]
    assert fast[1][len(REGULAR) + 1]["micro_steps_per_step"] == [[1, 1], [3, 1]]


def test_files_of_one_header_and_of_others_each_give_their_own_columns(tmp_path, monkeypatch):
    """A header's layout is worked out once and kept: files after the first of a header, and files of another
    order of the same columns, still read their own columns."""
    reordered = "name,vpp_stage,micro_step,step,norm,max,min,zeros,nans,mean,shape,dtype\n"
    contents = {
        "actv_0-0.csv": HEADER + ROW,
        "actv_1-1.csv": HEADER + ROW.replace(",3,1,", ",4,0,"),
        "actv_2-2.csv": reordered + 'a.b.0.c,0,1,5,1.25,2.0,-0.5,0.0,0.0,1e-06,"[1, 2]",torch.bfloat16\n',
        "actv_3-3.csv": "vpp_stage,name,step,norm\n1,x,6,7.5\n",
    }
    found = {}
    for name, content in contents.items():
        csv = csv_file(tmp_path, content.encode(), name)
        assert both_paths(csv, monkeypatch) is True
        rows, meta = shard.rows_of(csv, ParseOptions())
        table = shard.table_of([rows])
        columns = ("step", "micro_step", "vpp_stage", "norm", "min")
        found[name] = [table[column].to_pylist() if column in table.column_names else None for column in columns]
        found[name].append(meta["stats"])
    six = ["norm", "min", "max", "zeros", "nans", "mean"]  # canonical order, whatever the header's
    assert found == {
        "actv_0-0.csv": [[3], [1], [0], [1.25], [-0.5], six],
        "actv_1-1.csv": [[4], [0], [0], [1.25], [-0.5], six],
        "actv_2-2.csv": [[5], [1], [0], [1.25], [-0.5], six],
        "actv_3-3.csv": [[6], [0], [1], [7.5], None, ["norm"]],
    }


@pytest.mark.parametrize("data", [".", "/", "//", "data", "/srv/monitor", "a//b/", "./a/../b"])
def test_a_csv_files_path_as_text_is_that_of_its_path(data):
    csv = CsvFile(0, RUN, "actv_0-0.csv", "actv", Path(data))
    assert csv.file == str(csv.path)


def test_a_header_line_longer_than_any_the_monitor_writes_is_read_but_not_kept(tmp_path, monkeypatch):
    extra = ",".join(f"extra_column_{index}" for index in range(400))
    content = HEADER.rstrip("\n") + "," + extra + "\n" + ROW.rstrip("\n") + "," + ",".join("1" * 400) + "\n"
    assert len(content.split("\n")[0]) > regular._CACHED_LINE
    regular._cached_layout.cache_clear()
    assert both_paths(csv_file(tmp_path, content.encode()), monkeypatch) is True
    assert regular._cached_layout.cache_info().currsize == 0
    assert both_paths(csv_file(tmp_path, (HEADER + ROW).encode(), "actv_1-1.csv"), monkeypatch) is True
    assert regular._cached_layout.cache_info().currsize == 1  # a header of the monitor's own size is kept
