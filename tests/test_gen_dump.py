"""The synthetic dump generator (datagen/dump.py): determinism, layout and the msprobe file format."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from datagen import dump as gen_dump
from datagen.dump import SHAPES, GenSummary, generate


def files_of(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def load(path: Path):
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def run_2x2(tmp_path_factory) -> tuple[Path, GenSummary]:
    out = tmp_path_factory.mktemp("gen") / "data"
    return out, generate(out, steps=2, ranks=2, layers=1)


def test_layout_and_summary(run_2x2):
    out, summary = run_2x2
    files = files_of(out)
    assert list(files) == [
        "step0/rank0/construct.json",
        "step0/rank0/dump.json",
        "step0/rank1/construct.json",
        "step0/rank1/dump.json",
        "step1/rank0/construct.json",
        "step1/rank0/dump.json",
        "step1/rank1/construct.json",
        "step1/rank1/dump.json",
    ]
    assert summary == GenSummary(files=8, total_bytes=sum(len(b) for b in files.values()))


def test_procs_layout(tmp_path):
    generate(tmp_path, steps=2, ranks=2, layers=1, procs=True)
    assert list(files_of(tmp_path)) == [
        "step0/proc2016/construct.json",
        "step0/proc2016/dump.json",
        "step0/proc2053/construct.json",
        "step0/proc2053/dump.json",
        "step1/proc2016/construct.json",
        "step1/proc2016/dump.json",
        "step1/proc2053/construct.json",
        "step1/proc2053/dump.json",
    ]


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path, run_2x2):
    out, _ = run_2x2
    generate(tmp_path / "again", steps=2, ranks=2, layers=1)
    generate(tmp_path / "seed1", steps=2, ranks=2, layers=1, seed=1)
    reference = files_of(out)
    assert files_of(tmp_path / "again") == reference
    other = files_of(tmp_path / "seed1")
    assert list(other) == list(reference)
    assert other["step0/rank0/dump.json"] != reference["step0/rank0/dump.json"]
    # ranks and steps differ from each other too
    assert reference["step0/rank0/dump.json"] != reference["step0/rank1/dump.json"]
    assert reference["step0/rank0/dump.json"] != reference["step1/rank0/dump.json"]


def test_dump_top_level_and_bare_tokens(run_2x2):
    out, _ = run_2x2
    text = (out / "step0/rank0/dump.json").read_text()
    dump = json.loads(text)
    assert [k for k in dump if k != "data"] == ["task", "level", "framework", "dump_data_dir"]
    assert (dump["task"], dump["level"], dump["framework"]) == ("statistics", "mix", "pytorch")
    assert text.startswith('{\n "task": "statistics",\n')  # json.dump(indent=1)
    assert re.search(r'"Mean": NaN\b', text)
    assert re.search(r'"Min": -Infinity\b', text)
    assert re.search(r'"Norm": Infinity\b', text)
    assert '"Max": " 3.5 "' in text


def test_megatron_construct(tmp_path):
    generate(tmp_path, steps=1, ranks=1, layers=1, micro_batches=3)
    construct = load(tmp_path / "step0/rank0/construct.json")
    assert next(iter(construct)) == "megatron_micro_step_number"
    assert construct.pop("megatron_micro_step_number") == 3
    assert all(isinstance(v, list) and len(v) == 2 for v in construct.values())
    assert construct["Module.0.module.module.GPTModel.forward.0"] == [None, 0]
    assert construct["Module.0.module.module.GPTModel.forward.2"] == [None, 2]
    assert construct["optimizer"] == [None, 2]
    assert construct["Torch.clone.0.forward"] == ["optimizer", 2]


def test_plain_construct(tmp_path):
    generate(tmp_path, steps=1, ranks=1, layers=1, construct="plain")
    construct = load(tmp_path / "step0/rank0/construct.json")
    assert "megatron_micro_step_number" not in construct
    assert all(v is None or isinstance(v, str) for v in construct.values())
    assert construct["Module.0.module.module.GPTModel.forward.1"] is None
    gpt = "Module.0.module.module.GPTModel.backward.0"
    assert construct[gpt] is None
    assert construct["Module.0.module.module.output_layer.ColumnParallelLinear.backward.0"] == gpt


def test_construct_covers_dump_except_parameter_grads(run_2x2):
    out, _ = run_2x2
    data = load(out / "step0/rank0/dump.json")["data"]
    construct = load(out / "step0/rank0/construct.json")
    grads = [k for k in data if ".parameters_grad." in k]
    assert grads and not any("parameters_grad" in k for k in construct)
    assert [k for k in data if k not in construct and k not in grads] == []
    assert {k.rsplit(".", 1)[1] for k in grads} == {"0", "1"}  # one per micro-batch
    entry = data["Module.0.module.module.decoder.final_norm.RMSNorm.parameters_grad.1"]
    assert list(entry) == ["weight"] and len(entry["weight"]) == 1 and entry["weight"][0]["type"] == "torch.Tensor"
    for key in data:  # every backward key has its forward twin
        if key.endswith(".backward") or ".backward." in key:
            assert key.replace(".backward", ".forward") in data


def test_entry_shapes(run_2x2):
    out, _ = run_2x2
    data = load(out / "step0/rank0/dump.json")["data"]
    qkv = data["Module.0.module.module.decoder.layers.0.self_attention.linear_qkv.ColumnParallelLinear.forward.0"]
    assert list(qkv) == ["input_args", "input_kwargs", "output", "parameters"]
    assert set(qkv["parameters"]) == {"weight", "bias"}
    assert qkv["parameters"]["weight"]["dtype"] == "torch.bfloat16"
    assert list(data["Functional.linear.0.backward"]) == ["input", "output"]
    assert "is_recompute" not in data["Functional.linear.0.forward"]  # the 26.2.0 dumper writes none
    assert data["Tensor.to.0.forward"]["is_recompute"] is False


def test_recompute_and_old_grad_counter(tmp_path):
    generate(tmp_path, steps=2, ranks=1, layers=2, recompute=True, old_grad_counter=True)
    data = load(tmp_path / "step1/rank0/dump.json")["data"]
    layer0 = "Module.0.module.module.decoder.layers.0.TransformerLayer.forward"
    assert [data[f"{layer0}.{n}"]["is_recompute"] for n in range(4)] == [False, True, False, True]
    assert f"{layer0}.4" not in data
    assert {k.rsplit(".", 1)[1] for k in data if ".parameters_grad." in k} == {"2", "3"}


def test_mindspore(tmp_path):
    generate(tmp_path, steps=1, ranks=1, layers=1, framework="mindspore")
    text = (tmp_path / "step0/rank0/dump.json").read_text()
    data = json.loads(text)["data"]
    assert json.loads(text)["framework"] == "mindspore"
    assert "Cell.network_with_loss.module.GPTModel.forward.0" in data
    assert not any(k.startswith("Module.") for k in data)
    assert '"type": "mindspore.Tensor"' in text and '"dtype": "BFloat16"' in text and '"dtype": "Int32"' in text
    construct = load(tmp_path / "step0/rank0/construct.json")
    assert construct["Tensor.to.0.forward"] == ["", 0]
    assert construct["Cell.network_with_loss.module.GPTModel.forward.0"] == [None, 0]


def test_cli_matches_library(tmp_path):
    gen_dump.main(["--out", str(tmp_path / "cli"), "--steps", "1", "--ranks", "1", "--layers", "1", "--seed", "7"])
    generate(tmp_path / "lib", steps=1, ranks=1, layers=1, seed=7)
    assert files_of(tmp_path / "cli") == files_of(tmp_path / "lib")


def test_wide_shape_long_keys_many_non_tensors_indent_4(tmp_path):
    generate(tmp_path, steps=1, ranks=2, layers=1, **SHAPES["wide"])
    text = (tmp_path / "step0/rank0/dump.json").read_text()
    assert text.startswith('{\n    "task": "statistics",\n    "level": "mix",\n')
    data = json.loads(text)["data"]
    wrapped = "_fsdp_wrapped_module._checkpoint_wrapped_module"
    layer = f"Module.0.module.module._fsdp_wrapped_module.decoder.layers.0.{wrapped}"
    assert f"{layer}.mlp.MLP.forward.0" in data
    assert f"{layer}.mlp.linear_fc1.ColumnParallelLinear.parameters_grad.0" in data
    assert "Module.0.module.module.GPTModel.forward.0" in data  # the root is not wrapped
    kwargs = data["Functional.linear.1.forward"]["input_kwargs"]
    assert list(kwargs) == [
        *("dim", "alpha", "inplace", "reduction", "out", "index", "ellipsis", "dtype", "size", "device"),
        *("memory_format", "group"),
    ]
    assert [kwargs["dim"], kwargs["out"], kwargs["group"]] == [
        {"type": "float", "value": 0.5},
        {"type": "slice", "value": [0, None, 2]},
        {"type": "torch.distributed.ReduceOp", "value": "RedOpType.SUM"},
    ]
    assert data["Functional.linear.0.forward"]["input_kwargs"]["group"] == {
        "type": "torch.ProcessGroup",
        "group_ranks": [0, 1],
        "group_id": "5ef3a0c1",
    }
    assert data["Tensor.to.0.forward"]["input_kwargs"]["non_blocking"] == {"type": "bool", "value": True}
    construct = load(tmp_path / "step0/rank0/construct.json")
    assert construct[f"{layer}.mlp.MLP.forward.0"] == [f"{layer}.TransformerLayer.forward.0", 0]


def test_narrow_shape_level_l1_small_tensors_one_line(tmp_path):
    generate(tmp_path, steps=1, ranks=1, layers=1, **SHAPES["narrow"])
    text = (tmp_path / "step0/rank0/dump.json").read_text()
    assert "\n" not in text and text.startswith('{"task": "statistics", "level": "L1", "framework": "pytorch", ')
    data = json.loads(text)["data"]
    assert [key for key in data if key.startswith("Module.") or "parameters_grad" in key] == []
    assert "Functional.linear.0.backward" in data and "Torch.clone.0.forward" in data
    assert data["Functional.linear.0.forward"]["input_args"][0]["shape"] == [8, 1, 16]
    assert (tmp_path / "step0/rank0/construct.json").read_text() == "{}"


def test_indent_and_level_options(tmp_path):
    generate(tmp_path / "two", steps=1, ranks=1, layers=1, indent=2, level="L1")
    assert (
        (tmp_path / "two/step0/rank0/dump.json").read_text().startswith('{\n  "task": "statistics",\n  "level": "L1"')
    )


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_cli_shape_matches_library(tmp_path, shape):
    gen_dump.main(["--out", str(tmp_path / "cli"), "--steps", "1", "--ranks", "1", "--layers", "1", "--shape", shape])
    generate(tmp_path / "lib", steps=1, ranks=1, layers=1, **SHAPES[shape])
    assert files_of(tmp_path / "cli") == files_of(tmp_path / "lib")


def test_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError):
        generate(tmp_path, steps=1, ranks=1, layers=0)
    with pytest.raises(ValueError):
        generate(tmp_path, steps=1, ranks=1, layers=1, framework="jax")
    for bad in ({"level": "L0"}, {"indent": 3}, {"non_tensors": -1}):
        with pytest.raises(ValueError, match="^unsupported level/indent/non_tensors: "):
            generate(tmp_path, steps=1, ranks=1, layers=1, **bad)
