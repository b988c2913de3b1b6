"""Deterministic generator of msprobe statistics-mode dumps (level mix) of a Megatron-style GPT.

Writes ``DIR/step{s}/rank{r}/dump.json`` and ``construct.json`` (``proc{pid}`` with ``--procs``) exactly in the
layout of docs/dump-format.md §1-§3 and §6: Python ``json.dump(indent=1)`` with bare NaN/Infinity,
per-name call counters, backward keys tied to their forward twins, ``parameters_grad.<k>`` keys outside
construct.json, an optimizer phase, and the odd values real dumps contain (nulls, nested lists, non-tensors, int and
bool tensors, DTensors, strings, ±inf, NaN, values beyond ±1e9).

Shapes that stress other costs of a converter (``SHAPES``, the benchmarks' scenarios): more bytes per row (long
module paths, many non-tensor arguments, ``indent=4``), fewer bytes per row (level L1: API calls only and an empty
construct.json, small tensors, one-line JSON) and the plain construct.json of non-Megatron runs.

Library: ``generate(out, steps=..., ranks=..., layers=...)``. CLI: ``python -m datagen.dump --help``.
The same arguments always give the same bytes: every file has its own ``random.Random`` seeded from a string
(hashed with SHA-512, so PYTHONHASHSEED plays no part) and nothing iterates over a set.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

FLOAT_DTYPES = ("bf16", "fp32", "fp16")
# Share of float tensors that get one odd statistic (NaN, ±inf, a string, a huge value), like real overflows.
ANOMALY_RATE = 0.002
ODD_STATS = (
    ("Mean", math.nan),
    ("Max", math.inf),
    ("Min", -math.inf),
    ("Norm", "nan"),
    ("Max", "inf"),
    ("Mean", " 3.5 "),
    ("Norm", 3.2e12),
    ("Min", -4.7e10),
)


@dataclass(frozen=True)
class GenSummary:
    """What ``generate`` wrote."""

    files: int
    total_bytes: int


@dataclass(frozen=True)
class Flavor:
    """Names that differ between the PyTorch and the MindSpore dumper."""

    module_prefix: str
    root_path: str
    tensor_type: str
    alt_tensor_type: str  # the occasional "other" tensor class
    dtypes: dict[str, str]
    outside_parent: str | None  # construct parent of APIs called outside any module
    requires_grad_field: bool
    api_overrides: dict[str, str]
    api_prefixes: dict[str, str]

    def api(self, name: str) -> str:
        if name in self.api_overrides:
            return self.api_overrides[name]
        prefix, rest = name.split(".", 1)
        return f"{self.api_prefixes.get(prefix, prefix)}.{rest}"


PYTORCH = Flavor(
    module_prefix="Module",
    root_path="0.module.module",
    tensor_type="torch.Tensor",
    alt_tensor_type="torch.distributed.tensor.DTensor",
    dtypes={
        "bf16": "torch.bfloat16",
        "fp32": "torch.float32",
        "fp16": "torch.float16",
        "fp64": "torch.float64",
        "i64": "torch.int64",
        "bool": "torch.bool",
    },
    outside_parent=None,
    requires_grad_field=True,
    api_overrides={},
    api_prefixes={},
)
MINDSPORE = Flavor(
    module_prefix="Cell",
    root_path="network_with_loss.module",
    tensor_type="mindspore.Tensor",
    alt_tensor_type="mindtorch.Tensor",
    dtypes={
        "bf16": "BFloat16",
        "fp32": "Float32",
        "fp16": "Float16",
        "fp64": "Float64",
        "i64": "Int32",
        "bool": "Bool",
    },
    outside_parent="",
    requires_grad_field=False,
    api_overrides={
        "Tensor.add": "Tensor.__add__",
        "Tensor.mul": "Tensor.__mul__",
        "Tensor.sub": "Tensor.__sub__",
        "Tensor.div": "Tensor.__truediv__",
        "NPU.npu_fusion_attention": "Functional.flash_attention_score",
        "NPU.npu_rms_norm": "Primitive.norm.RmsNorm",
    },
    api_prefixes={"Torch": "Mint", "NPU": "Primitive"},
)
FLAVORS = {"pytorch": PYTORCH, "mindspore": MINDSPORE}
# Keyword names of the extra non-tensor arguments (--non-tensors), numbered once they run out.
NON_TENSOR_NAMES = ("dim", "alpha", "inplace", "reduction", "out", "index", "ellipsis", "dtype", "size", "device")
NON_TENSOR_NAMES += ("memory_format", "group", "op")


@dataclass(frozen=True)
class Opts:
    steps: int
    ranks: int
    layers: int
    micro_batches: int = 2
    seed: int = 0
    framework: str = "pytorch"
    construct: str = "megatron"
    procs: bool = False
    recompute: bool = False
    old_grad_counter: bool = False
    level: str = "mix"
    indent: int = 1
    long_keys: bool = False
    non_tensors: int = 0
    small_tensors: bool = False
    tiny: bool = False


# The shapes the benchmarks measure besides the default (generate's keyword arguments).
SHAPES = {
    "wide": {"long_keys": True, "non_tensors": 12, "indent": 4},
    "narrow": {"level": "L1", "small_tensors": True, "indent": 0},
    "plain": {"construct": "plain"},
}
LEVELS = ("mix", "L1")
INDENTS = (0, 1, 2, 4)  # 0: all on one line


@dataclass(frozen=True)
class Dims:
    """Llama-7B-like shapes, split for tensor parallelism."""

    tp: int
    seq: int = 4096
    hidden: int = 4096
    heads: int = 32
    head_dim: int = 128
    ffn: int = 11008
    vocab: int = 32000


def small_dims(tp: int) -> Dims:
    """A model small enough that every shape is a few one- or two-digit numbers."""
    return Dims(tp=tp, seq=8, hidden=16, heads=2, head_dim=8, ffn=32, vocab=64)


@dataclass(eq=False)
class TS:
    """A tensor to be written: shape, dtype tag and the spread of its values.

    Its statistics are drawn once and cached, so a tensor passed from one call to the next shows the same values
    in both entries, as in a real dump.
    """

    shape: tuple[int, ...]
    dt: str = "bf16"
    scale: float = 1.0
    grad: bool = True  # requires_grad; also whether a gradient flows back through it
    kind: str = "plain"  # plain | mask (additive -inf mask) | alt (DTensor / mindtorch)
    stats: dict | None = field(default=None, repr=False)
    grad_ts: TS | None = field(default=None, repr=False)


@dataclass
class Call:
    """One recorded forward call, kept for the backward pass."""

    key: str  # the forward key; for a bare frame (optimizer, a backward node) the construct node it stands for
    is_module: bool
    args: list = field(default_factory=list)
    out: list = field(default_factory=list)
    children: list[Call] = field(default_factory=list)
    rerun: Callable[[], Call] | None = None  # activation recomputation: runs the forward again
    grad_apis: Callable[[], None] | None = None  # APIs an autograd Function calls in the module's backward


def I(v: int) -> dict:  # noqa: E743 - one-letter literal helpers keep the model code readable
    return {"type": "int", "value": v}


def F(v: float) -> dict:
    return {"type": "float", "value": v}


def B(v: bool) -> dict:
    return {"type": "bool", "value": v}


def S(v: str) -> dict:
    return {"type": "str", "value": v}


def quantize(x: float, bits: int = 8) -> float:
    """Round to a bf16-like mantissa: Max/Min of half-precision tensors are exact low-precision values."""
    if x == 0 or not math.isfinite(x):
        return x
    m, e = math.frexp(x)
    return math.ldexp(round(m * (1 << bits)) / (1 << bits), e)


def float_stats(rng: random.Random, ts: TS) -> dict:
    numel = math.prod(ts.shape)
    std = ts.scale * rng.lognormvariate(0.0, 0.15)
    mean = rng.gauss(0.0, std * 0.03)
    mx, mn = std * rng.uniform(2.5, 7.0), -std * rng.uniform(2.5, 7.0)
    if ts.dt != "fp32":
        mx, mn = quantize(mx), quantize(mn)
    stats = {"Max": mx, "Min": mn, "Mean": mean, "Norm": math.sqrt(numel * (std * std + mean * mean))}
    if rng.random() < ANOMALY_RATE:
        name, value = ODD_STATS[rng.randrange(len(ODD_STATS))]
        stats[name] = value
    return stats


def stats_for(rng: random.Random, ts: TS) -> dict:
    if ts.kind == "mask":
        return {"Max": 0.0, "Min": -math.inf, "Mean": -math.inf, "Norm": math.inf}
    if ts.dt == "bool":
        return {"Max": True, "Min": rng.random() < 0.02, "Mean": None, "Norm": None}
    if ts.dt == "i64":
        top = max(1, int(ts.scale))
        mx = rng.randrange(top // 2, top) if top > 1 else top
        if rng.random() < 0.5:  # some dumpers compute Mean/Norm of integer tensors, others leave them null
            return {"Max": mx, "Min": 0, "Mean": None, "Norm": None}
        return {"Max": mx, "Min": 0, "Mean": mx / 2.0, "Norm": mx * math.sqrt(math.prod(ts.shape) / 3.0)}
    return float_stats(rng, ts)


def grad_of(item) -> TS | None:
    """The gradient a backward entry shows for a forward tensor, or None where no gradient flows."""
    if not (isinstance(item, TS) and item.grad and item.dt in FLOAT_DTYPES and item.kind != "mask"):
        return None
    if item.grad_ts is None:  # one gradient per tensor: a module's backward shows its last API's gradients
        item.grad_ts = TS(item.shape, item.dt, item.scale * 1e-5)
    return item.grad_ts


class FileBuilder:
    """Builds the ``data`` of one dump.json and its construct.json, in call order."""

    def __init__(self, opts: Opts, step: int, rank: int) -> None:
        self.opts, self.step = opts, step
        self.flavor = FLAVORS[opts.framework]
        self.dims = small_dims(tp_size(opts.ranks)) if opts.small_tensors else Dims(tp=tp_size(opts.ranks))
        self.modules = opts.level == "mix"  # level L1 records API calls only: no module entries, construct {}
        self.rng = random.Random(f"trendconv-gen/{opts.seed}/{step}/{rank}")
        self.data: dict[str, dict] = {}
        self.construct: dict[str, object] = {}
        self.counters: dict[str, int] = {}
        self.stack: list[Call] = []
        self.top: list[Call] = []
        self.param_modules: dict[str, dict[str, TS]] = {}
        self.weights: dict[str, dict[str, TS]] = {}
        self.mb = 0
        self.in_recompute = False

    # -- rendering -------------------------------------------------------------------------------------------
    def render(self, item):
        if isinstance(item, TS):
            return self.tensor(item)
        if isinstance(item, list):
            return [self.render(x) for x in item]
        if isinstance(item, dict) and "type" not in item:  # input_kwargs
            return {k: self.render(v) for k, v in item.items()}
        return item  # None or a non-tensor literal

    def tensor(self, ts: TS) -> dict:
        fl = self.flavor
        d = {
            "type": fl.alt_tensor_type if ts.kind == "alt" else fl.tensor_type,
            "dtype": fl.dtypes[ts.dt],
            "shape": list(ts.shape),
        }
        if ts.stats is None:
            ts.stats = stats_for(self.rng, ts)
        d.update(ts.stats)
        if fl.requires_grad_field:
            d["requires_grad"] = ts.grad
        return d

    def size(self, shape: tuple[int, ...]) -> dict | list:
        if self.flavor is PYTORCH:
            return {"type": "torch.Size", "value": list(shape)}
        return [I(v) for v in shape]  # MindSpore writes a tuple of ints as a list

    def dtype(self, dt: str) -> dict:
        kind = "torch.dtype" if self.flavor is PYTORCH else "mindspore.dtype"
        return {"type": kind, "value": self.flavor.dtypes[dt]}

    # -- construct -------------------------------------------------------------------------------------------
    def node(self, key: str, parent: str | None) -> None:
        if not self.modules:
            return
        if self.opts.construct == "megatron":
            self.construct[key] = [parent, self.mb]
        else:
            self.construct[key] = parent

    def parent(self, api: bool) -> str | None:
        if self.stack:
            return self.stack[-1].key
        return self.flavor.outside_parent if api else None  # a top-level module is a root: null

    def attach(self, call: Call) -> None:
        (self.stack[-1].children if self.stack else self.top).append(call)

    def next_index(self, base: str) -> int:
        n = self.counters.get(base, 0)
        self.counters[base] = n + 1
        return n

    def params(self, path: str, params: dict[str, TS]) -> dict[str, TS]:
        """The module's parameters: created once per file, since weights only change in the optimizer step."""
        return self.weights.setdefault(path, params)

    def recompute_field(self, entry: dict, legacy: bool) -> None:
        # Older dumpers flag every forward; 26.2.0 writes nothing (a few API entries still carry false).
        if self.opts.recompute:
            entry["is_recompute"] = self.in_recompute
        elif legacy:
            entry["is_recompute"] = False

    # -- calls -----------------------------------------------------------------------------------------------
    def api(self, name: str, args: list, out: list, kwargs: dict | None = None, grad: bool = True, legacy=False):
        base = self.flavor.api(name)
        index = self.next_index(base)
        key = f"{base}.{index}.forward"
        self.node(key, self.parent(api=True))
        kwargs = {**(kwargs or {}), **self.extra_kwargs(index)}
        entry = {"input_args": self.render(args), "input_kwargs": self.render(kwargs), "output": self.render(out)}
        self.recompute_field(entry, legacy)
        self.data[key] = entry
        if grad:
            self.attach(Call(key, False, args, out))
        return out[0] if len(out) == 1 else out

    def extra_kwargs(self, index: int) -> dict:
        """``--non-tensors N``: N more keyword arguments that are not tensors, of the kinds msprobe writes."""
        kinds = self.non_tensor_kinds()
        return {f"{NON_TENSOR_NAMES[n % len(NON_TENSOR_NAMES)]}{n // len(NON_TENSOR_NAMES) or ''}": kinds[
            (index + n) % len(kinds)
        ] for n in range(self.opts.non_tensors)}  # fmt: skip

    def non_tensor_kinds(self) -> list:
        kinds = [I(-1), F(0.5), B(False), S("mean"), None, {"type": "slice", "value": [0, None, 2]}]
        kinds += [{"type": "ellipsis", "value": "..."}, self.dtype("fp32"), self.size((self.dims.seq, 1))]
        if self.flavor is PYTORCH:
            kinds += [
                {"type": "torch.device", "value": "npu:0"},
                {"type": "torch.memory_format", "format": "contiguous_format"},
                {"type": "torch.ProcessGroup", "group_ranks": list(range(self.dims.tp)), "group_id": "5ef3a0c1"},
                {"type": "torch.distributed.ReduceOp", "value": "RedOpType.SUM"},
            ]
        return kinds

    def module_path(self, path: str) -> str:
        """``--long-keys``: the wrappers of FSDP and activation checkpointing in every path, as such runs dump them."""
        if not self.opts.long_keys or not path:
            return path
        wrapped = re.sub(r"(layers\.\d+)", r"\1._fsdp_wrapped_module._checkpoint_wrapped_module", path)
        return f"_fsdp_wrapped_module.{wrapped}"

    @contextlib.contextmanager
    def module(self, path: str, cls: str, args: list, kwargs=None, params=None, grads=True) -> Iterator[Call]:
        fl = self.flavor
        path = self.module_path(path)
        base = f"{fl.module_prefix}.{fl.root_path}{'.' + path if path else ''}.{cls}"
        index = self.next_index(base)
        key = f"{base}.forward.{index}"
        self.node(key, self.parent(api=False))
        # Output is filled in on exit; the placeholder keeps msprobe's field order.
        entry = {"input_args": self.render(args), "input_kwargs": self.render(kwargs or {}), "output": []}
        if params:
            entry["parameters"] = {name: self.tensor(ts) for name, ts in params.items()}
            if grads:
                self.param_modules.setdefault(base, params)
        self.recompute_field(entry, legacy=False)
        if self.modules:
            self.data[key] = entry
        call = Call(key, True, args)
        self.attach(call)
        self.stack.append(call)
        try:
            yield call
        finally:
            self.stack.pop()
        if self.modules:
            entry["output"] = self.render(call.out)

    def recomputed(self, parent_key: str, forward: Callable[[], None]) -> Call:
        """Run ``forward`` again as activation recomputation does, under ``parent_key``; return its call."""
        saved = self.stack, self.in_recompute
        frame = Call(parent_key, True)
        self.stack, self.in_recompute = [frame], True
        try:
            forward()
        finally:
            self.stack, self.in_recompute = saved
        return frame.children[0]

    # -- backward and gradients ------------------------------------------------------------------------------
    def backward(self, calls: list[Call], parent_key: str | None = None) -> None:
        """Backward entries in reverse call order; ``parent_key`` None means outside any module."""
        for call in reversed(calls):
            if call.rerun is not None:
                call = call.rerun()
            key = call.key.replace(".forward", ".backward")
            self.node(key, parent_key if parent_key is not None else self.parent(api=not call.is_module))
            if self.modules or not call.is_module:
                self.data[key] = {
                    "input": self.render([grad_of(x) for x in call.out]),
                    "output": self.render([grad_of(x) for x in call.args]),
                }
            if call.grad_apis is not None:
                saved, self.stack = self.stack, [Call(key, True)]
                call.grad_apis()
                self.stack = saved
            if call.is_module:
                self.backward(call.children, key)

    def parameter_grads(self) -> None:
        if not self.modules:  # parameter gradients are recorded by module hooks
            return
        k = self.mb + (self.step * self.opts.micro_batches if self.opts.old_grad_counter else 0)
        # Grad hooks fire from the last module back to the first.
        for base, params in reversed(list(self.param_modules.items())):
            self.data[f"{base}.parameters_grad.{k}"] = {
                name: [self.tensor(TS(ts.shape, ts.dt, ts.scale * 1e-3, grad=False))] for name, ts in params.items()
            }


