"""Per-key rules of docs/dump-format.md §4-§7: mapping, metric detection, target naming, tensors, values."""

from __future__ import annotations

from trendconv.errors import kind_of
from trendconv.formats.dump.decode import UNSET, Tensor

FORWARD, BACKWARD, RECOMPUTE, PARAMETERS_GRAD = "forward", "backward", "recompute", "parameters_grad"
# Tuples, not sets: membership compares by equality and never hashes, so a `type` or `dtype` that is a
# list or an object is simply not one of them (the tensor is skipped, as msprobe skips it) instead of an
# "unhashable type" error. The most common values come first.
TENSOR_TYPES = ("torch.Tensor", "mindspore.Tensor", "mindtorch.Tensor")
FLOAT_DTYPES = ("torch.float32", "torch.bfloat16", "torch.float16", "BFloat16", "Float32", "Float16")
STAT_KEYS = ("Norm", "Max", "Min", "Mean")
_FLOAT_MAX = 1.7976931348623157e308

# Why a tensor slot or a whole key gave no row; counted per shard.
SKIP_NOT_OBJECT = "entry not an object"
SKIP_NOT_IN_CONSTRUCT = "key not in construct.json"
SKIP_NO_METRIC = "no metric"
SKIP_NULL = "null"
SKIP_NESTED = "nested list"
SKIP_NON_TENSOR = "non-tensor"
SKIP_TYPE = "unsupported tensor type"
SKIP_DTYPE = "unsupported dtype"


def classify(name: str, entry: dict) -> tuple[str, str] | None:
    """The metric of a (mapped) name and the name with the metric words taken out (docs/dump-format.md §5.1)."""
    if ".forward." in name or name.endswith(".forward"):
        metric = RECOMPUTE if entry.get("is_recompute") else FORWARD
        return metric, name.replace(".forward.", ".").replace(".forward", "")
    if ".backward." in name or name.endswith(".backward"):
        return BACKWARD, name.replace(".backward.", ".").replace(".backward", "")
    if name.endswith("parameters_grad"):
        return PARAMETERS_GRAD, name.replace(".parameters_grad", "")
    parts = name.split(".")
    if len(parts) >= 3 and parts[-2] == "parameters_grad":
        kept = parts[:-2] + [parts[-1]] if parts[-1].isdigit() else parts[:-2]
        return PARAMETERS_GRAD, ".".join(kept)
    return None


def split_index(name: str) -> tuple[str, int]:
    """docs/dump-format.md §5.2: a trailing all-digit part is the target index (the `micro_step` column)."""
    head, dot, last = name.rpartition(".")
    if last.isdigit():
        try:
            return head, int(last)
        except ValueError:  # digits int() refuses: other scripts' (no number), or more than Python reads (4300)
            if last.isascii():
                raise EntryError(f"target index of {len(last)} digits does not fit a 64-bit integer") from None
    return name, 0


def tensor_groups(metric: str, entry) -> tuple[tuple[str, list | dict], ...]:
    """The fields rows may come from, in docs/dump-format.md §6 order: (suffix start, values by position or by name).

    ENTRY is a `decode.Entry`, or for parameters_grad a dict of parameters. A dict group holds
    parameters (name -> value, the tensor chosen by `choose_parameter`); a list group holds tensors
    by position (skipped items keep their positions).
    """
    if metric == PARAMETERS_GRAD:
        return ((".", entry),)
    if metric == BACKWARD:
        return ((".input.", _list_field(entry.input, "input")), (".output.", _list_field(entry.output, "output")))
    inputs, outputs = _list_field(entry.input_args, "input_args"), _list_field(entry.output, "output")
    parameters = entry.parameters
    if parameters is UNSET:
        return ((".input.", inputs), (".output.", outputs))
    if not isinstance(parameters, dict):
        raise EntryError(f"'parameters' is {kind_of(parameters)}, expected an object")
    return ((".input.", inputs), (".output.", outputs), (".parameters.", parameters))


def _list_field(values, field: str) -> list:
    if type(values) is list:  # the common case first
        return values
    if values is UNSET:
        return []
    raise EntryError(f"{field!r} is {kind_of(values)}, expected a list")


def choose_parameter(value):
    """docs/dump-format.md Q1: a parameter is the object itself when it has a `type`, else item 0 of a list of
    objects."""
    if type(value) is Tensor:
        return None if value.type is UNSET else value
    if type(value) is list and value and type(value[0]) is Tensor:
        return value[0]
    return None


def skip_reason(value) -> str | None:
    """None for an eligible tensor (docs/dump-format.md §6: its type in TENSOR_TYPES, its dtype in FLOAT_DTYPES, the
    test the parser inlines), else why the value gives no row."""
    if type(value) is Tensor:
        kind = value.type
        if kind in TENSOR_TYPES:
            return None if value.dtype in FLOAT_DTYPES else SKIP_DTYPE
        return SKIP_TYPE if isinstance(kind, str) and "Tensor" in kind else SKIP_NON_TENSOR
    if value is None:
        return SKIP_NULL
    return SKIP_NESTED if isinstance(value, list) else SKIP_NON_TENSOR


def raw_stat(value) -> float | None:
    """A statistic as float64 before clipping (docs/dump-format.md §7 steps 1-2): NaN and ±inf kept, non-numbers
    None."""
    if isinstance(value, float):
        return value
    if isinstance(value, int):
        return _int_as_float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def _int_as_float(value: int) -> float:
    try:
        return float(value)
    except OverflowError:  # copysign would convert VALUE to float too, and fail alike
        return _FLOAT_MAX if value > 0 else -_FLOAT_MAX


class EntryError(Exception):
    """A dump entry of a shape the reference crashes on; the parser adds file, step, rank and key."""
