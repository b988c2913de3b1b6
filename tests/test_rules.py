"""Per-key rules (docs/dump-format.md §4-§7): mapping, metric detection, target prefix/index, tensors, values.

Expected values come from the rules of docs/dump-format.md and msprobe's behaviour, not from running the code.
"""

from __future__ import annotations

import math
from collections import Counter

import msgspec
import pytest

from trendconv.formats.dump import decode, rules
from trendconv.formats.dump import parse as dump_parse
from trendconv.formats.dump.rules import (
    BACKWARD,
    FORWARD,
    PARAMETERS_GRAD,
    RECOMPUTE,
    EntryError,
    choose_parameter,
    classify,
    raw_stat,
    skip_reason,
    split_index,
    tensor_groups,
)
from trendconv.options import ParseOptions, apply_mapping


def T(dtype="torch.float32", type_="torch.Tensor", value=1.0):  # noqa: N802 - the name docs/dump-format.md uses
    return {"type": type_, "dtype": dtype, "shape": [2], "Max": value, "Min": value, "Mean": value, "Norm": value}


def value_of(value) -> decode.Value:
    """A plain JSON value as a tensor slot holds it once decoded."""
    return msgspec.convert(value, decode.Value)


# A key of each metric, all naming the targets `Module.m.M<suffix>`.
KEYS = {
    FORWARD: "Module.m.M.forward.0",
    RECOMPUTE: "Module.m.M.forward.0",
    BACKWARD: "Module.m.M.backward.0",
    PARAMETERS_GRAD: "Module.m.M.parameters_grad",
}
PREFIX = "Module.m.M"


def parsed(metric: str, entry: dict) -> dump_parse.Rows:
    """The rows the parser's Python path makes of one entry of METRIC's key (a recompute entry says so)."""
    rows = dump_parse._rows({KEYS[metric]: entry}, None, dump_parse._Naming({}, {}), ParseOptions(micro_step=False))
    assert set(rows.key_metric) <= {metric}
    return rows


def eligible(metric: str, entry: dict) -> list[str]:
    """The suffixes that give a row (docs/dump-format.md §6), in field order."""
    return [name.removeprefix(PREFIX) for name in parsed(metric, entry).target_name]


def skipped(metric: str, entry: dict) -> Counter:
    """Why the other tensor slots gave no row."""
    return parsed(metric, entry).skipped


# ---------------------------------------------------------------- docs/dump-format.md §4 mapping


def test_mapping_example_telinear():
    assert apply_mapping("Module.enc.TELinear.Lin.forward.0", ((".TELinear.", "."),)) == "Module.enc.Lin.forward.0"


def test_mapping_example_prefix_then_classify():
    name = apply_mapping("old_prefix.layer1.forward", (("old_prefix", "new_prefix"),))
    assert name == "new_prefix.layer1.forward"
    assert classify(name, {}) == (FORWARD, "new_prefix.layer1")


def test_mapping_is_sequential_in_file_order():
    assert apply_mapping("a.x", (("a", "b"), ("b", "c"))) == "c.x"
    assert apply_mapping("a.x", (("b", "c"), ("a", "b"))) == "b.x"


def test_mapping_replaces_all_non_overlapping_occurrences():
    assert apply_mapping("aaa.aa", (("aa", "b"),)) == "ba.b"


def test_mapping_empty_key_inserts_between_every_character():
    assert apply_mapping("ab", (("", "-"),)) == "-a-b-"


def test_mapping_empty_mapping_is_identity():
    assert apply_mapping("Module.a.A.forward.0", ()) == "Module.a.A.forward.0"


def test_mapping_can_rename_parameters_grad_so_no_rule_matches():
    name = apply_mapping("Module.fc.Linear.parameters_grad.0", (("parameters_grad", "pg"),))
    assert name == "Module.fc.Linear.pg.0"
    assert classify(name, {}) is None


# ---------------------------------------------------------------- docs/dump-format.md §5.1 metric detection