def tp_size(ranks: int) -> int:
    """Tensor-parallel size: the largest power of two <= ranks, at most 8."""
    tp = 1
    while tp * 2 <= min(ranks, 8):
        tp *= 2
    return tp


def fake_pid(rank: int, seed: int) -> int:
    """A stable pid per rank; it grows with the rank so proc directories map back to ranks in order
    (docs/dump-format.md §1.4)."""
    return 2016 + 37 * rank + 101 * (seed % 64)


# -- the model ---------------------------------------------------------------------------------------------------
def hidden(d: Dims, scale: float = 1.0) -> TS:
    return TS((d.seq, 1, d.hidden), "bf16", scale)


def rms_norm(b: FileBuilder, path: str, x: TS, fused: bool) -> TS:
    d = b.dims
    weight = b.params(path, {"weight": TS((d.hidden,), "bf16", 0.3)})["weight"]
    with b.module(path, "RMSNorm", [x], params={"weight": weight}) as m:
        if fused:
            y = TS(x.shape, "bf16", 1.0)
            rstd = TS((d.seq, 1, 1), "fp32", 0.5, grad=False)
            b.api("NPU.npu_rms_norm", [x, weight], [y, rstd], {"epsilon": F(1e-5)})
        else:
            y = rms_norm_ops(b, x, weight)
        m.out = [y]
    return y


