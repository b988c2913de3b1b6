"""Hypothesis strategies for small random msprobe dumps that exercise the rules and quirks of docs/dump-format.md.

They only make inputs on which the reference converter neither crashes nor differs from us on purpose
(no null argument lists, no duplicate step numbers, ...), so any difference found is a bug.
"""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import strategies as st

STAT_VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.integers(min_value=-(10**12), max_value=10**12),
    st.sampled_from(["inf", "-Infinity", "nan", " 3.5 ", "1_000", "abc", "0x10", "", "1e12"]),
    st.booleans(),
    st.none(),
    st.just([1, 2]),
)
DTYPES = st.sampled_from(
    ["torch.float32", "torch.bfloat16", "torch.float16", "Float32", "BFloat16", "torch.int64", ["torch.float32"]]
)
TYPES = st.sampled_from(
    ["torch.Tensor", "torch.Tensor", "mindspore.Tensor", "torch.distributed.tensor.DTensor", {"t": 1}]
)


@st.composite
def tensors(draw):
    tensor = {"type": draw(TYPES), "dtype": draw(DTYPES), "shape": [2]}
    for stat in draw(st.lists(st.sampled_from(["Max", "Min", "Mean", "Norm"]), unique=True, min_size=2)):
        tensor[stat] = draw(STAT_VALUES)
    return tensor


ITEMS = st.one_of(
    tensors(), tensors(), st.none(), st.just({"type": "int", "value": 2}), st.lists(tensors(), max_size=2)
)
MODULES = st.sampled_from(["Module.a.A", "Module.b.B", "Module.a.1.C", "Cell.x.Y", "Module.net.parameters.P"])
APIS = st.sampled_from(["Functional.linear", "Tensor.add", "Torch.matmul"])


@st.composite
def entries(draw, kind: str):
    if kind == "forward":
        entry = {"input_args": draw(st.lists(ITEMS, max_size=3)), "output": draw(st.lists(ITEMS, max_size=2))}
        if draw(st.booleans()):
            entry["parameters"] = {"weight": draw(st.one_of(tensors(), st.lists(tensors(), max_size=1)))}
        if draw(st.booleans()):
            entry["is_recompute"] = draw(st.booleans())
        return entry
    if kind == "backward":
        return {"input": draw(st.lists(ITEMS, max_size=2)), "output": draw(st.lists(ITEMS, max_size=2))}
    return {"weight": [draw(tensors())], "bias": draw(tensors())}


@st.composite
def file_sets(draw):
    """(data, construct) of one dump.json/construct.json pair."""
    data, construct = {}, {}
    roots = []
    for _ in range(draw(st.integers(1, 6))):
        module = draw(MODULES)
        count = sum(1 for key in data if key.startswith(module + ".forward."))
        key = f"{module}.forward.{count}"
        parent = draw(st.sampled_from([None, *roots])) if roots else None
        data[key], construct[key] = draw(entries("forward")), parent
        roots.append(key)
        for _ in range(draw(st.integers(0, 2))):
            api = draw(APIS)
            number = draw(st.integers(0, 4))
            api_key = f"{api}.{number}.forward"
            data[api_key] = draw(entries("forward"))
            construct[api_key] = draw(st.sampled_from([key, key, None, ""]))
        if draw(st.booleans()):
            backward = f"{module}.backward.{count}"
            data[backward], construct[backward] = draw(entries("backward")), None
        if draw(st.booleans()):
            data[f"{module}.parameters_grad.{draw(st.integers(0, 2))}"] = draw(entries("grad"))
    if draw(st.booleans()):
        data["Weird.key"] = {"x": 1}
    return data, construct


@st.composite
def dump_trees(draw):
    """{(step_dir, item_dir): (data, construct)} for a few steps and ranks."""
    tree = {}
    for step in sorted(draw(st.sets(st.integers(0, 12), min_size=1, max_size=3))):
        items = [f"rank{rank}" for rank in sorted(draw(st.sets(st.integers(-1, 3), min_size=0, max_size=2)))]
        items += [f"proc{pid}" for pid in sorted(draw(st.sets(st.integers(100, 999), max_size=2)))]
        for item in items or ["rank0"]:
            tree[(f"step{step}", item)] = draw(file_sets())
    return tree


def write_tree(data_dir: Path, tree: dict) -> None:
    for (step_dir, item), (data, construct) in tree.items():
        directory = data_dir / step_dir / item
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "dump.json").write_text(json.dumps({"task": "statistics", "data": data}, indent=1))
        (directory / "construct.json").write_text(json.dumps(construct, indent=1))
