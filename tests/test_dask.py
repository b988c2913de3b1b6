"""The parse stage on a Dask LocalCluster (2 worker processes): same shards, same database, retries."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import invoke, make_data

import trendconv
from trendconv import api, faults
from trendconv.errors import UsageError

distributed = pytest.importorskip("distributed")


def shard_bytes(work: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted((work / "dump" / "shards").iterdir())}


def test_dask_gives_the_same_shards_and_database(tmp_path):
    data = make_data(tmp_path, steps=2, ranks=3)
    local = api.run(data, tmp_path / "local", api.ParseOptions(), workers=2, input_format="dump")
    [dask] = trendconv.convert(data, tmp_path / "dask", format="dump", executor="dask", workers=2)
    assert (dask.parse.parsed, dask.parse.reused) == (6, 0)
    assert shard_bytes(tmp_path / "dask" / ".trendconv") == shard_bytes(tmp_path / "local" / ".trendconv")
    assert dask.load.db.read_bytes() == local.load.db.read_bytes()


def test_the_databases_of_a_split_are_built_on_the_cluster_with_the_same_bytes(tmp_path):
    data = make_data(tmp_path, steps=3, ranks=2)
    [local] = trendconv.convert(data, tmp_path / "local", format="dump", workers=2, split_steps=2)
    [dask] = trendconv.convert(data, tmp_path / "dask", format="dump", executor="dask", workers=2, split_steps=2)
    names = ["dump_data.steps-000000-000001.trend.db", "dump_data.steps-000002-000002.trend.db"]
    assert [part.db.name for part in dask.load.parts] == [part.db.name for part in local.load.parts] == names
    assert [part.db.read_bytes() for part in dask.load.parts] == [part.db.read_bytes() for part in local.load.parts]


def test_a_worker_killed_mid_task_is_retried(tmp_path, monkeypatch):
    data = make_data(tmp_path, steps=2, ranks=2)
    clean = api.run(data, tmp_path / "clean", api.ParseOptions(), workers=1, input_format="dump").load.db.read_bytes()
    marker = tmp_path / "fault-fired"
    # the worker processes inherit these: the first one to reach the point dies, once
    monkeypatch.setenv(faults.ENV, "parse-before-write")
    monkeypatch.setenv(faults.ONCE_ENV, str(marker))
    [summary] = trendconv.convert(data, tmp_path / "dask", format="dump", executor="dask", workers=2)
    assert marker.exists()
    assert summary.parse.parsed == 4
    assert summary.load.db.read_bytes() == clean


def test_scheduler_needs_the_dask_executor(tmp_path):
    result = invoke("run", make_data(tmp_path), "--db", tmp_path / "out", "--scheduler", "tcp://127.0.0.1:8786")
    assert (result.exit_code, result.stderr) == (2, "error: --scheduler goes with --executor dask\n")


def test_without_dask_installed_the_error_says_how_to_install(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_distributed(name, *args, **kwargs):
        if name == "distributed":
            raise ImportError("No module named 'distributed'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_distributed)
    with pytest.raises(UsageError) as raised:
        trendconv.convert(make_data(tmp_path), tmp_path / "out", executor="dask")
    assert str(raised.value) == "`executor='dask'` needs Dask: pip install 'trendconv[dask]'"
    result = invoke("run", tmp_path / "data", "--db", tmp_path / "out", "--executor", "dask")
    assert (result.exit_code, result.stderr) == (
        2,
        "error: --executor dask needs Dask: pip install 'trendconv[dask]'\n",
    )