def rms_norm_ops(b: FileBuilder, x: TS, weight: TS) -> TS:
    """The eager RMSNorm: many small element-wise APIs, which is what makes real mix-level dumps large."""
    row = (*x.shape[:-1], 1)
    xf = b.api("Tensor.float", [x], [TS(x.shape, "fp32", x.scale)])
    sq = b.api("Tensor.pow", [xf, I(2)], [TS(x.shape, "fp32", x.scale**2)])
    ms = b.api("Tensor.mean", [sq, I(-1)], [TS(row, "fp32", x.scale**2)], {"keepdim": B(True)})
    ms = b.api("Tensor.add", [ms, F(1e-5)], [TS(row, "fp32", x.scale**2)])
    inv = b.api("Torch.rsqrt", [ms], [TS(row, "fp32", 1 / x.scale)])
    normed = b.api("Tensor.mul", [xf, inv], [TS(x.shape, "fp32", 1.0)])
    normed = b.api("Tensor.type_as", [normed, x], [TS(x.shape, "bf16", 1.0)])
    return b.api("Tensor.mul", [normed, weight], [TS(x.shape, "bf16", 0.3)])


def linear(b: FileBuilder, path: str, cls: str, x: TS, out_features: int, bias: bool, reduce: bool):
    """A tensor-parallel linear layer; returns (output, bias handed to the caller or None)."""
    d = b.dims
    in_features = x.shape[-1]
    params = {"weight": TS((out_features, in_features), "bf16", 0.02)}
    if bias:
        params["bias"] = TS((out_features,), "bf16", 0.01)
    params = b.params(path, params)
    with b.module(path, cls, [x], params=params) as m:
        y = TS((d.seq, 1, out_features), "bf16", x.scale * 0.8)
        # RowParallelLinear adds its bias only after the all-reduce (skip_bias_add), so the call gets null.
        handed = params.get("bias") if reduce else None
        b.api("Functional.linear", [x, params["weight"], None if reduce else params.get("bias")], [y])
        if reduce:  # the partial results of the TP ranks are summed
            b.api("Distributed.all_reduce", [y], [y], {"group": None, "async_op": B(False)}, grad=False)
        m.out = [y, handed]
    m.grad_apis = lambda: linear_grad_ops(b, x, params["weight"], y, column=not reduce)
    return y, handed


