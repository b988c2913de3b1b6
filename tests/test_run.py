"""`trendconv run`, resume after faults, the WORK lock, `inspect` and the msprobe-compatible entry."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from helpers import A1_CONSTRUCT, invoke, make_data, run_cli

from datagen.dump import generate
from trendconv import api, inspection, workdir


def clean_db(data: Path, root: Path, **options) -> bytes:
    summary = api.run(data, root / "clean", api.ParseOptions(**options), workers=1, input_format="dump")
    return summary.load.db.read_bytes()


def test_run_summary_and_default_work(tmp_path):
    data = make_data(tmp_path)
    result = invoke("run", data, "--db", tmp_path / "out", "--workers", "2")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    db = tmp_path / "out" / "dump_data.trend.db"
    assert lines[:6] == [
        f"wrote {db} ({db.stat().st_size} bytes)",
        f"  4 file sets: 4 parsed, 0 reused (shards in {tmp_path / 'out' / '.trendconv'})",
        "  rows 52, targets 6, tags 18, tag links 29",
        "  skipped 4 × null",
        "  skipped 4 × unsupported dtype",
        lines[5],
    ]
    assert lines[5].startswith("  time: scan ") and lines[5].endswith("s") and len(lines) == 6
    assert sorted(p.name for p in (tmp_path / "out" / ".trendconv" / "dump" / "shards").iterdir()) == [
        "step0_rank0.parquet",
        "step0_rank1.parquet",
        "step1_rank0.parquet",
        "step1_rank1.parquet",
    ]


def test_run_equals_parse_then_load(tmp_path):
    data = make_data(tmp_path)
    api.parse(data, tmp_path / "work", api.ParseOptions(), workers=2, input_format="dump")
    separate = api.load(tmp_path / "work", tmp_path / "separate", input_format="dump").db.read_bytes()
    assert clean_db(data, tmp_path) == separate


@pytest.mark.parametrize(
    "fault", ["parse-before-write@2", "parse-shard@2", "run-between-stages", "load-shard@3", "load-before-rename"]
)
def test_sigkill_then_rerun_gives_the_clean_db(tmp_path, fault):
    data = make_data(tmp_path)
    out = tmp_path / "out"
    killed = run_cli("run", data, "--db", out, "--workers", "1", "-q", env_extra={"TRENDCONV_FAULT": fault})
    assert killed.returncode == -9
    assert not (out / "dump_data.trend.db").exists()
    again = run_cli("run", data, "--db", out, "--workers", "1")
    assert again.returncode == 0, again.stderr
    # inline parse + overlapped load, a step directory at a time (once the next one's first shard is parsed): a
    # kill while loading shard 3, the first of the last step, finds all 4 parsed
    reused = {
        "parse-before-write@2": 1,  # killed while the second shard was being made: only the first exists
        "parse-shard@2": 2,
        "run-between-stages": 4,
        "load-shard@3": 4,
        "load-before-rename": 4,
    }[fault]
    assert f"  4 file sets: {4 - reused} parsed, {reused} reused" in again.stdout
    assert (out / "dump_data.trend.db").read_bytes() == clean_db(data, tmp_path)
    assert sorted(p.name for p in out.iterdir()) == [
        ".dump_data.trend.db.files.json",
        ".trendconv",
        "dump_data.trend.db",
    ]
    assert sorted(p.name for p in (out / ".trendconv" / "dump" / "shards").iterdir()) == [
        "step0_rank0.parquet",
        "step0_rank1.parquet",
        "step1_rank0.parquet",
        "step1_rank1.parquet",
    ]


def test_truncated_deleted_and_changed_shards_are_reparsed(tmp_path):
    data = make_data(tmp_path)
    out = tmp_path / "out"
    api.run(data, out, api.ParseOptions(), workers=1, input_format="dump")
    shards_dir = out / ".trendconv" / "dump" / "shards"
    truncated = shards_dir / "step0_rank1.parquet"
    truncated.write_bytes(truncated.read_bytes()[:100])
    (shards_dir / "step1_rank0.parquet").unlink()
    changed = data / "step1" / "rank1" / "dump.json"
    document = json.loads(changed.read_text())
    document["data"]["Module.net.Net.forward.0"]["output"][0]["Max"] = 7.5
    changed.write_text(json.dumps(document, indent=1))
    summary = api.run(data, out, api.ParseOptions(), workers=1, input_format="dump")
    assert (summary.parse.parsed, summary.parse.reused) == (3, 1)
    assert summary.load.db.read_bytes() == clean_db(data, tmp_path)


def test_changed_options_make_every_shard_stale(tmp_path):
    data = make_data(tmp_path)
    out = tmp_path / "out"
    api.run(data, out, api.ParseOptions(), workers=1, input_format="dump")
    plain = api.run(data, out, api.ParseOptions(micro_step=False), workers=1, input_format="dump")
    assert (plain.parse.parsed, plain.parse.reused) == (4, 0)
    mapped = api.run(
        data, out, api.ParseOptions(micro_step=False, mapping=(("Net", "N"),)), workers=1, input_format="dump"
    )
    assert (mapped.parse.parsed, mapped.parse.reused) == (4, 0)


def test_second_run_on_the_same_work_fails_fast(tmp_path):
    data = make_data(tmp_path, steps=1, ranks=1)
    work = tmp_path / "out" / ".trendconv"
    with workdir.locked(work):
        result = invoke("run", data, "--db", tmp_path / "out")
        load = invoke("load", work, "--db", tmp_path / "out")
    message = f"error: {work}: another trendconv process is using this WORK directory\n"
    assert (result.exit_code, result.stderr) == (2, message)
    assert (load.exit_code, load.stderr) == (2, message)
    assert invoke("run", data, "--db", tmp_path / "out").exit_code == 0


def test_inspect_text(tmp_path):
    data = make_data(tmp_path, steps=1, ranks=3)
    work = tmp_path / "out" / ".trendconv"
    api.run(data, tmp_path / "out", api.ParseOptions(), workers=1, input_format="dump")
    (work / "dump" / "shards" / "step0_rank1.parquet").write_bytes(b"junk")
    (work / "dump" / "shards" / "step0_rank2.parquet").unlink()
    result = invoke("inspect", work)
    digest = api.ParseOptions().mapping_sha256[:12]
    assert result.exit_code == 0
    assert result.stdout == (
        f"WORK {work} (dump data)\n"
        f"DATA {data} (micro-step, mapping sha256 {digest})\n"
        "parse complete\n"
        "step  rank   status  rows  forward  backward  recompute  parameters_grad  skipped\n"
        "   0     0       ok    13        7         3          2                1  null 1, unsupported dtype 1\n"
        "   0     1  corrupt     0        0         0          0                0\n"
        "   0     2  missing     0        0         0          0                0\n"
        "total: 3 shards (1 ok, 1 corrupt, 1 missing); rows 13 (forward 7, backward 3, recompute 2, "
        "parameters_grad 1); skipped: null 1, unsupported dtype 1\n"
    )


def test_inspect_json_and_stale(tmp_path):
    data = make_data(tmp_path, steps=1, ranks=2)
    work = tmp_path / "out" / ".trendconv"
    api.run(data, tmp_path / "out", api.ParseOptions(), workers=1, input_format="dump")
    (data / "step0" / "rank1" / "construct.json").write_text(json.dumps(A1_CONSTRUCT, indent=2))
    document = json.loads(invoke("inspect", work, "--json").stdout)
    assert document["shards"][1] == {
        "step": 0,
        "rank": 1,
        "shard": "step0_rank1.parquet",
        "status": "stale",
        "rows": 13,
        "rows_per_metric": {"forward": 7, "backward": 3, "recompute": 2, "parameters_grad": 1},
        "skipped": {"null": 1, "unsupported dtype": 1},
    }
    assert sorted(document) == [
        "complete",
        "data",
        "input_format",
        "note",
        "options",
        "other_formats",
        "selection",
        "shards",
        "totals",
        "work",
    ]
    assert (document["input_format"], document["other_formats"]) == ("dump", [])
    assert document["totals"] == {
        "shards": 2,
        "status": {"ok": 1, "stale": 1, "corrupt": 0, "missing": 0},
        "rows": 26,
        "rows_per_metric": {"forward": 14, "backward": 6, "recompute": 4, "parameters_grad": 2},
        "skipped": {"null": 2, "unsupported dtype": 2},
    }


def test_inspect_without_data(tmp_path):
    data = make_data(tmp_path, steps=1, ranks=1)
    work = tmp_path / "out" / ".trendconv"
    api.run(data, tmp_path / "out", api.ParseOptions(), workers=1, input_format="dump")
    (data / "step0" / "rank0" / "dump.json").unlink()
    (data / "step0" / "rank0" / "construct.json").unlink()
    document = json.loads(invoke("inspect", work, "--json").stdout)
    assert document["note"] == (
        f"sources not checked: {data}: no dump data: no step directory holds a rank*/proc* directory with a dump.json"
    )
    assert [(s["shard"], s["status"]) for s in document["shards"]] == [("step0_rank0.parquet", "ok")]


@pytest.mark.parametrize("shards_left", [True, False])
def test_inspect_streamed_is_the_document(tmp_path, shards_left):
    """The command line writes shard by shard exactly what the Python API's document prints as."""
    data = make_data(tmp_path, steps=2, ranks=2)
    work = tmp_path / "out" / ".trendconv"
    api.run(data, tmp_path / "out", api.ParseOptions(), workers=1, input_format="dump")
    (work / "dump" / "shards" / "step0_rank1.parquet").write_bytes(b"junk")
    (data / "step1" / "rank0" / "construct.json").write_text(json.dumps(A1_CONSTRUCT, indent=2))
    if not shards_left:  # no sources and no shards: an empty list
        for path in [*(work / "dump" / "shards").iterdir(), *data.rglob("*.json")]:
            path.unlink()
    document = inspection.inspect_work(work)
    assert len(document["shards"]) == (4 if shards_left else 0)
    as_json = invoke("inspect", work, "--json").stdout
    assert as_json == orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n"
    assert invoke("inspect", work).stdout == inspection.format_inspection(document) + "\n"