METRIC_TABLE = [
    ("model.layer1.forward.0", False, FORWARD, "model.layer1.0"),
    ("model.layer1.forward.1", True, RECOMPUTE, "model.layer1.1"),
    ("model.layer1.backward.0", None, BACKWARD, "model.layer1.0"),
    ("model.layer1.parameters_grad", None, PARAMETERS_GRAD, "model.layer1"),
    ("module.forward_image.backward.0", True, BACKWARD, "module.forward_image.0"),
    ("a.b.c.0.forward", False, FORWARD, "a.b.c.0"),
    ("Module.forward.Foo.backward.0", False, FORWARD, "Module.Foo.backward.0"),
    ("Module.enc.forward_image.Enc.forward.0", False, FORWARD, "Module.enc_image.Enc.0"),
    ("Module.fsdp_unit.parameters_grad.something", None, PARAMETERS_GRAD, "Module.fsdp_unit"),
    ("Module.fc.Linear.parameters_grad.1", None, PARAMETERS_GRAD, "Module.fc.Linear.1"),
    ("Module.fc.Linear.parameters_grad.01", None, PARAMETERS_GRAD, "Module.fc.Linear.01"),
    ("Module.parameters_grad.3", None, PARAMETERS_GRAD, "Module.3"),
    ("parameters_grad", None, PARAMETERS_GRAD, "parameters_grad"),
]


@pytest.mark.parametrize(("name", "is_recompute", "metric", "stripped"), METRIC_TABLE)
def test_classify_spec_table(name, is_recompute, metric, stripped):
    entry = {"input_args": [], "output": []}
    if is_recompute is not None:
        entry["is_recompute"] = is_recompute
    assert classify(name, entry) == (metric, stripped)


@pytest.mark.parametrize("name", ["model.layer1", "Weird.key", "Module.a.A.debug", "parameters_grad.3", ""])
def test_classify_no_metric(name):
    assert classify(name, {"is_recompute": True}) is None


@pytest.mark.parametrize(
    ("entry", "metric"),
    [
        ({}, FORWARD),  # missing means false
        ({"is_recompute": False}, FORWARD),
        ({"is_recompute": None}, FORWARD),
        ({"is_recompute": 0}, FORWARD),
        ({"is_recompute": True}, RECOMPUTE),
        ({"is_recompute": 1}, RECOMPUTE),
        ({"is_recompute": "false"}, RECOMPUTE),  # truthy string
    ],
)
def test_classify_recompute_is_truthiness(entry, metric):
    assert classify("Functional.linear.1.forward", entry) == (metric, "Functional.linear.1")


def test_classify_backward_ignores_is_recompute():
    assert classify("Functional.linear.1.backward", {"is_recompute": True}) == (BACKWARD, "Functional.linear.1")


def test_classify_parameters_grad_suffix_without_dot():
    assert classify("Module.xparameters_grad", {}) == (PARAMETERS_GRAD, "Module.xparameters_grad")


# ---------------------------------------------------------------- docs/dump-format.md §5.2 target prefix and index

PREFIX_TABLE = [
    ("Functional.conv2d.3.forward", "Functional.conv2d", 3),
    ("Module.layers.0.Block.forward.2", "Module.layers.0.Block", 2),
    ("Module.fc.Linear.backward.0", "Module.fc.Linear", 0),
    ("Module.fc.Linear.parameters_grad.1", "Module.fc.Linear", 1),
    ("Module.fc.Linear.parameters_grad.01", "Module.fc.Linear", 1),
    ("Module.fc.Linear.parameters_grad", "Module.fc.Linear", 0),
    ("Module.forward.Foo.backward.0", "Module.Foo.backward", 0),
    (
        "Module._fsdp_wrapped_module.blocks.18._fsdp_wrapper_module.ffn.1.GELU.forward.18",
        "Module._fsdp_wrapped_module.blocks.18._fsdp_wrapper_module.ffn.1.GELU",
        18,
    ),
    ("Primitive.norm.RmsNorm.0.forward", "Primitive.norm.RmsNorm", 0),
    (
        "Cell.network_with_loss.module.language_model.encoder.layers.0.attention.ParallelAttention.forward.0",
        "Cell.network_with_loss.module.language_model.encoder.layers.0.attention.ParallelAttention",
        0,
    ),
    ("Module.fsdp_unit.parameters_grad.something", "Module.fsdp_unit", 0),
]