def linear_grad_ops(b: FileBuilder, x: TS, weight: TS, y: TS, column: bool) -> None:
    """Megatron's LinearWithGradAccumulationAndAsyncCommunication.backward: plain API calls made during
    the backward pass, so they are forward keys whose construct parent is a backward node."""
    grad_out = grad_of(y)
    grad_in = b.api("Torch.matmul", [grad_out, weight], [grad_of(x)], grad=False)
    if column and b.dims.tp > 1:  # the input gradient is split across the TP ranks
        b.api("Distributed.all_reduce", [grad_in], [grad_in], {"async_op": B(True)}, grad=False)
    main_grad = TS(weight.shape, "fp32", 1e-5, grad=False)
    b.api("NPU.npu_matmul_add_fp32", [x, grad_out, main_grad], [main_grad], grad=False)


def core_attention(b: FileBuilder, i: int, path: str, q: TS, k: TS, v: TS) -> TS:
    d = b.dims
    heads = d.heads // d.tp
    mask = TS((1, 1, d.seq, d.seq), "bf16", grad=False, kind="mask")
    ctx = TS((d.seq, 1, heads * d.head_dim), "bf16", 0.6)
    p = f"{path}.core_attention"
    cls = "TEDotProductAttention" if fused_layer(i) else "DotProductAttention"
    with b.module(p, cls, [q, k, v, mask], {"attn_mask_type": S("causal"), "packed_seq_params": None}) as m:
        if fused_layer(i):
            fused_attention(b, q, k, v, ctx, heads)
        else:
            unfused_attention(b, p, q, k, v, mask, ctx, heads)
        m.out = [ctx]
    return ctx


def fused_layer(i: int) -> bool:
    """Every fourth layer (from layer 1) uses the fused NPU kernels, the rest the eager path (more APIs)."""
    return i % 4 == 1


def fused_attention(b: FileBuilder, q: TS, k: TS, v: TS, ctx: TS, heads: int) -> None:
    d = b.dims
    bool_mask = TS((1, 1, d.seq, d.seq), "bool", grad=False)
    kwargs = {
        "atten_mask": bool_mask,
        "scale": F(1 / math.sqrt(d.head_dim)),
        "keep_prob": F(1.0),
        "input_layout": S("SBH"),
    }
    softmax_max = TS((1, heads, d.seq, 8), "fp32", 4.0, grad=False)
    softmax_sum = TS((1, heads, d.seq, 8), "fp32", 300.0, grad=False)
    out = [ctx, softmax_max, softmax_sum, None, I(0), I(0), I(0)]
    b.api("NPU.npu_fusion_attention", [q, k, v, I(heads)], out, kwargs)