@pytest.mark.parametrize("as_json", [[], ["--json"]])
def test_inspect_into_a_pipe_closed_early(tmp_path, as_json):
    """`trendconv inspect WORK | head`: the reader leaves after a line, and inspect ends quietly, as before it wrote
    shard by shard."""
    generate(tmp_path / "data", steps=2, ranks=600, layers=1, micro_batches=1, tiny=True)
    api.run(tmp_path / "data", tmp_path / "out", api.ParseOptions(), workers=1, input_format="dump")
    command = [sys.executable, "-m", "trendconv", "inspect", str(tmp_path / "out" / ".trendconv"), *as_json]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = process.stdout.readline()
    process.stdout.close()  # far less than the output, which is larger than a pipe holds
    assert (first.split()[0], process.wait(timeout=120), process.stderr.read()) == (first.split()[0], 0, b"")
    assert first in (b"{\n", f"WORK {tmp_path / 'out' / '.trendconv'} (dump data)\n".encode())


def test_data2db_with_msprobe_flags(tmp_path):
    data = make_data(tmp_path, steps=2, ranks=1)
    result = invoke(
        "data2db", "--data", data, "--db", tmp_path / "out", "--format", "dump", "--micro_step", "FALSE",
        "--process_num", "2",
    )  # fmt: skip
    assert result.exit_code == 0
    expected = api.run(
        data, tmp_path / "plain", api.ParseOptions(micro_step=False), workers=1, input_format="dump"
    ).load.db
    assert (tmp_path / "out" / "dump_data.trend.db").read_bytes() == expected.read_bytes()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--micro_step", "yes"], "Invalid value for '--micro_step': 'yes' is not one of 'true', 'false'"),
        (["--format", "csv"], "Invalid value for '--format': 'csv' is not one of 'auto', 'dump', 'monitor'"),
        (["--process_num", "129"], "Invalid value for '--process_num'"),
    ],
)
def test_data2db_usage_errors(tmp_path, flags, message):
    data = make_data(tmp_path, steps=1, ranks=1)
    result = invoke("data2db", "--data", data, "--db", tmp_path / "out", *flags)
    assert result.exit_code == 2
    assert message in result.stderr