@pytest.mark.parametrize(("key", "prefix", "index"), PREFIX_TABLE)
def test_prefix_and_index_spec_table(key, prefix, index):
    _, name = classify(key, {})
    assert split_index(name) == (prefix, index)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("Module._fsdp_wrapped_module.blocks.18._fsdp_wrapper_module.ffn.1.GELU.18",
         ("Module._fsdp_wrapped_module.blocks.18._fsdp_wrapper_module.ffn.1.GELU", 18)),
        ("Functional.linear", ("Functional.linear", 0)),
        ("parameters_grad", ("parameters_grad", 0)),
        ("a.b.007", ("a.b", 7)),
        ("a.1.b", ("a.1.b", 0)),
        ("a.b.-1", ("a.b.-1", 0)),  # not all digits
    ],
)  # fmt: skip
def test_split_index_names(name, expected):
    assert split_index(name) == expected


# ---------------------------------------------------------------- docs/dump-format.md §6 eligible tensors


@pytest.mark.parametrize(
    ("type_", "dtype"),
    [
        (t, d)
        for t in ("torch.Tensor", "mindspore.Tensor", "mindtorch.Tensor")
        for d in ("Float16", "Float32", "BFloat16", "torch.float16", "torch.float32", "torch.bfloat16")
    ],
)
def test_eligible_type_dtype_pairs(type_, dtype):
    assert skip_reason(value_of(T(dtype, type_))) is None
    assert eligible(FORWARD, {"output": [T(dtype, type_)]}) == [".output.0"]


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (T("torch.int64"), rules.SKIP_DTYPE),
        (T("torch.float64"), rules.SKIP_DTYPE),
        (T("Float64"), rules.SKIP_DTYPE),
        (T("Int32"), rules.SKIP_DTYPE),
        (T("Bool"), rules.SKIP_DTYPE),
        (T("torch.Float32"), rules.SKIP_DTYPE),  # case-sensitive
        (T("float32"), rules.SKIP_DTYPE),
        ({"type": "torch.Tensor", "shape": []}, rules.SKIP_DTYPE),
        (T(type_="torch.distributed.tensor.DTensor"), rules.SKIP_TYPE),
        (T(type_="torch.tensor"), rules.SKIP_NON_TENSOR),  # no "Tensor" in the name: not a tensor class
        ({"type": "int", "value": 2}, rules.SKIP_NON_TENSOR),
        ({"type": ["torch.Tensor"], "dtype": "torch.float32"}, rules.SKIP_NON_TENSOR),  # unhashable, compared
        ({"type": {"torch.Tensor": 1}, "dtype": "torch.float32"}, rules.SKIP_NON_TENSOR),
        ({"type": "torch.Tensor", "dtype": ["torch.float32"]}, rules.SKIP_DTYPE),
        ({"type": "torch.Tensor", "dtype": {"torch.float32": 1}}, rules.SKIP_DTYPE),
        ({"type": "bool", "value": False}, rules.SKIP_NON_TENSOR),
        ({"dtype": "torch.float32", "Max": 1}, rules.SKIP_NON_TENSOR),
        (None, rules.SKIP_NULL),
        ([T(), T()], rules.SKIP_NESTED),
        ([{"type": "int", "value": 2}, {"type": "int", "value": 2}], rules.SKIP_NESTED),
        ("torch.Tensor", rules.SKIP_NON_TENSOR),
        (3, rules.SKIP_NON_TENSOR),
    ],
)
def test_skip_reasons(value, reason):
    assert skip_reason(value_of(value)) == reason
    assert eligible(FORWARD, {"output": [value]}) == []
    assert skipped(FORWARD, {"output": [value]}) == Counter({reason: 1})


def test_conv2d_positions_count_null_and_nested_list():
    entry = {
        "input_args": [T(), T(), None, [{"type": "int", "value": 2}, {"type": "int", "value": 2}], T("torch.int64")],
        "input_kwargs": {"bias": T()},
        "is_recompute": False,
        "output": [T()],
    }
    assert eligible(FORWARD, entry) == [".input.0", ".input.1", ".output.0"]
    assert skipped(FORWARD, entry) == Counter({rules.SKIP_NULL: 1, rules.SKIP_NESTED: 1, rules.SKIP_DTYPE: 1})