def unfused_attention(b: FileBuilder, path: str, q: TS, k: TS, v: TS, mask: TS, ctx: TS, heads: int) -> None:
    """Megatron's eager DotProductAttention: baddbmm, masked softmax, dropout, matmul and the layout shuffles."""
    d = b.dims
    flat = (d.seq, heads, d.head_dim)
    q3 = b.api("Tensor.reshape", [q, b.size(flat)], [TS(flat, "bf16", q.scale)])
    k3 = b.api("Tensor.view", [k, b.size(flat)], [TS(flat, "bf16", k.scale)])
    qt = b.api("Tensor.transpose", [q3, I(0), I(1)], [TS((heads, d.seq, d.head_dim), "bf16", q.scale)])
    kt = b.api("Tensor.transpose", [k3, I(0), I(1)], [TS((heads, d.seq, d.head_dim), "bf16", k.scale)])
    kt = b.api("Tensor.transpose", [kt, I(1), I(2)], [TS((heads, d.head_dim, d.seq), "bf16", k.scale)])
    buffer = TS((heads, d.seq, d.seq), "bf16", 1e30, grad=False)  # torch.empty: whatever memory held
    alpha = {"beta": F(0.0), "alpha": F(1 / math.sqrt(d.head_dim))}
    scores = b.api("Torch.baddbmm", [buffer, qt, kt], [TS((heads, d.seq, d.seq), "bf16", 3.0)], alpha)
    scores = b.api("Tensor.view", [scores, I(1), I(heads), I(d.seq), I(d.seq)], [TS((1, heads, d.seq, d.seq))])
    with b.module(f"{path}.scale_mask_softmax", "FusedScaleMaskSoftmax", [scores, mask]) as sm:
        # softmax_in_fp32: up-cast, mask, softmax, down-cast
        up = b.api("Tensor.float", [scores], [TS(scores.shape, "fp32", 3.0)])
        masked = b.api("Tensor.add", [up, mask], [TS(scores.shape, "fp32", 0.3, kind="mask")])
        probs = b.api("Functional.softmax", [masked], [TS(scores.shape, "fp32", 0.02)], {"dim": I(-1)})
        sm.out = [b.api("Tensor.bfloat16", [probs], [TS(scores.shape, "bf16", 0.02)])]
    with b.module(f"{path}.attention_dropout", "Dropout", sm.out) as dr:
        dr.out = [b.api("Functional.dropout", [sm.out[0], F(0.0), B(True), B(False)], [TS(scores.shape, "bf16", 0.02)])]
    probs = b.api("Tensor.view", [dr.out[0], I(heads), I(d.seq), I(d.seq)], [TS((heads, d.seq, d.seq), "bf16", 0.02)])
    v3 = b.api("Tensor.view", [v, b.size(flat)], [TS(flat, "bf16", v.scale)])
    vt = b.api("Tensor.transpose", [v3, I(0), I(1)], [TS((heads, d.seq, d.head_dim), "bf16", v.scale)])
    out = b.api("Torch.matmul", [probs, vt], [TS((heads, d.seq, d.head_dim), "bf16", 0.6)])
    out = b.api("Tensor.view", [out, I(1), I(heads), I(d.seq), I(d.head_dim)], [TS((1, heads, d.seq, d.head_dim))])
    out = b.api("Tensor.permute", [out, I(2), I(0), I(1), I(3)], [TS((d.seq, 1, heads, d.head_dim), "bf16", 0.6)])
    out = b.api("Tensor.contiguous", [out], [out])
    b.api("Tensor.view", [out, b.size(ctx.shape)], [ctx])


def rotary_tables(b: FileBuilder, rope: TS) -> tuple[TS, TS]:
    freqs = b.api("Tensor.__getitem__", [rope, [None, I(0)]], [rope], grad=False)
    tables = []
    for fn in ("Torch.cos", "Torch.sin"):
        t = b.api(fn, [freqs], [TS(rope.shape, "fp32", 0.7, grad=False)], grad=False)
        tables.append(b.api("Tensor.to", [t, b.dtype("bf16")], [TS(rope.shape, "bf16", 0.7, grad=False)], grad=False))
    return tables[0], tables[1]