def test_interrupt_exits_130(tmp_path, monkeypatch):
    data = make_data(tmp_path, steps=1, ranks=1)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(api, "run_parse", interrupted)
    result = invoke("run", data, "--db", tmp_path / "out")
    assert (result.exit_code, result.stderr) == (130, "error: interrupted\n")
    assert list((tmp_path / "out").iterdir()) == [tmp_path / "out" / ".trendconv"]


def old_layout(work: Path) -> None:
    """Make WORK look as trendconv 0.1 left it: the dump part at WORK itself."""
    for path in (work / "dump").iterdir():
        path.rename(work / path.name)
    (work / "dump").rmdir()


def test_a_work_of_trendconv_0_1_still_loads_and_resumes(tmp_path):
    data = make_data(tmp_path)
    work = tmp_path / "work"
    api.parse(data, work, api.ParseOptions(), workers=1, input_format="dump")
    clean = api.load(work, tmp_path / "new", input_format="dump").db.read_bytes()
    old_layout(work)
    assert sorted(path.name for path in work.iterdir()) == ["lock", "manifest.json", "shards", "work.json"]
    loaded = invoke("load", work, "--db", tmp_path / "old", "-q")
    assert (loaded.exit_code, (tmp_path / "old" / "dump_data.trend.db").read_bytes()) == (0, clean)
    assert inspection.inspect_work(work)["totals"]["status"] == {"ok": 4, "stale": 0, "corrupt": 0, "missing": 0}
    resumed = api.parse(data, work, api.ParseOptions(), workers=1, input_format="dump")
    assert (resumed.parsed, resumed.reused, resumed.removed_orphans) == (0, 4, 0)
    assert sorted(path.name for path in work.iterdir()) == ["dump", "lock"]
    assert sorted(path.name for path in (work / "dump").iterdir()) == ["manifest.json", "shards", "work.json"]
    assert api.load(work, tmp_path / "moved", input_format="dump").db.read_bytes() == clean