def test_conv_module_with_object_parameters():
    entry = {"input_args": [T()], "input_kwargs": {}, "output": [T()], "parameters": {"weight": T()}}
    assert eligible(FORWARD, entry) == [".input.0", ".output.0", ".parameters.weight"]


def test_slot_values_are_the_tensors_themselves():
    a, b, w = T(value=1.0), T(value=2.0), T(value=3.0)
    entry = {"input_args": [a], "output": [b], "parameters": {"weight": w}}
    expected = [(".input.0", a), (".output.0", b), (".parameters.weight", w)]
    rows = parsed(FORWARD, entry)
    assert [name.removeprefix(PREFIX) for name in rows.target_name] == [suffix for suffix, _ in expected]
    assert rows.tensors == [value_of(value) for _, value in expected]


def test_recompute_reads_the_same_fields_as_forward():
    entry = {"input_args": [T()], "output": [None, T()], "parameters": {"w": [T()]}, "is_recompute": True}
    assert eligible(RECOMPUTE, entry) == [".input.0", ".output.1", ".parameters.w"]


def test_backward_bfloat16_input_int64_output():
    entry = {"input": [T("torch.bfloat16")], "output": [T("torch.int64")]}
    assert eligible(BACKWARD, entry) == [".input.0"]


def test_mindtorch_bfloat16_vs_mindspore_float64():
    entry = {"input_args": [], "output": [T("BFloat16", "mindtorch.Tensor"), T("Float64", "mindspore.Tensor")]}
    assert eligible(FORWARD, entry) == [".output.0"]


def test_forward_ignores_input_and_kwargs():
    entry = {"input": [T()], "input_kwargs": {"x": T()}, "output": [T()]}
    assert eligible(FORWARD, entry) == [".output.0"]


def test_backward_ignores_input_args_and_parameters():
    entry = {"input_args": [T()], "parameters": {"w": T()}, "input": [T()], "output": [T()]}
    assert eligible(BACKWARD, entry) == [".input.0", ".output.0"]


def test_backward_never_looks_at_bad_input_args_or_parameters():
    entry = {"input_args": None, "parameters": 3, "input": [T()]}
    assert eligible(BACKWARD, entry) == [".input.0"]


def test_missing_fields_give_no_slots():
    for metric in (FORWARD, BACKWARD, PARAMETERS_GRAD):
        assert (eligible(metric, {}), skipped(metric, {})) == ([], Counter())


@pytest.mark.parametrize(
    ("value", "rows"),
    [
        (T(), [".parameters.w"]),  # object form (real forward dumps)
        ([T()], [".parameters.w"]),  # list form
        ([T(), None], [".parameters.w"]),
        ([None, T()], []),  # first item not an object
        ([], []),
        ({"dtype": "torch.float32", "Max": 1.0}, []),  # object without `type`
        ("T", []),
        (None, []),
        ([T("torch.int64")], []),  # eligibility applies to the chosen tensor
        (T(type_="torch.distributed.tensor.DTensor"), []),
        ([[T()]], []),
    ],
)
def test_parameter_shapes(value, rows):
    assert eligible(FORWARD, {"parameters": {"w": value}}) == rows


def test_parameter_names_with_dots_are_verbatim():
    entry = {"parameters": {"mlp.0.weight": T(), "bias": [T()]}}
    assert eligible(FORWARD, entry) == [".parameters.mlp.0.weight", ".parameters.bias"]


def test_parameters_grad_list_form():
    entry = {"bias": [T()], "weight": [T()]}
    assert eligible(PARAMETERS_GRAD, entry) == [".bias", ".weight"]


def test_parameters_grad_object_and_list_forms_and_rejects():
    entry = {
        "a": T(),
        "b": [T()],
        "c": [None, T()],
        "d": {"dtype": "torch.float32"},
        "e": [],
        "f": [T("torch.int64")],
        "g": None,
        "h": [T("Float32", "mindspore.Tensor")],
    }
    assert eligible(PARAMETERS_GRAD, entry) == [".a", ".b", ".h"]
    # c, d, e and g choose no tensor (docs/dump-format.md Q1); f's tensor is an int64 one
    assert skipped(PARAMETERS_GRAD, entry) == Counter({rules.SKIP_NULL: 4, rules.SKIP_DTYPE: 1})


