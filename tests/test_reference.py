"""Logical equivalence with msprobe data2db (mindstudio-probe 26.2.0) on hand-made and random dumps.

Every table is compared by names (floats exactly; NULL = NULL) with trendconv.comparison, and so are the target ids,
each metric's tag ids and sqlite_sequence (`ids=True`).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from helpers import (
    A1_CONSTRUCT,
    A1_DATA,
    A2_CONSTRUCT,
    A2_DATA,
    UNHASHABLE_DATA,
    T,
    invoke,
    plugin_results,
    run_cli,
    write_file_set,
)
from hypothesis import HealthCheck, given, settings
from random_dumps import dump_trees, write_tree
from reference import run_msprobe

from datagen.dump import SHAPES, generate
from datagen.monitor import generate as monitor_generate
from trendconv import api, shards
from trendconv.comparison import diff_databases
from trendconv.formats.dump.ids import flush_starts
from trendconv.formats.dump.shard import SCHEMA

pytestmark = pytest.mark.reference  # runs msprobe data2db: `-m 'not reference'` skips these


def assert_same_as_reference(data: Path, root: Path, *, micro_step: bool, mapping: Path | None = None, seed=0):
    reference = run_msprobe(data, root / "reference", micro_step=micro_step, mapping=mapping, hash_seed=seed)
    options = api.ParseOptions(micro_step=micro_step, mapping=api.load_mapping(mapping))
    ours = api.run(data, root / "ours", options, workers=1, input_format="dump").load.db
    report = diff_databases(reference, ours, ids=True)
    assert report.equal, report.format()


@pytest.mark.parametrize("micro_step", [True, False])
def test_spec_examples(tmp_path, micro_step):
    data = tmp_path / "data"
    write_file_set(data / "step0" / "rank0", A1_DATA, A1_CONSTRUCT)
    write_file_set(data / "step1" / "proc4242", A1_DATA, A1_CONSTRUCT)
    write_file_set(data / "step3" / "rank-1", A2_DATA, A2_CONSTRUCT)
    write_file_set(data / "step3" / "rank02", A2_DATA, A2_CONSTRUCT)
    write_file_set(data / "step3" / "proc77", A1_DATA, A1_CONSTRUCT)
    write_file_set(data / "step3" / "proc5", A2_DATA, A2_CONSTRUCT)
    assert_same_as_reference(data, tmp_path, micro_step=micro_step, seed=7)


@pytest.mark.parametrize("micro_step", [True, False])
def test_mapping_collisions_and_megatron_construct(tmp_path, micro_step):
    data = tmp_path / "data"
    megatron = {"megatron_micro_step_number": 2, **{key: [value, 0] for key, value in A1_CONSTRUCT.items()}}
    renamed = {key.replace("Module.net.Net", "Module.net.TENet"): value for key, value in A1_DATA.items()}
    write_file_set(data / "step0" / "rank0", {**A1_DATA, **renamed}, megatron | {
        key.replace("Module.net.Net", "Module.net.TENet"): [None, 1] for key in A1_CONSTRUCT if "Module" in key
    })  # fmt: skip
    mapping = tmp_path / "mapping.json"
    mapping.write_text(json.dumps({".TENet": ".Net", "linear": "lin"}))
    assert_same_as_reference(data, tmp_path, micro_step=micro_step, mapping=mapping)


def test_list_or_object_type_and_dtype(tmp_path):
    write_file_set(tmp_path / "data" / "step0" / "rank0", UNHASHABLE_DATA)
    assert_same_as_reference(tmp_path / "data", tmp_path, micro_step=False)


def test_integer_statistics_beyond_float_range(tmp_path):
    # float() refuses such an int; msprobe clips it like any huge value.
    data = {"F.f.0.forward": {"output": [T(10**400, 10**400, -(10**400), 2**1024 - 2**970)]}}
    write_file_set(tmp_path / "data" / "step0" / "rank0", data)
    assert_same_as_reference(tmp_path / "data", tmp_path, micro_step=False)


@settings(
    max_examples=int(os.environ.get("TRENDCONV_EXAMPLES", "12")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(tree=dump_trees(), micro_step=...)
def test_random_dumps_match_the_reference(tmp_path, tree, micro_step: bool):
    root = tmp_path / "case"
    shutil.rmtree(root, ignore_errors=True)
    write_tree(root / "data", tree)
    assert_same_as_reference(root / "data", root, micro_step=micro_step)


GENERATED = {
    "megatron": {},
    "plain-procs-recompute": {"construct": "plain", "procs": True, "recompute": True, "old_grad_counter": True},
    "mindspore": {"framework": "mindspore", "micro_batches": 3},
    "megatron-seed5": {"seed": 5, "micro_batches": 1},
    "wide": SHAPES["wide"],
    "narrow-mindspore": {**SHAPES["narrow"], "framework": "mindspore"},
}


@pytest.mark.parametrize("micro_step", [True, False])
@pytest.mark.parametrize("shape", sorted(GENERATED))
def test_generated_dumps_match_the_reference(tmp_path, shape, micro_step):
    settings_ = {"steps": 2, "ranks": 2, "layers": 2, "seed": 11, **GENERATED[shape]}
    generate(tmp_path / "data", **settings_)
    assert_same_as_reference(tmp_path / "data", tmp_path, micro_step=micro_step, seed=3)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_benchmark_shapes_match_the_reference_by_the_command_line(tmp_path, shape):
    """What benchmarks/run.py measures, converted as it converts (`trendconv run -j2`, then `diff --ids`)."""
    generate(tmp_path / "data", steps=2, ranks=2, layers=1, seed=6, **SHAPES[shape])
    reference = run_msprobe(tmp_path / "data", tmp_path / "reference", hash_seed=2)
    ran = invoke("run", tmp_path / "data", "--db", tmp_path / "ours", "-j2", "-q")
    assert (ran.exit_code, ran.output) == (0, "")
    compared = invoke("diff", "--ids", reference, tmp_path / "ours" / "dump_data.trend.db")
    assert (compared.exit_code, compared.output) == (0, "logically identical\n")


def test_generated_dump_with_a_mapping(tmp_path):
    generate(tmp_path / "data", steps=2, ranks=1, layers=2, seed=2)
    mapping = tmp_path / "mapping.json"
    mapping.write_text(json.dumps({".ColumnParallelLinear": ".Linear", ".RowParallelLinear": ".Linear", "fc1": "fc"}))
    assert_same_as_reference(tmp_path / "data", tmp_path, micro_step=True, mapping=mapping)


@pytest.mark.parametrize("metric", ["forward", "backward", "parameters_grad"])
def test_plugin_statements_give_the_same_results(tmp_path, metric):
    generate(tmp_path / "data", steps=2, ranks=2, layers=2, seed=4)
    reference = run_msprobe(tmp_path / "data", tmp_path / "reference", micro_step=True, hash_seed=1)
    ours = api.run(tmp_path / "data", tmp_path / "ours", api.ParseOptions(), workers=2, input_format="dump").load.db
    for step, rank, tag in [(0, 0, "Module"), (1, 1, "input.0"), (3, 0, "layers.1")]:
        expected = plugin_results(reference, metric, step, rank, tag)
        assert expected["S7 step"] or step == 3  # the chosen views are not empty
        assert plugin_results(ours, metric, step, rank, tag) == expected


# Target ids (dump-format.md §8.4): every test above compares them too (diff with ids=True). These use files
# big enough for msprobe's flushes inside a file, and ranks that are procs (listed after the ranks, by pid).
FLUSHES = {True: [5000], False: [10000, 15000]}  # where the generated files below flush, per micro-step mode


@pytest.fixture(scope="module")
def big_files(tmp_path_factory) -> Path:
    """Files of about 16,600 rows, 3 micro-batches, one rank and two procs per step."""
    data = tmp_path_factory.mktemp("big") / "data"
    generate(data, steps=2, ranks=3, layers=12, micro_batches=3, seed=8)
    for step in ("step0", "step1"):
        (data / step / "rank1").rename(data / step / "proc10")
        (data / step / "rank2").rename(data / step / "proc5")  # before proc10: pids sort as numbers
    return data


@pytest.mark.parametrize("micro_step", [True, False])
def test_ids_match_the_reference_with_flushes_inside_files(big_files, tmp_path, micro_step):
    assert_same_as_reference(big_files, tmp_path, micro_step=micro_step, seed=9)
    shard_list = shards.list_shards(api.default_work(tmp_path / "ours") / "dump")
    assert [(path.name, flush_starts(shards.read_rows(path, SCHEMA)["key"])) for path in shard_list] == [
        (f"step{step}_rank{rank}.parquet", FLUSHES[micro_step]) for step in (0, 1) for rank in (0, 1, 2)
    ]


# Subsets (--steps, --ranks): msprobe given a DATA that holds only the selected directories (docs/user-guide.md).


def copy_selected(data: Path, root: Path, relatives: list[str]) -> Path:
    for relative in relatives:
        shutil.copytree(data / relative, root / relative)
    return root


@pytest.mark.parametrize("micro_step", [True, False])
def test_a_dump_subset_matches_the_reference_on_only_its_directories(tmp_path, micro_step):
    data = tmp_path / "data"
    generate(data, steps=4, ranks=3, layers=1, seed=6)
    (data / "step1" / "rank2").rename(data / "step1" / "proc9")  # rank 2 after the ranks 0 and 1, here as there
    chosen = ["step1/rank1", "step1/proc9", "step3/rank1", "step3/rank2"]
    reference = run_msprobe(copy_selected(data, tmp_path / "only", chosen), tmp_path / "ref", micro_step=micro_step)
    mode = "true" if micro_step else "false"
    ours = run_cli("data2db", "--data", data, "--db", tmp_path / "ours", "--micro_step", mode, "--steps", "1,3",
                   "--ranks", "1-2")  # fmt: skip
    assert ours.returncode == 0, ours.stderr
    compared = run_cli("diff", "--ids", reference, tmp_path / "ours" / "dump_data.trend.db")
    assert compared.returncode == 0, compared.stdout


@pytest.mark.parametrize("micro_step", [True, False])
def test_a_monitor_subset_matches_the_reference_on_only_its_files(tmp_path, micro_step):
    data, only = tmp_path / "data", tmp_path / "only"
    monitor_generate(data, ranks=3, steps=4, layers=1, step_count_per_record=2, seed=4)
    for run in sorted(path for path in data.iterdir() if "-rank0-" in path.name or "-rank2-" in path.name):
        (only / run.name).mkdir(parents=True)
        for csv_file in run.glob("*_2-3.csv"):
            shutil.copy2(csv_file, only / run.name / csv_file.name)
    reference = run_msprobe(only, tmp_path / "ref", micro_step=micro_step, input_format="monitor")
    mode = "true" if micro_step else "false"
    ours = run_cli("data2db", "--data", data, "--db", tmp_path / "ours", "--micro_step", mode, "--steps", "2-3",
                   "--ranks", "0,2")  # fmt: skip
    assert ours.returncode == 0, ours.stderr
    selected = "  selected steps 2-3, ranks 0,2; left out unread: 18 × monitor CSV file, 1 × run directory"
    assert selected in ours.stdout.splitlines()  # the 9 metrics' files of steps 0-1 of two ranks, and rank 1
    compared = run_cli("diff", reference, tmp_path / "ours" / "monitor_data.trend.db")  # ids: docs/migration.md
    assert compared.returncode == 0, compared.stdout
