"""Tags of a target name (docs/dump-format.md §8.7): a table of names and tags, compared as sets, plus rule order."""

from __future__ import annotations

import pytest

from trendconv.formats.dump.tags import tags_of


def parse(text: str) -> set[tuple[str, str]]:
    """'input.0/index, Module/default' -> {("input.0", "index"), ("Module", "default")}."""
    if not text:
        return set()
    return {tuple(item.strip().rsplit("/", 1)) for item in text.split(",")}


SPEC_TABLE = [
    ("Module.layer1.0.conv1.Conv2d.input.0", "input.0/index, Module/default, layer1.0/layer, conv1.Conv2d/module"),
    (
        "Module.testlayername.layer.1.blocks.1.conv2.Conv2d.input.2",
        "input.2/index, Module/default, layer.1/layer, blocks.1/layer, testlayername/module, conv2.Conv2d/module",
    ),
    (
        "Module.0.module.decoder.layers.3.mlp.MLP.output.1",
        "output.1/index, Module/default, layers.3/layer, module.decoder/module, mlp.MLP/module",
    ),
    ("Module.blocks.0.1.ffn.FFN.input.0", "input.0/index, Module/default, blocks.0/layer, ffn.FFN/module"),
    ("Module.a.1.b.c.2.d.input.0", "input.0/index, Module/default, a.1/layer, c.2/layer, b/module, d/module"),
    ("Module.layers.3.output.0", "output.0/index, Module/default, layers.3/layer"),
    (
        "Module.blocks.0.fsdp_wrapped_module.norm.1.WanLayerNorm.input.0",
        "input.0/index, Module/default, blocks.0/layer, norm.1/layer, fsdp_wrapped_module/module, WanLayerNorm/module",
    ),
    ("Functional.conv2d.input.0", "input.0/index, Functional.conv2d/function"),
    ("Tensor.__add__.output.0", "output.0/index, Tensor.__add__/function"),
    ("Cell.x.Y.output.0", "output.0/index, Cell/default, x.Y/module"),
    ("Module.fc.Linear.weight", "Linear.weight/index, Module/default, fc/module"),
    (
        "Module.conv1.Conv2d.parameters.weight",
        "parameters.weight/index, Module/default, parameters/default, conv1.Conv2d/module",
    ),
    (
        "Module.layers.0.attn.Attention.parameters.bias",
        "parameters.bias/index, Module/default, parameters/default, layers.0/layer, attn.Attention/module",
    ),
    (
        "Module.net.Net.parameters.mlp.0.weight",
        "0.weight/index, Module/default, parameters/default, net.Net.parameters.mlp/module",
    ),
    ("Module.x.Lin.parameters", "Lin.parameters/index, Module/default, parameters/default, x/module"),
    (
        "Module.parameters.0.P.output.0",
        "output.0/index, Module/default, parameters/default, parameters.0/layer, P/module",
    ),
    ("Torch.parameters.input.0", "input.0/index, parameters/default, Torch.parameters/function"),
    ("parameters.weight.x", "weight.x/index, parameters/default, parameters/function"),
    ("Functional.Module.x.input.0", "input.0/index, Module/default, Functional.x/module"),
    ("Module.parameters.weight", ""),
    ("Module.input.0", ""),
    ("a.b", ""),
]


@pytest.mark.parametrize(("name", "tags"), SPEC_TABLE)
def test_spec_table(name, tags):
    result = tags_of(name)
    assert set(result) == parse(tags)
    assert len(result) == len(set(result))  # no repeats


@pytest.mark.parametrize(
    ("name", "tags"),
    [
        # targets of the A1 and A2 example dumps (tests/conftest.py, tests/test_parse_stage.py)
        ("Module.net.Net.input.0", "input.0/index, Module/default, net.Net/module"),
        ("Functional.linear.output.0", "output.0/index, Functional.linear/function"),
        ("Module.net.Net.weight", "Net.weight/index, Module/default, net/module"),
        ("Module.m.M.w", "M.w/index, Module/default, m/module"),
        ("Module.m.M.parameters.w", "parameters.w/index, Module/default, parameters/default, m.M/module"),
        # prefix tests are exact-part tests
        ("Modulefoo.x.input.0", "input.0/index, Modulefoo.x/function"),
        ("module.x.input.0", "input.0/index, module.x/function"),
        ("Torch.xparameters.input.0", "input.0/index, Torch.xparameters/function"),
        # only Module/Cell parts before the last two: no tags at all
        ("Module.Cell.input.0", ""),
        ("Cell.parameters.x", ""),
        ("Module", ""),
        ("", ""),
        # a leading digit run
        ("Module.0.1.x.input.0", "input.0/index, Module/default, x/module"),
        ("Module.7.input.0", "input.0/index, Module/default"),
        # Module twice and Cell: each default once
        ("Module.a.Module.b.input.0", "input.0/index, Module/default, a.b/module"),
        ("Module.a.Cell.b.input.0", "input.0/index, Module/default, Cell/default, a.b/module"),
    ],
)
def test_more_names(name, tags):
    result = tags_of(name)
    assert set(result) == parse(tags)
    assert len(result) == len(set(result))


@pytest.mark.parametrize(
    ("name", "ordered"),
    [
        (
            "Module.conv1.Conv2d.parameters.weight",
            [
                ("parameters.weight", "index"),
                ("parameters", "default"),
                ("Module", "default"),
                ("conv1.Conv2d", "module"),
            ],
        ),
        (
            "Module.a.1.b.c.2.d.input.0",
            [
                ("input.0", "index"),
                ("Module", "default"),
                ("a.1", "layer"),
                ("c.2", "layer"),
                ("b", "module"),
                ("d", "module"),
            ],
        ),
        (
            "Module.testlayername.layer.1.blocks.1.conv2.Conv2d.input.2",
            [
                ("input.2", "index"),
                ("Module", "default"),
                ("layer.1", "layer"),
                ("testlayername", "module"),
                ("blocks.1", "layer"),
                ("conv2.Conv2d", "module"),
            ],
        ),
        (
            "Torch.parameters.input.0",
            [("input.0", "index"), ("parameters", "default"), ("Torch.parameters", "function")],
        ),
        ("Functional.Module.x.input.0", [("input.0", "index"), ("Module", "default"), ("Functional.x", "module")]),
    ],
)
def test_rule_order(name, ordered):
    assert tags_of(name) == ordered