def test_parameters_grad_slot_value_is_item_zero():
    first, second = T(value=0.1), T(value=0.2)
    assert parsed(PARAMETERS_GRAD, {"w": [first, second]}).tensors == [value_of(first)]


@pytest.mark.parametrize(
    ("value", "chosen_index"),
    [
        ({"type": "int", "value": 1}, "self"),
        ({"dtype": "torch.float32"}, None),
        ([{"a": 1}, T()], 0),
        ([None, T()], None),
        ([], None),
        ("x", None),
        (None, None),
        (5, None),
    ],
)
def test_choose_parameter(value, chosen_index):
    expected = value if chosen_index == "self" else (value[chosen_index] if chosen_index is not None else None)
    assert choose_parameter(value_of(value)) == (None if expected is None else value_of(expected))


@pytest.mark.parametrize(
    ("metric", "entry", "message"),
    [
        (FORWARD, {"input_args": None}, "'input_args' is null, expected a list"),
        (RECOMPUTE, {"input_args": [], "output": None}, "'output' is null, expected a list"),
        (BACKWARD, {"input": None}, "'input' is null, expected a list"),
        (BACKWARD, {"input": [], "output": 3}, "'output' is a number, expected a list"),
        (FORWARD, {"parameters": 3}, "'parameters' is a number, expected an object"),
        (FORWARD, {"parameters": None}, "'parameters' is null, expected an object"),
        (FORWARD, {"parameters": [T()]}, "'parameters' is a list, expected an object"),
        (FORWARD, {"parameters": "w"}, "'parameters' is a string, expected an object"),
    ],
)
def test_crashing_shapes_raise_entry_error(metric, entry, message):
    with pytest.raises(EntryError) as info:
        tensor_groups(metric, decode.entry_of(entry, parameters=False))
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("metric", "entry", "message"),
    [
        (FORWARD, {"input_args": {"a": T()}, "output": [T()]}, "'input_args' is an object, expected a list"),
        (BACKWARD, {"input": [T()], "output": {"b": T()}}, "'output' is an object, expected a list"),
        (FORWARD, {"output": "abc"}, "'output' is a string, expected a list"),
    ],
)
def test_list_field_that_is_not_a_list_is_an_error(metric, entry, message):
    """Deliberate difference (docs/migration.md): the reference iterates an object's keys and gives no rows."""
    with pytest.raises(EntryError) as raised:
        tensor_groups(metric, decode.entry_of(entry, parameters=False))
    assert str(raised.value) == message


# ---------------------------------------------------------------- docs/dump-format.md §7 raw values (before clipping)

INF = math.inf


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("  3.14 ", 3.14),
        (42, 42.0),
        (1e12, 1e12),  # not clipped here
        (-1e10, -1e10),
        (1e9, 1e9),
        ("inf", INF),
        ("-Infinity", -INF),
        ("Infinity", INF),  # a bare token read by jsonfile
        ("INFINITY", INF),
        (INF, INF),
        (-INF, -INF),
        ("1_000", 1000.0),
        ("1e3", 1000.0),
        ("-2.5E-1", -0.25),
        ("+7", 7.0),
        ("\n5\t", 5.0),
        (True, 1.0),
        (False, 0.0),
        (0, 0.0),
        (10**400, 1.7976931348623157e308),  # beyond float range: the largest float, of the int's sign
        (-(10**400), -1.7976931348623157e308),
        (0.5, 0.5),
        ("0x10", None),
        ("abc", None),
        ("", None),
        ("1__000", None),
        ([1, 2], None),
        ({"v": 1}, None),
        (None, None),
    ],
)
def test_raw_stat_values(value, expected):
    result = raw_stat(value)
    assert result == expected
    if expected is not None:
        assert type(result) is float


@pytest.mark.parametrize("value", ["nan", "NaN", "-nan", " NAN ", math.nan])
def test_raw_stat_nan_passes_through(value):
    result = raw_stat(value)
    assert type(result) is float
    assert math.isnan(result)