def apply_rotary(b: FileBuilder, i: int, t: TS, cos: TS, sin: TS) -> TS:
    if fused_layer(i):
        return b.api("NPU.npu_rotary_mul", [t, cos, sin], [TS(t.shape, "bf16", t.scale)])
    # Megatron's _apply_rotary_pos_emb_bshd: t * cos + rotate_half(t) * sin
    half = (*t.shape[:-1], t.shape[-1] // 2)
    x1, x2 = b.api("Torch.chunk", [t, I(2)], [TS(half, "bf16", t.scale), TS(half, "bf16", t.scale)], {"dim": I(-1)})
    neg = b.api("Tensor.__neg__", [x2], [TS(half, "bf16", t.scale)])
    rot = b.api("Torch.cat", [[neg, x1]], [TS(t.shape, "bf16", t.scale)], {"dim": I(-1)})
    a = b.api("Tensor.mul", [t, cos], [TS(t.shape, "bf16", t.scale * 0.7)])
    c = b.api("Tensor.mul", [rot, sin], [TS(t.shape, "bf16", t.scale * 0.7)])
    return b.api("Tensor.add", [a, c], [TS(t.shape, "bf16", t.scale)])


def self_attention(b: FileBuilder, i: int, path: str, x: TS, kwargs: dict) -> tuple[TS, TS]:
    d = b.dims
    heads = d.heads // d.tp
    width = heads * d.head_dim
    p = f"{path}.self_attention"
    with b.module(p, "SelfAttention", [x], kwargs) as m:
        qkv, _ = linear(b, f"{p}.linear_qkv", "ColumnParallelLinear", x, 3 * width, bias=True, reduce=False)
        qkv4 = b.api("Tensor.view", [qkv, b.size((d.seq, 1, heads, 3 * d.head_dim))], [qkv])
        parts = [TS((d.seq, 1, heads, d.head_dim), "bf16", 0.7) for _ in range(3)]
        q, k, v = b.api("Torch.split", [qkv4, [I(d.head_dim)] * 3], parts, {"dim": I(3)})
        cos, sin = rotary_tables(b, kwargs["rotary_pos_emb"])
        q, k = apply_rotary(b, i, q, cos, sin), apply_rotary(b, i, k, cos, sin)
        ctx = core_attention(b, i, p, q, k, v)
        out, bias = linear(b, f"{p}.linear_proj", "RowParallelLinear", ctx, d.hidden, bias=True, reduce=True)
        m.out = [out, bias]
    return out, bias


def mlp(b: FileBuilder, path: str, x: TS) -> TS:
    d = b.dims
    width = d.ffn // d.tp
    p = f"{path}.mlp"
    with b.module(p, "MLP", [x]) as m:
        h, _ = linear(b, f"{p}.linear_fc1", "ColumnParallelLinear", x, 2 * width, bias=False, reduce=False)
        halves = [TS((d.seq, 1, width), "bf16", 0.9), TS((d.seq, 1, width), "bf16", 0.9)]
        gate, up = b.api("Torch.chunk", [h, I(2)], halves, {"dim": I(-1)})
        act = b.api("Functional.silu", [gate], [TS(gate.shape, "bf16", 0.5)])
        y = b.api("Tensor.mul", [act, up], [TS(gate.shape, "bf16", 0.4)])
        out, _ = linear(b, f"{p}.linear_fc2", "RowParallelLinear", y, d.hidden, bias=False, reduce=True)
        m.out = [out, None]
    return out


def bias_dropout_add(b: FileBuilder, x: TS, bias: TS | None, residual: TS, scale: float) -> TS:
    if bias is not None:  # skip_bias_add: the linear layer handed its bias over instead of adding it
        x = b.api("Tensor.add", [x, bias], [TS(x.shape, "bf16", x.scale)])
    y = b.api("Functional.dropout", [x, F(0.1), B(True)], [TS(x.shape, "bf16", x.scale)])
    return b.api("Tensor.add", [y, residual], [hidden(b.dims, scale)])


def transformer_layer(b: FileBuilder, i: int, h: TS, kwargs: dict, parent_key: str) -> TS:
    p = f"decoder.layers.{i}"
    scale = 1.0 + 0.08 * i  # the residual stream grows with depth
    with b.module(p, "TransformerLayer", [h], kwargs) as m:
        x = rms_norm(b, f"{p}.input_layernorm", h, fused=False)
        a, bias = self_attention(b, i, p, x, kwargs)
        h1 = bias_dropout_add(b, a, bias, h, scale + 0.04)
        x = rms_norm(b, f"{p}.pre_mlp_layernorm", h1, fused=False)
        y = mlp(b, p, x)
        out = bias_dropout_add(b, y, None, h1, scale + 0.08)
        m.out = [out, None]
    if b.opts.recompute and not b.in_recompute and i < (b.opts.layers + 1) // 2:
        # Block recomputation of the first half of the layers: the forward runs again in the backward pass.
        m.rerun = lambda: b.recomputed(parent_key, lambda: transformer_layer(b, i, h, kwargs, parent_key))
    return out


def embedding(b: FileBuilder, tokens: TS, position_ids: TS) -> TS:
    d = b.dims
    shard = d.vocab // d.tp
    weight = b.params("embedding.word_embeddings", {"weight": TS((shard, d.hidden), "bf16", 0.02)})["weight"]
    # A parameter listing with a dotted name, as dumpers that recurse into submodules write it.
    params = {"word_embeddings.weight": weight}
    with b.module("embedding", "LanguageModelEmbedding", [tokens, position_ids], params=params, grads=False) as m:
        with b.module("embedding.word_embeddings", "VocabParallelEmbedding", [tokens], params={"weight": weight}) as w:
            low = b.api("Tensor.__lt__", [tokens, I(0)], [TS(tokens.shape, "bool", grad=False)], grad=False)
            high = b.api("Tensor.__ge__", [tokens, I(shard)], [TS(tokens.shape, "bool", grad=False)], grad=False)
            outside = b.api("Tensor.__or__", [low, high], [TS(tokens.shape, "bool", grad=False)], grad=False)
            local = b.api(
                "Tensor.sub", [tokens, I(0)], [TS(tokens.shape, "i64", shard, grad=False)], grad=False, legacy=True
            )
            b.api("Tensor.__setitem__", [local, outside, I(0)], [None], grad=False)
            emb = b.api("Functional.embedding", [local, weight], [TS((1, d.seq, d.hidden), "bf16", 0.02)])
            b.api("Distributed.all_reduce", [emb], [emb], {"group": None}, grad=False)
            w.out = [emb]
        emb = b.api("Tensor.transpose", [emb, I(0), I(1)], [TS((d.seq, 1, d.hidden), "bf16", 0.02)])
        emb = b.api("Tensor.contiguous", [emb], [emb])
        emb = b.api("Functional.dropout", [emb, F(0.1), B(True)], [hidden(d, 0.02)])
        m.out = [emb]
    return emb


def rotary(b: FileBuilder) -> TS:
    d = b.dims
    with b.module("rotary_pos_emb", "RotaryEmbedding", [I(d.seq)]) as m:
        seq = b.api("Torch.arange", [I(d.seq)], [TS((d.seq,), "fp32", d.seq / 2, grad=False)], grad=False)
        inv = TS((d.head_dim // 2,), "fp32", 0.3, grad=False)
        freqs = b.api("Torch.outer", [seq, inv], [TS((d.seq, d.head_dim // 2), "fp32", 500.0, grad=False)], grad=False)
        emb = TS((d.seq, d.head_dim), "fp32", 500.0, grad=False)
        b.api("Torch.cat", [[freqs, freqs]], [emb], {"dim": I(-1)}, grad=False)  # a list argument: nested list
        out = TS((d.seq, 1, 1, d.head_dim), "fp32", 500.0, grad=False)
        b.api("Tensor.__getitem__", [emb, [None, None, None]], [out], grad=False)
        m.out = [out]
    return out


def decoder(b: FileBuilder, h: TS, mask: TS, rope: TS) -> TS:
    kwargs = {"attention_mask": mask, "rotary_pos_emb": rope, "inference_params": None, "packed_seq_params": None}
    with b.module("decoder", "TransformerBlock", [h], kwargs) as m:
        for i in range(b.opts.layers):
            h = transformer_layer(b, i, h, kwargs, m.key)
        h = rms_norm(b, "decoder.final_norm", h, fused=True)
        m.out = [h]
    return h


def vocab_parallel_loss(b: FileBuilder, logits: TS, labels: TS) -> TS:
    d = b.dims
    shard = logits.shape[-1]
    lf = b.api("Tensor.float", [logits], [TS(logits.shape, "fp32", logits.scale)])
    row = TS((d.seq, 1), "fp32", 8.0)
    mx, _ = b.api("Torch.max", [lf], [row, TS((d.seq, 1), "i64", shard, grad=False)], {"dim": I(-1)})
    b.api("Distributed.all_reduce", [mx], [mx], {"op": S("MAX")}, grad=False)
    shifted = b.api("Tensor.sub", [lf, mx], [TS(logits.shape, "fp32", 2.0)])
    ex = b.api("Torch.exp", [shifted], [TS(logits.shape, "fp32", 0.01)])
    total = b.api("Tensor.sum", [ex], [TS((d.seq, 1), "fp32", 40.0)], {"dim": I(-1)})
    b.api("Distributed.all_reduce", [total], [total], grad=False)
    logs = b.api("Torch.log", [total], [TS((d.seq, 1), "fp32", 3.0)])
    picked = TS((d.seq, 1), "fp32", 2.0)
    b.api("Torch.gather", [shifted, I(-1), labels], [picked])
    loss = b.api("Tensor.sub", [logs, picked], [TS((d.seq, 1), "fp32", 2.5)])
    return b.api("Tensor.transpose", [loss, I(0), I(1)], [TS((1, d.seq), "fp32", 2.5)])


def gpt_model(b: FileBuilder, tokens: TS, labels: TS) -> TS:
    d = b.dims
    position_ids = TS((1, d.seq), "i64", d.seq, grad=False)
    mask = TS((1, 1, d.seq, d.seq), "bool", grad=False)
    with b.module("", "GPTModel", [tokens, position_ids, mask], {"labels": labels, "inference_params": None}) as m:
        h = embedding(b, tokens, position_ids)
        rope = rotary(b)
        h = decoder(b, h, mask, rope)
        shard = d.vocab // d.tp
        logits, _ = linear(b, "output_layer", "ColumnParallelLinear", h, shard, bias=False, reduce=False)
        m.out = [vocab_parallel_loss(b, logits, labels)]
    return m.out[0]


def micro_batch(b: FileBuilder) -> None:
    d = b.dims
    tokens = TS((1, d.seq), "i64", d.vocab, grad=False)
    labels = TS((1, d.seq), "i64", d.vocab, grad=False)
    # get_batch and loss_func run outside any module: null (MindSpore: "") parents.
    b.api("Tensor.to", [tokens, b.dtype("i64")], [tokens], {"non_blocking": B(True)}, grad=False, legacy=True)
    b.api("Tensor.to", [labels, b.dtype("i64")], [labels], {"non_blocking": B(True)}, grad=False, legacy=True)
    loss = gpt_model(b, tokens, labels)
    mask = TS((1, d.seq), "fp32", 1.0, grad=False)
    masked = b.api("Tensor.mul", [loss, mask], [TS(loss.shape, "fp32", 2.5)], legacy=True)
    total = b.api("Torch.sum", [masked], [TS((), "fp32", 1e4)], legacy=True)
    mean = b.api("Tensor.div", [total, F(float(d.seq))], [TS((), "fp32", 2.5)], legacy=True)
    b.api("Distributed.all_reduce", [TS((1,), "fp32", 2.5, grad=False)], [None], grad=False, legacy=True)
    b.api("Tensor.mul", [mean, F(1.0 / b.opts.micro_batches)], [TS((), "fp32", 1.2)])
    b.backward(b.top)
    b.parameter_grads()


def clip_grad(b: FileBuilder) -> None:
    b.node("clip_grad", None)
    b.stack = [Call("clip_grad", True)]
    grads = TS((b.opts.layers * 1024 * 1024,), "fp32", 1e-5, grad=False)
    norm = b.api("Torch.norm", [grads, F(2.0)], [TS((), "fp32", 1.0, grad=False)], grad=False)
    b.api("Distributed.all_reduce", [norm], [norm], grad=False)
    # The global grad norm as a Python-side double, as some Megatron versions compute it.
    total = b.api("Torch.tensor", [F(1.0)], [TS((), "fp64", 1.0, grad=False)], {"dtype": b.dtype("fp64")}, grad=False)
    coef = b.api("Torch.clamp", [total], [TS((), "fp64", 1.0, grad=False)], {"max": F(1.0)}, grad=False)
    b.api("Tensor.mul_", [grads, coef], [grads], grad=False)
    b.stack = []


def optimizer(b: FileBuilder) -> None:
    """The optimizer phase: one more construct root, then an eager AdamW update of every parameter."""
    b.node("optimizer", None)
    b.stack = [Call("optimizer", True)]
    first = True
    for params in b.weights.values():
        for weight in params.values():
            # The first parameter is sharded (a DTensor), as with FSDP2 / distributed optimizers.
            adamw_update(b, weight.shape, "alt" if first else "plain")
            first = False
    overflow_check(b)
    b.stack = []


def adamw_update(b: FileBuilder, shape: tuple[int, ...], kind: str) -> None:
    def fp32(scale: float, k: str = "plain") -> TS:
        return TS(shape, "fp32", scale, grad=False, kind=k)

    param, grad, exp_avg, exp_avg_sq = fp32(0.02, kind), fp32(1e-5), fp32(1e-6), fp32(1e-10)
    master = b.api("Torch.clone", [param], [fp32(0.02, kind)], {"memory_format": None}, grad=False)
    b.api("Tensor.mul_", [exp_avg, F(0.9)], [exp_avg], grad=False)
    b.api("Tensor.add_", [exp_avg, grad], [exp_avg], {"alpha": F(0.1)}, grad=False)
    b.api("Tensor.mul_", [exp_avg_sq, F(0.999)], [exp_avg_sq], grad=False)
    b.api("Tensor.addcmul_", [exp_avg_sq, grad, grad], [exp_avg_sq], {"value": F(0.001)}, grad=False)
    denom = b.api("Torch.sqrt", [exp_avg_sq], [fp32(1e-5)], grad=False)
    denom = b.api("Tensor.add_", [denom, F(1e-8)], [denom], grad=False)
    b.api("Tensor.addcdiv_", [master, exp_avg, denom], [master], {"value": F(-3e-4)}, grad=False)
    b.api("Tensor.copy_", [TS(shape, "bf16", 0.02, grad=False), master], [TS(shape, "bf16", 0.02)], grad=False)


def overflow_check(b: FileBuilder) -> None:
    """An fp16 loss-scale overflow: every file holds NaN, ±Infinity, a string and a huge value at least once."""
    numel = 1024 * 1024
    scaled = b.tensor(TS((numel,), "fp16", 1.0, grad=False))
    scaled.update({"Max": math.inf, "Min": -math.inf, "Mean": math.nan, "Norm": math.inf})
    odd = b.tensor(TS((numel,), "fp32", 1.0, grad=False))
    odd.update({"Max": " 3.5 ", "Min": "-inf", "Mean": "nan", "Norm": 3.2e12})
    found_inf = {**b.tensor(TS((1,), "fp32", 1.0, grad=False)), "Max": 1.0, "Min": 1.0, "Mean": 1.0, "Norm": 1.0}
    b.api("Torch._amp_foreach_non_finite_check_and_unscale_", [[scaled], found_inf, odd], [None], grad=False)


def tiny_micro_batch(b: FileBuilder) -> None:
    """One linear module and its API, forward and backward: a file set of a few kB, for benchmarks of many files."""
    x = TS((8, 64))
    weight = b.params("linear", {"weight": TS((64, 64), scale=0.02)})
    with b.module("linear", "Linear", [x], params=weight) as m:
        m.out = [b.api("Functional.linear", [x, weight["weight"]], [TS((8, 64))])]
    b.backward(b.top)
    b.parameter_grads()


def build_file(opts: Opts, step: int, rank: int) -> tuple[dict, dict]:
    b = FileBuilder(opts, step, rank)
    for mb in range(opts.micro_batches):
        b.mb, b.top, b.param_modules = mb, [], {}
        (tiny_micro_batch if opts.tiny else micro_batch)(b)
    b.mb = opts.micro_batches - 1  # Megatron tags the optimizer phase with the last micro step
    if not opts.tiny:
        clip_grad(b)
        optimizer(b)
    dump = {"task": "statistics", "level": opts.level, "framework": opts.framework, "dump_data_dir": None}
    dump["data"] = b.data
    construct = b.construct
    if opts.construct == "megatron" and b.modules:
        construct = {"megatron_micro_step_number": opts.micro_batches, **construct}
    return dump, construct


def write_json(path: Path, obj, indent: int = 1) -> int:
    """As msprobe writes its files: Python's json module (bare NaN, Infinity); indent 0 puts it all on one line."""
    with path.open("w", encoding="utf-8") as f:
        json.dump(obj, f, indent=indent or None)
    return path.stat().st_size


def item_dir_name(opts: Opts, rank: int) -> str:
    return f"proc{fake_pid(rank, opts.seed)}" if opts.procs else f"rank{rank}"


def generate(
    out: Path,
    *,
    steps: int,
    ranks: int,
    layers: int,
    micro_batches: int = 2,
    seed: int = 0,
    framework: str = "pytorch",
    construct: str = "megatron",
    procs: bool = False,
    recompute: bool = False,
    old_grad_counter: bool = False,
    level: str = "mix",
    indent: int = 1,
    long_keys: bool = False,
    non_tensors: int = 0,
    small_tensors: bool = False,
    tiny: bool = False,
) -> GenSummary:
    """Write ``out/step{s}/rank{r}/{dump.json,construct.json}`` for every step and rank; return what was written."""
    if framework not in FLAVORS or construct not in ("megatron", "plain"):
        raise ValueError(f"unsupported framework/construct: {framework!r}/{construct!r}")
    if min(steps, ranks, layers, micro_batches) < 1:
        raise ValueError("steps, ranks, layers and micro_batches must be >= 1")
    if level not in LEVELS or indent not in INDENTS or non_tensors < 0:
        raise ValueError(f"unsupported level/indent/non_tensors: {level!r}/{indent!r}/{non_tensors!r}")
    opts = Opts(steps, ranks, layers, micro_batches, seed, framework, construct, procs, recompute, old_grad_counter)
    opts = dataclasses.replace(
        opts,
        level=level,
        indent=indent,
        long_keys=long_keys,
        non_tensors=non_tensors,
        small_tensors=small_tensors,
        tiny=tiny,
    )
    files = total = 0
    for step in range(steps):
        for rank in range(ranks):
            item = Path(out) / f"step{step}" / item_dir_name(opts, rank)
            item.mkdir(parents=True, exist_ok=True)
            dump, construct_obj = build_file(opts, step, rank)
            total += write_json(item / "dump.json", dump, indent)
            total += write_json(item / "construct.json", construct_obj, indent)
            files += 2
    return GenSummary(files=files, total_bytes=total)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m datagen.dump", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="directory that receives step*/rank*/")
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--ranks", type=int, required=True)
    p.add_argument("--layers", type=int, required=True)
    p.add_argument("--micro-batches", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--framework", choices=sorted(FLAVORS), default="pytorch")
    p.add_argument("--construct", choices=["megatron", "plain"], default="megatron")
    p.add_argument("--procs", action="store_true", help="name rank directories proc<pid>")
    p.add_argument("--recompute", action="store_true", help="recompute the first half of the layers (is_recompute)")
    p.add_argument("--old-grad-counter", action="store_true", help="do not reset the parameters_grad counter per step")
    p.add_argument("--level", choices=LEVELS, default="mix", help="L1: API calls only, construct.json {}")
    p.add_argument("--indent", type=int, choices=INDENTS, default=1, help="JSON indent; 0: one line (default 1)")
    p.add_argument("--long-keys", action="store_true", help="FSDP and checkpoint wrappers in every module path")
    p.add_argument("--non-tensors", type=int, default=0, metavar="N", help="N more non-tensor kwargs per API call")
    p.add_argument("--small-tensors", action="store_true", help="a tiny model: short shapes")
    p.add_argument("--shape", choices=sorted(SHAPES), help="one of the benchmarks' shapes (overrides the above)")
    p.add_argument("--tiny", action="store_true", help="one linear module per micro batch (a few kB; --layers unused)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)
    settings = {name: getattr(a, name) for name in SETTINGS}
    summary = generate(a.out, steps=a.steps, ranks=a.ranks, layers=a.layers, **{**settings, **SHAPES.get(a.shape, {})})
    print(f"wrote {summary.files} files, {summary.total_bytes} bytes to {a.out}")


# generate's keyword arguments that the command line passes on as they are
SETTINGS = ("micro_batches", "seed", "framework", "construct", "procs", "recompute", "old_grad_counter", "level")
SETTINGS += ("indent", "long_keys", "non_tensors", "small_tensors", "tiny")


if __name__ == "__main__":
    main()
