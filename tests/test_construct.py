"""construct.json (docs/dump-format.md §3.2-§3.4): Megatron unpacking, parent table, micro steps, renumbering.

Expected values come from the rules of docs/dump-format.md and msprobe's behaviour. Cycles and list/object parents
are data errors in trendconv (the reference crashes with RecursionError/TypeError).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import A1_CONSTRUCT

from trendconv.errors import DataError
from trendconv.formats.dump.construct import micro_step_count, micro_steps, parent_table, renumber, unpack_construct

PATH = Path("/d/step0/rank0/construct.json")
GPT = "Module.0.module.module.GPTModel"
LAYER = "Module.0.module.module.decoder.layers.0.TransformerLayer"


# ---------------------------------------------------------------- docs/dump-format.md §3.2 Megatron variant


def test_megatron_unpack_spec_example():
    obj = {
        "megatron_micro_step_number": 2,
        f"{GPT}.forward.0": [None, 0],
        "Functional.linear.0.forward": [f"{LAYER}.forward.0", 0],
        f"{GPT}.forward.1": [None, 1],
        "optimizer": [None, 1],
        "Torch.clone.0.forward": ["optimizer", 1],
    }
    result = unpack_construct(obj, PATH)
    assert result == {
        f"{GPT}.forward.0": None,
        "Functional.linear.0.forward": f"{LAYER}.forward.0",
        f"{GPT}.forward.1": None,
        "optimizer": None,
        "Torch.clone.0.forward": "optimizer",
    }
    assert list(result) == [
        f"{GPT}.forward.0",
        "Functional.linear.0.forward",
        f"{GPT}.forward.1",
        "optimizer",
        "Torch.clone.0.forward",
    ]


def test_megatron_non_list_values_stay():
    obj = {"a.forward.0": None, "megatron_micro_step_number": 1, "b.0.forward": "a.forward.0", "c.0.forward": 3}
    assert unpack_construct(obj, PATH) == {"a.forward.0": None, "b.0.forward": "a.forward.0", "c.0.forward": 3}


def test_megatron_micro_step_numbers_are_discarded():
    obj = {
        "megatron_micro_step_number": 2,
        "Module.m.M.forward.0": [None, 1],
        "Module.m.M.forward.1": [None, 0],
        "Functional.relu.0.forward": ["Module.m.M.forward.1", 7],
    }
    assert micro_steps(unpack_construct(obj, PATH), PATH) == {
        "Module.m.M.forward.0": 0,
        "Module.m.M.forward.1": 1,
        "Functional.relu.0.forward": 1,
    }


def test_without_megatron_key_lists_are_not_unpacked():
    obj = {"Module.a.forward.0": [None, 0], "x": "y"}
    assert unpack_construct(obj, PATH) == {"Module.a.forward.0": [None, 0], "x": "y"}


@pytest.mark.parametrize(("value", "length"), [([None, 0, 1], 3), ([], 0), (["a"], 1)])
def test_megatron_list_of_wrong_length(value, length):
    obj = {"megatron_micro_step_number": 1, "Module.a.forward.0": [None, 0], "Functional.x.0.forward": value}
    with pytest.raises(DataError) as info:
        unpack_construct(obj, PATH)
    assert str(info.value) == (
        f"{PATH}: key 'Functional.x.0.forward': expected [parent, micro_step], got a list of {length}"
    )


@pytest.mark.parametrize(("obj", "kind"), [([], "a list"), (None, "null"), ("x", "a string"), (3, "a number")])
def test_construct_top_level_must_be_an_object(obj, kind):
    with pytest.raises(DataError) as info:
        unpack_construct(obj, PATH)
    assert str(info.value) == f"{PATH}: top level is {kind}, expected an object"


# ---------------------------------------------------------------- docs/dump-format.md §3.3 pass 1


def test_parent_table_pass_one():
    construct = {
        "Tensor.to.0.forward": None,
        "Module.a.A.forward.0": None,
        "Module.a.A.backward.0": None,
        "Cell.b.B.forward.0": None,
        "Functional.relu.0.forward": "Module.a.A.forward.0",
        "clip_grad": None,
        "optimizer": None,
        "Modulefoo": None,
        "optimizer_x": None,
        "Tensor.__add__.0.forward": "",
        "Module.c.forward": 3,
        "Module.x.backward_hook.forward.0": None,
        "Torch.clone.0.forward": "optimizer",
    }
    assert parent_table(construct) == {
        "Module.a.A.forward.0": 0,
        "Module.a.A.backward.0": None,
        "Cell.b.B.forward.0": 1,
        "Functional.relu.0.forward": "Module.a.A.forward.0",
        "optimizer": 2,
        "Modulefoo": 3,
        "optimizer_x": 4,
        "Tensor.__add__.0.forward": "",
        "Module.c.forward": 3,
        "Module.x.backward_hook.forward.0": None,  # `.backward` anywhere: substring test
        "Torch.clone.0.forward": "optimizer",
    }


# ---------------------------------------------------------------- docs/dump-format.md §3.3 pass 2


MEGATRON_CONSTRUCT = {
    "megatron_micro_step_number": 2,
    f"{GPT}.forward.0": [None, 0],
    f"{LAYER}.forward.0": [f"{GPT}.forward.0", 0],
    "Functional.linear.0.forward": [f"{LAYER}.forward.0", 0],
    "Functional.linear.1.forward": [f"{LAYER}.forward.0", 0],
    f"{GPT}.forward.1": [None, 1],
    f"{LAYER}.forward.1": [f"{GPT}.forward.1", 1],
    "Functional.linear.2.forward": [f"{LAYER}.forward.1", 1],
    "Functional.linear.3.forward": [f"{LAYER}.forward.1", 1],
    "Torch.sqrt.0.forward": [None, 1],
    f"{LAYER}.backward.1": [None, 1],
    "Functional.linear.3.backward": [f"{LAYER}.backward.1", 1],
    "Functional.linear.2.backward": [f"{LAYER}.backward.1", 1],
    "optimizer": [None, 1],
    "Torch.clone.0.forward": ["optimizer", 1],
}


def test_megatron_example_micro_steps():
    steps = micro_steps(unpack_construct(MEGATRON_CONSTRUCT, PATH), PATH)
    assert steps == {
        f"{GPT}.forward.0": 0,
        f"{LAYER}.forward.0": 0,
        "Functional.linear.0.forward": 0,
        "Functional.linear.1.forward": 0,
        f"{GPT}.forward.1": 1,
        f"{LAYER}.forward.1": 1,
        "Functional.linear.2.forward": 1,
        "Functional.linear.3.forward": 1,
        f"{LAYER}.backward.1": 1,
        "Functional.linear.3.backward": 1,
        "Functional.linear.2.backward": 1,
        "optimizer": 2,
        "Torch.clone.0.forward": 2,
    }
    assert "Torch.sqrt.0.forward" not in steps
    assert micro_step_count(steps) == 3


def test_megatron_example_renumbering():
    names = renumber(micro_steps(unpack_construct(MEGATRON_CONSTRUCT, PATH), PATH))
    assert names[f"{GPT}.forward.1"] == f"{GPT}.forward.0"
    assert names["Functional.linear.2.forward"] == "Functional.linear.0.forward"
    assert names["Functional.linear.3.forward"] == "Functional.linear.1.forward"
    assert names["Functional.linear.3.backward"] == "Functional.linear.1.backward"
    assert names["Functional.linear.2.backward"] == "Functional.linear.0.backward"
    assert names[f"{LAYER}.forward.1"] == f"{LAYER}.forward.0"
    assert names[f"{LAYER}.backward.1"] == f"{LAYER}.backward.0"
    assert names["Functional.linear.1.forward"] == "Functional.linear.1.forward"
    assert names["optimizer"] == "optimizer"
    assert names["Torch.clone.0.forward"] == "Torch.clone.0.forward"
    assert list(names) == list(micro_steps(unpack_construct(MEGATRON_CONSTRUCT, PATH), PATH))


def test_resnet_excerpt_micro_steps():
    construct = {
        "Tensor.to.0.forward": None,
        "Functional.conv2d.0.forward": "Module.conv1.Conv2d.forward.0",
        "Module.conv1.Conv2d.forward.0": None,
        "Module.layer1.Sequential.forward.0": None,
        "Module.layer1.0.Bottleneck.forward.0": "Module.layer1.Sequential.forward.0",
        "Functional.relu.1.forward": "Module.layer1.0.relu.ReLU.forward.0",
        "Functional.cross_entropy.0.forward": None,
        "Module.fc.Linear.backward.0": None,
        "Functional.linear.0.backward": "Module.fc.Linear.backward.0",
        "Module.layer4.2.relu.ReLU.backward.2": "Module.layer4.2.Bottleneck.backward.0",
        "optimizer": None,
        "Torch.clone.0.forward": "optimizer",
    }
    steps = micro_steps(construct, PATH)
    assert steps == {
        "Functional.conv2d.0.forward": 0,  # parent listed after the child
        "Module.conv1.Conv2d.forward.0": 0,
        "Module.layer1.Sequential.forward.0": 1,
        "Module.layer1.0.Bottleneck.forward.0": 1,
        "optimizer": 2,
        "Torch.clone.0.forward": 2,
    }
    assert list(steps) == [
        "Functional.conv2d.0.forward",
        "Module.conv1.Conv2d.forward.0",
        "Module.layer1.Sequential.forward.0",
        "Module.layer1.0.Bottleneck.forward.0",
        "optimizer",
        "Torch.clone.0.forward",
    ]
    assert micro_step_count(steps) == 3


def test_backward_takes_forward_twin_and_never_its_own_parent():
    construct = {
        "Module.a.A.forward.0": None,
        "Module.b.B.forward.0": None,
        "Module.a.A.backward.0": "Module.b.B.backward.0",  # own parent points elsewhere
        "Module.b.B.backward.0": None,
        "Module.c.C.backward.0": "Module.a.A.backward.0",  # forward twin missing
        "Functional.y.0.backward": 5,  # numeric own value, twin missing
        "Functional.z.0.backward": [1, 2],  # a list is never reached: no error
    }
    assert micro_steps(construct, PATH) == {
        "Module.a.A.forward.0": 0,
        "Module.b.B.forward.0": 1,
        "Module.a.A.backward.0": 0,
        "Module.b.B.backward.0": 1,
    }


def test_a1_construct():
    steps = micro_steps(A1_CONSTRUCT, PATH)
    assert steps == {
        "Module.net.Net.forward.0": 0,
        "Functional.linear.0.forward": 0,
        "Module.net.Net.forward.1": 1,
        "Functional.linear.1.forward": 1,
        "Module.net.Net.backward.0": 0,
        "Functional.linear.0.backward": 0,
    }
    assert micro_step_count(steps) == 2
    assert renumber(steps) == {
        "Module.net.Net.forward.0": "Module.net.Net.forward.0",
        "Functional.linear.0.forward": "Functional.linear.0.forward",
        "Module.net.Net.forward.1": "Module.net.Net.forward.0",
        "Functional.linear.1.forward": "Functional.linear.0.forward",
        "Module.net.Net.backward.0": "Module.net.Net.backward.0",
        "Functional.linear.0.backward": "Functional.linear.0.backward",
    }


def test_a2_construct():
    construct = {
        "Module.m.M.forward.0": None,
        "Module.m.M.forward.1": None,
        "Functional.relu.3.forward": "Module.m.M.forward.1",
    }
    steps = micro_steps(construct, PATH)
    assert steps == {"Module.m.M.forward.0": 0, "Module.m.M.forward.1": 1, "Functional.relu.3.forward": 1}
    assert renumber(steps) == {
        "Module.m.M.forward.0": "Module.m.M.forward.0",
        "Module.m.M.forward.1": "Module.m.M.forward.0",
        "Functional.relu.3.forward": "Functional.relu.0.forward",
    }


@pytest.mark.parametrize(
    ("parent", "expected"),
    [
        (3, 3),
        (0, 0),
        (True, 1),
        (False, 0),
        (-2, -2),
    ],
)
def test_numeric_parent_is_the_micro_step(parent, expected):
    steps = micro_steps({"Module.layer1.forward": parent}, PATH)
    assert steps == {"Module.layer1.forward": expected}
    assert type(steps["Module.layer1.forward"]) is int


def test_numeric_parent_reached_through_a_chain():
    construct = {"Functional.relu.0.forward": "Module.layer1.forward", "Module.layer1.forward": 3}
    steps = micro_steps(construct, PATH)
    assert steps == {"Functional.relu.0.forward": 3, "Module.layer1.forward": 3}
    assert micro_step_count(steps) == 4


@pytest.mark.parametrize("parent", [2.5, 2.0, "", "Module.missing.forward.0", "3"])
def test_parent_without_micro_step(parent):
    assert micro_steps({"Module.layer1.forward": parent}, PATH) == {}


def test_chains_ending_outside_a_root_are_absent():
    construct = {
        "Tensor.to.0.forward": None,
        "Functional.a.0.forward": "Tensor.to.0.forward",  # ends at a non-root null
        "Tensor.__add__.0.forward": "",  # MindSpore "" parent
        "clip_grad": None,
        "Torch.norm.0.forward": "clip_grad",
        "Functional.b.0.forward": "Module.gone.forward.0",  # missing name
        "Module.m.forward.0": None,
        "Functional.c.0.forward": "Module.m.forward.0",
    }
    assert micro_steps(construct, PATH) == {"Module.m.forward.0": 0, "Functional.c.0.forward": 0}


def test_level_l1_empty_construct():
    steps = micro_steps({}, PATH)
    assert steps == {}
    assert micro_step_count(steps) == 1
    assert renumber(steps) == {}


def test_micro_step_count():
    assert micro_step_count({"a": 0, "b": 4, "c": 2}) == 5
    assert micro_step_count({"a": 0}) == 1


A, B = "Module.a.forward.0", "Module.b.forward.0"


@pytest.mark.parametrize(
    ("construct", "at"),
    [
        ({A: B, B: A}, A),
        ({A: A}, A),
        ({"Functional.x.0.forward": A, A: A}, A),
        ({"Functional.x.0.forward": B, B: A, A: B}, B),
    ],
)
def test_cycle_is_a_data_error(construct, at):
    with pytest.raises(DataError) as info:
        micro_steps(construct, PATH)
    assert str(info.value) == f"{PATH}: cycle in the parent chain at key {at!r}"


def test_cycle_through_backward_rewrite_is_a_data_error():
    # Functional.x.0.backward's parent resolves through its rewritten twin, which is in a cycle.
    construct = {"Functional.x.0.forward": "Functional.x.0.backward"}
    with pytest.raises(DataError) as info:
        micro_steps(construct, PATH)
    assert str(info.value) == f"{PATH}: cycle in the parent chain at key 'Functional.x.0.forward'"


@pytest.mark.parametrize(
    ("parent", "shown"),
    [
        (["Module.a.forward.0", 0], "a list (['Module.a.forward.0', 0])"),
        ({"p": 1}, "an object ({'p': 1})"),
    ],
)
def test_list_or_object_parent_without_megatron_key(parent, shown):
    construct = {"Module.a.forward.0": None, "Functional.relu.0.forward": parent}
    with pytest.raises(DataError) as info:
        micro_steps(construct, PATH)
    assert str(info.value) == f"{PATH}: a parent is {shown}; expected a name or null"


def test_deep_chain_resolves_without_recursion():
    # trendconv resolves iteratively (the reference would raise RecursionError past ~1000 levels).
    construct = {"Module.root.forward.0": None}
    for i in range(3000):
        construct[f"Module.n{i}.forward.0"] = f"Module.n{i - 1}.forward.0" if i else "Module.root.forward.0"
    steps = micro_steps(construct, PATH)
    assert len(steps) == 3001
    assert set(steps.values()) == {0}


# ---------------------------------------------------------------- docs/dump-format.md §3.4 renumbering


def test_resnet_layer1_micro_step_renumbering():
    group4 = [
        "Module.layer1.Sequential.forward.0",
        "Module.layer1.0.Bottleneck.forward.0",
        "Module.layer1.0.conv1.Conv2d.forward.0",
        "Functional.conv2d.1.forward",
        "Module.layer1.0.relu.ReLU.forward.0",
        "Functional.relu.1.forward",
        "Module.layer1.0.relu.ReLU.forward.1",
        "Functional.relu.2.forward",
        "Module.layer1.0.relu.ReLU.forward.2",
        "Functional.relu.3.forward",
    ]
    steps = {key: 4 for key in group4}
    steps["Module.layer2.Sequential.forward.0"] = 5
    steps["Functional.relu.10.forward"] = 5
    assert renumber(steps) == {
        "Module.layer1.Sequential.forward.0": "Module.layer1.Sequential.forward.0",
        "Module.layer1.0.Bottleneck.forward.0": "Module.layer1.0.Bottleneck.forward.0",
        "Module.layer1.0.conv1.Conv2d.forward.0": "Module.layer1.0.conv1.Conv2d.forward.0",
        "Functional.conv2d.1.forward": "Functional.conv2d.0.forward",
        "Module.layer1.0.relu.ReLU.forward.0": "Module.layer1.0.relu.ReLU.forward.0",
        "Functional.relu.1.forward": "Functional.relu.0.forward",
        "Module.layer1.0.relu.ReLU.forward.1": "Module.layer1.0.relu.ReLU.forward.1",
        "Functional.relu.2.forward": "Functional.relu.1.forward",
        "Module.layer1.0.relu.ReLU.forward.2": "Module.layer1.0.relu.ReLU.forward.2",
        "Functional.relu.3.forward": "Functional.relu.2.forward",
        "Module.layer2.Sequential.forward.0": "Module.layer2.Sequential.forward.0",
        "Functional.relu.10.forward": "Functional.relu.0.forward",
    }


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        ({"Module.a.A.forward.7": 0}, {"Module.a.A.forward.7": "Module.a.A.forward.0"}),
        ({"Functional.relu.7.forward": 2}, {"Functional.relu.7.forward": "Functional.relu.0.forward"}),
        ({"optimizer": 2, "Module.x.forward": 2}, {"optimizer": "optimizer", "Module.x.forward": "Module.x.forward"}),
        # ordinal order, not file order; numeric, not string, comparison
        (
            {"F.relu.10.forward": 0, "F.relu.9.forward": 0, "F.relu.2.forward": 0},
            {"F.relu.10.forward": "F.relu.2.forward", "F.relu.9.forward": "F.relu.1.forward",
             "F.relu.2.forward": "F.relu.0.forward"},
        ),
        # equal ordinals keep M's order (stable sort); the new index goes where the old number was
        (
            {"Module.a.forward.1": 0, "Module.a.forward.01": 0},
            {"Module.a.forward.1": "Module.a.forward.0", "Module.a.forward.01": "Module.a.forward.1"},
        ),
        # each micro step is its own group
        (
            {"Module.a.forward.3": 0, "Module.a.forward.5": 1},
            {"Module.a.forward.3": "Module.a.forward.0", "Module.a.forward.5": "Module.a.forward.0"},
        ),
        # forward and backward are different families
        (
            {"Functional.relu.4.forward": 0, "Functional.relu.6.backward": 0},
            {"Functional.relu.4.forward": "Functional.relu.0.forward",
             "Functional.relu.6.backward": "Functional.relu.0.backward"},
        ),
        # API style X.y.<n>.forward and module style X.y.forward.<n> share the family X.y.forward
        (
            {"Module.a.forward.3": 0, "Module.a.0.forward": 0},
            {"Module.a.forward.3": "Module.a.forward.1", "Module.a.0.forward": "Module.a.0.forward"},
        ),
        # a number in the middle of the path is not an ordinal when the last part is one
        (
            {"Module.layers.5.Block.forward.2": 0, "Module.layers.6.Block.forward.3": 0},
            {"Module.layers.5.Block.forward.2": "Module.layers.5.Block.forward.0",
             "Module.layers.6.Block.forward.3": "Module.layers.6.Block.forward.0"},
        ),
        # second-to-last digits, any last part
        ({"a.3.b": 0, "a.1.b": 0}, {"a.3.b": "a.1.b", "a.1.b": "a.0.b"}),
    ],
)  # fmt: skip
def test_renumber_rules(steps, expected):
    result = renumber(steps)
    assert result == expected
    assert list(result) == list(steps)
