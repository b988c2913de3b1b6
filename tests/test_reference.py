"""Logical equivalence with msprobe data2db (mindstudio-probe 26.2.0) on hand-made and random dumps.

Every table is compared by names (ids may differ; floats exactly; NULL = NULL) with trendconv.diff.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import A1_CONSTRUCT, A1_DATA, write_file_set
from hypothesis import HealthCheck, given, settings
from random_dumps import dump_trees, write_tree
from reference import run_msprobe
from test_parse_stage import A2_CONSTRUCT, A2_DATA

from trendconv import api
from trendconv.diff import diff_databases


def assert_same_as_reference(data: Path, root: Path, *, micro_step: bool, mapping: Path | None = None, seed=0):
    reference = run_msprobe(data, root / "reference", micro_step=micro_step, mapping=mapping, hash_seed=seed)
    options = api.ParseOptions(micro_step=micro_step, mapping=api.load_mapping(mapping))
    ours = api.run(data, root / "ours", options, workers=1).load.db
    report = diff_databases(reference, ours)
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
