"""Deterministic generator of msprobe training-monitor (TrainerMon, ``"format": "csv"``) output of a Megatron-core GPT.

Writes, directly under OUT, one run directory per rank, ``<Mon><DD>_<HH>-<MM>-<SS>-rank<R>-<uuid8>``, holding
``<metric>_<start>-<end>.csv`` files of the nine metrics data2db reads (actv, actv_grad, grad_unreduced, grad_reduced,
exp_avg, exp_avg_sq, param_origin, param_updated, other) exactly as docs/monitor-format.md §2 describes and as msprobe's
CSVWriterWithAD writes them: the header once per file, then one append per write (per module for ``actv``), values
rounded like ``DataFrame.round(6)`` and printed in Python's shortest form (``1e-06``, ``-0.0``, ``nan``, ``inf``),
``"[4096, 1, 4096]"`` shapes, ``torch.bfloat16`` dtypes and the all-``nan`` row of every ``None`` output (the bias slot
of Megatron linear layers). The model is a Llama-7B-like GPT (hidden 4096, TE layer spec, no biases) split by
tensor / pipeline / virtual-pipeline parallelism, with layer indices local to each model chunk. Optional ``extras`` add
what real output directories contain besides (hook files, split ``_part_`` files, ``.csv.bak`` copies, a second run,
``anomaly_detected/``, ``module_struct/``, ``stack_info.csv``, a header-only file, a sub-directory).

Per rank and step there are ``micro_batches * (27 L + 10)`` actv rows, ``micro_batches * (24 L + 8)`` actv_grad
rows and ``6 L + 3`` rows per weight-side metric for ``L`` local layers of a single chunk holding embedding and
output layer; this reproduces the row counts of the reference benchmark inputs (docs/monitor-format.md §14).

Library: ``generate(out, ranks=..., steps=..., layers=...)``. CLI: ``python -m datagen.monitor --help``.
The same arguments always give the same bytes, whatever ``procs``: every file and step draws from its own
``random.Random`` seeded from a string (hashed with SHA-512, so PYTHONHASHSEED plays no part).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import math
import multiprocessing
import random
import re
import shutil
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from datagen.dump import Dims  # the same Llama-7B-like shapes (micro-batch size 1)

ALL_NINE = (
    "actv",
    "actv_grad",
    "grad_unreduced",
    "grad_reduced",
    "exp_avg",
    "exp_avg_sq",
    "param_origin",
    "param_updated",
    "other",
)
DEFAULT_OPS = ("min", "max", "norm", "zeros", "nans", "mean")
# The monitor's allowed ops (MonitorConst.OP_LIST) and each one's slot in the value tuple a row is rendered from.
OP_SLOT = {"norm": 0, "min": 1, "max": 2, "zeros": 3, "nans": 4, "id": 5, "mean": 6, "shape": 7, "dtype": 8}
EXTRAS = (
    "anomaly_detected",
    "module_struct",
    "stack_info",
    "hooks",
    "parts",
    "bak",
    "header_only",
    "second_run",
    "subdir",
)
# L2 feature hooks: fixed stat columns and whether the file has a micro_step column (module_hook.py).
HOOKS = {
    "attention_hook": (("entropy", "softmax_max"), True),
    "linear_hook": (("sr", "kernel_norm"), False),
    "moe_router_weight_hook": (("router_weight_similarity",), False),
    "moe_router_logit_hook": (("per_token_expert_entropy",), True),
}
WRITER_MAX_ROWS = 1_000_000  # FileCheckConst.MAX_ROWS_PER_CSV_FILE: a bigger single write goes to _part_<i> files
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")  # %b without a locale
BF16, FP32, I64 = "torch.bfloat16", "torch.float32", "torch.int64"
NAN = math.nan
MODEL_PREFIX = "module.module."  # every Megatron model chunk is DDP(Float16Module(GPTModel))
SUBDIR = "old"  # the "subdir" extra
# squash_param_name's patterns, tried in this order; greedy, so the last match of each wins.
SQUASH_PATTERNS = tuple(
    re.compile(p)
    for p in (r"^.*\.(layers?\..*)", r"^.*\.(embeddings?\..*)", r"^.*\.(final.*)", r"^.*\.(output.*)", r"^.*\.(norm.*)")
)


@dataclass(frozen=True)
class GenSummary:
    """What ``generate`` wrote.

    ``files`` and ``bytes`` count every file written (extras included); ``rows`` counts the data rows of the nine
    metrics' ``<metric>_<a>-<b>.csv`` files at the top of the run directories (header-only files add 0; ``_part_``
    pieces, ``.bak`` copies, hook files and sub-directory copies are not counted), i.e. what a converter imports when
    no run is duplicated. ``runs`` lists ``(rank, run directory name)`` in generation order.
    """

    run_dirs: int
    files: int
    rows: int
    bytes: int
    runs: tuple[tuple[int, str], ...]


@dataclass(frozen=True)
class Opts:
    """The normalised arguments of ``generate``; picklable, so worker processes get the whole job description."""

    ranks: int
    steps: tuple[int, ...]
    layers: int
    micro_batches: int
    k: int
    metrics: tuple[str, ...]
    columns: tuple[str, ...]  # the ops columns of a row, shape and dtype included
    seed: int
    tp: int
    pp: int
    vpp: int
    squash_name: bool
    monitor_mbs_grad: bool
    integer_counts: bool
    extras: frozenset[str]
    nan_every: int
    part_rows: int | None
    late_rank: int | None


@dataclass(frozen=True)
class Job:
    """One run directory to write."""

    opts: Opts
    rank: int
    run: int  # 0: the job's run; 1: the later "second_run" of one rank
    name: str


# -- value formatting ----------------------------------------------------------------------------------------------
def r6(x: float) -> float:
    """``DataFrame.round(6)``: numpy multiplies by 1e6, rounds half to even and divides, keeping the sign of zero."""
    if not math.isfinite(x):
        return x
    y = round(x * 1e6) / 1e6
    return y if y else math.copysign(0.0, x)


def fmt(x: float) -> str:
    """A rounded cell as pandas writes it: Python's shortest repr; ``nan``, ``inf``, ``-inf`` as such.

    ``r6`` inlined: this runs for every cell of the benchmark output.
    """
    if x - x == 0.0:  # finite
        y = round(x * 1e6) / 1e6
        if y:
            return repr(y)
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    return repr(x)


def bf16(x: float) -> float:
    """Round to bfloat16 (8 significant bits, half to even): min/max of a bf16 tensor are bf16 values."""
    if x == 0 or not math.isfinite(x):
        return x
    m, e = math.frexp(x)
    return math.ldexp(round(m * 256) / 256, e)


def shape_cell(shape: tuple[int, ...]) -> str:
    text = str(list(shape))
    return f'"{text}"' if "," in text else text  # the csv writer quotes cells that contain the delimiter


def columns_of(ops: Sequence[str]) -> tuple[str, ...]:
    """The monitor's ops filter (docs/monitor-format.md §2.3): user order, unknown names dropped, ``norm`` if none
    left, then shape/dtype."""
    kept = []
    for op in ops:
        if op not in OP_SLOT:
            warnings.warn(f"unsupported op {op!r} dropped, as the monitor does", stacklevel=3)
        elif op not in kept:
            kept.append(op)
    kept = kept or ["norm"]
    return tuple(kept + [c for c in ("shape", "dtype") if c not in kept])


def header_line(columns: Sequence[str], micro: bool) -> str:
    base = "vpp_stage,name,step,micro_step" if micro else "vpp_stage,name,step"
    return ",".join([base, *columns]) + "\n"


def has_micro(metric: str, opts: Opts) -> bool:
    return metric in ("actv", "actv_grad") or (metric == "grad_unreduced" and opts.monitor_mbs_grad)


def squash(name: str, enabled: bool) -> str:
    """``squash_param_name``: the part from the last ``.layers.`` / ``.embedding.`` / ``.final`` / ``.output`` on."""
    if not enabled:
        return name
    for pattern in SQUASH_PATTERNS:
        found = pattern.findall(name)
        if found:
            return found[0]
    return name


# -- the model -----------------------------------------------------------------------------------------------------
class T:
    """A monitored tensor: shape, dtype, typical element size and how its statistics are drawn.

    ``kind``: ``float`` (zero-centred), ``sparse`` (embedding gradient: untouched vocabulary rows are zero),
    ``ids`` (token ids; ``scale`` is the vocabulary size), ``pos`` (position ids),
    ``rope`` (the fixed cos/sin table; ``scale`` is its mean),
    ``ln`` (norm weights around 1), ``sq`` (Adam's second moment, non-negative), ``scalar`` (0-d mg_direction).
    ``draw`` turns one into statistics; ``level`` scales them with the training progress.
    """

    __slots__ = ("shape", "dtype", "scale", "kind", "numel")

    def __init__(self, shape: tuple[int, ...], dtype: str = BF16, scale: float = 1.0, kind: str = "float") -> None:
        self.shape, self.dtype, self.scale, self.kind = shape, dtype, scale, kind
        self.numel = math.prod(shape)


@dataclass(frozen=True)
class Module:
    """A hooked module: forward inputs/outputs (``actv``) and backward grad_input/grad_output (``actv_grad``)."""

    name: str
    fwd_in: tuple[T | None, ...]
    fwd_out: tuple[T | None, ...]
    bwd_in: tuple[T | None, ...]
    bwd_out: tuple[T | None, ...]


@dataclass
class Chunk:
    """One model chunk (vpp stage): modules in forward-finish order and backward order, parameters in order."""

    fwd: list[Module] = field(default_factory=list)
    bwd: list[Module] = field(default_factory=list)
    params: list[tuple[str, tuple[int, ...], str]] = field(default_factory=list)  # (name, shape, weight|ln|emb)


class ChunkBuilder:
    """Builds a chunk; the jitter makes every tensor's typical size a little different, fixed per model position.

    A tensor that several modules see (the hidden state entering a layer, a linear layer's output that its parent
    returns, the token ids) is one ``T`` object, so its rows show the same statistics in the same micro-batch. Its
    gradient is likewise one object per tensor and consumer branch (``grad(t, branch)``): the gradient entering the
    attention branch of a layer is not the total gradient of the residual stream.
    """

    ACT_GRAD = 2e-5  # typical activation gradient (msprobe monitor output: norm 0.07 over 16.7M elements)

    def __init__(self, dims: Dims, rng: random.Random) -> None:
        self.d, self.rng, self.chunk = dims, rng, Chunk()
        self.grads: dict[tuple[int, str], tuple[T, T | None]] = {}  # keeps the tensor alive so its id stays unique

    def jitter(self) -> float:
        return self.rng.lognormvariate(0.0, 0.12)

    def act(self, shape: tuple[int, ...], scale: float, dtype: str = BF16) -> T:
        return T(shape, dtype, scale * self.jitter())

    def grad(self, t: T | None, branch: str = "") -> T | None:
        """The gradient of a forward tensor; None (a nan row) where none flows, e.g. into token ids."""
        if t is None or t.kind != "float":
            return None
        key = (id(t), branch)
        if key not in self.grads:
            self.grads[key] = (t, T(t.shape, t.dtype, self.ACT_GRAD * self.jitter()))
        return self.grads[key][1]

    def module(self, name: str, ins: tuple, outs: tuple, bwd_ins: tuple | None = None) -> Module:
        """``bwd_ins`` (gradients) defaults to the gradients of all inputs; backward sees positional inputs only."""
        bwd_in = tuple(self.grad(t) for t in ins) if bwd_ins is None else bwd_ins
        m = Module(MODEL_PREFIX + name, ins, outs, bwd_in, tuple(self.grad(t) for t in outs))
        self.chunk.fwd.append(m)
        return m

    def param(self, name: str, shape: tuple[int, ...], kind: str = "weight") -> None:
        self.chunk.params.append((MODEL_PREFIX + name, shape, kind))

    def hidden(self, scale: float) -> T:
        return self.act((self.d.seq, 1, self.d.hidden), scale)

    def linear(self, name: str, x: T, out_features: int, scale: float, branch: str = "") -> tuple[T, Module]:
        """A TE linear layer: its output is the tuple ``(output, bias)`` with bias None (no biases in this model)."""
        y = self.act((*x.shape[:-1], out_features), scale)
        return y, self.module(name, (x,), (y, None), bwd_ins=(self.grad(x, branch),))


def embedding(b: ChunkBuilder) -> tuple[T, list[Module]]:
    d = b.d
    ids = T((1, d.seq), I64, float(d.vocab), "ids")
    positions = T((1, d.seq), I64, float(d.seq), "pos")
    words = b.module("embedding.word_embeddings", (ids,), (b.act((1, d.seq, d.hidden), 0.6),))
    b.param("embedding.word_embeddings.weight", (d.vocab // d.tp, d.hidden), "emb")
    out = b.hidden(0.6)  # LanguageModelEmbedding transposes to [s, b, h]
    # Called with keyword arguments only, so no .input rows in backward.
    emb = b.module("embedding", (ids, positions), (out,), bwd_ins=())
    return out, [emb, words]


def transformer_layer(b: ChunkBuilder, i: int, h: T, rope: T) -> tuple[T, list[Module]]:
    """A TE-spec layer: the norms are fused into linear_qkv / linear_fc1, so those see the residual stream itself."""
    d, p = b.d, f"decoder.layers.{i}."
    heads = (d.seq, 1, d.heads // d.tp, d.head_dim)
    _, qkv = b.linear(p + "self_attention.linear_qkv", h, 3 * d.hidden // d.tp, 1.2, branch="attn")
    q, k, v = b.act(heads, 1.2), b.act(heads, 1.2), b.act(heads, 0.9)
    ctx = b.act((d.seq, 1, d.hidden // d.tp), 0.3)
    core = b.module(p + "self_attention.core_attention", (q, k, v), (ctx,))
    proj_out, proj = b.linear(p + "self_attention.linear_proj", ctx, d.hidden, 0.5)
    # rotary_pos_emb is a keyword argument: an input in forward, not in backward.
    attn = b.module(p + "self_attention", (h, rope), (proj_out, None), bwd_ins=(b.grad(h, "attn"),))
    mid = b.act(h.shape, h.scale * 1.05)  # the residual stream after attention
    _, fc1 = b.linear(p + "mlp.linear_fc1", mid, 2 * d.ffn // d.tp, 1.0, branch="mlp")
    fc2_out, fc2 = b.linear(p + "mlp.linear_fc2", b.act((d.seq, 1, d.ffn // d.tp), 0.3), d.hidden, 0.4)
    mlp = b.module(p + "mlp", (mid,), (fc2_out, None), bwd_ins=(b.grad(mid, "mlp"),))
    out = b.act(h.shape, h.scale * 1.1)  # the residual stream grows along the layers
    # TransformerBlock calls each layer with keyword arguments only; the second output is the (None) context.
    layer = b.module(p[:-1], (h, rope), (out, None), bwd_ins=())
    b.param(p + "self_attention.linear_proj.weight", (d.hidden, d.hidden // d.tp))
    b.param(p + "self_attention.linear_qkv.layer_norm_weight", (d.hidden,), "ln")
    b.param(p + "self_attention.linear_qkv.weight", (3 * d.hidden // d.tp, d.hidden))
    b.param(p + "mlp.linear_fc1.layer_norm_weight", (d.hidden,), "ln")
    b.param(p + "mlp.linear_fc1.weight", (2 * d.ffn // d.tp, d.hidden))
    b.param(p + "mlp.linear_fc2.weight", (d.hidden, d.ffn // d.tp))
    # Full backward hooks fire as the gradient reaches each module's inputs: children before parents, last first.
    return out, [fc2, fc1, mlp, proj, core, qkv, attn, layer]


def output_head(b: ChunkBuilder, h: T) -> list[Module]:
    d = b.d
    normed = b.hidden(1.0)
    final = b.module("decoder.final_layernorm", (h,), (normed,))
    b.param("decoder.final_layernorm.weight", (d.hidden,), "ln")
    _, out = b.linear("output_layer", normed, d.vocab // d.tp, 3.0)
    b.param("output_layer.weight", (d.vocab // d.tp, d.hidden))
    return [out, final]


def gpt_chunk(dims: Dims, n_layers: int, first: bool, last: bool, rng: random.Random) -> Chunk:
    """One pipeline chunk: embedding on the first, final norm and output layer on the last, local layer indices."""
    b = ChunkBuilder(dims, rng)
    h, emb_bwd = embedding(b) if first else (b.hidden(0.6), [])
    rope = T((dims.seq, 1, 1, dims.head_dim), FP32, round(rng.uniform(0.15, 0.2), 6), "rope")
    layer_bwd: list[Module] = []
    for i in range(n_layers):
        h, mods = transformer_layer(b, i, h, rope)
        layer_bwd = mods + layer_bwd
    head_bwd = output_head(b, h) if last else []
    b.chunk.bwd = head_bwd + layer_bwd + emb_bwd
    return b.chunk


def position(rank: int, opts: Opts) -> tuple[int, int, int]:
    """Megatron's rank order: tensor-parallel rank fastest, then data-parallel, then pipeline stage."""
    dp = opts.ranks // (opts.tp * opts.pp)
    return rank % opts.tp, rank // opts.tp % dp, rank // (opts.tp * dp)


def rank_chunks(rank: int, opts: Opts) -> list[Chunk]:
    tp_rank, _, pp_rank = position(rank, opts)
    per_chunk = opts.layers // (opts.pp * opts.vpp)
    chunks = []
    for v in range(opts.vpp):
        # Keyed by model position only: data-parallel replicas hold the same model, so the same tensor sizes.
        rng = rng_for(opts, 0, "model", tp_rank, pp_rank, v)
        first, last = pp_rank == 0 and v == 0, pp_rank == opts.pp - 1 and v == opts.vpp - 1
        chunks.append(gpt_chunk(Dims(tp=opts.tp), per_chunk, first, last, rng))
    return chunks


def rng_for(opts: Opts, run: int, *key: object) -> random.Random:
    return random.Random("/".join(map(str, ("gen_monitor", opts.seed, run, *key))))


# -- rows ----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Entry:
    """One row of a write without its step and values: ``<pre><step><mid><values>``."""

    pre: str  # "<vpp>,<name>,"
    mid: str  # ",<micro>," or ","
    key: str  # "<vpp>:<unsquashed name>:<micro>", to find the row that gets a NaN / inf
    t: T | None
    shape: str
    dtype: str


def role_names(name: str, role: str, tensors: tuple) -> list[str]:
    """``.input`` for one tensor, ``.input_0``, ``.input_1``… for several (build_tbtag_tensor_map)."""
    if len(tensors) == 1:
        return [f"{name}.{role}"]
    return [f"{name}.{role}_{i}" for i in range(len(tensors))]


def entry(v: int, name: str, micro: int | None, t: T | None, squashed: str) -> Entry:
    mid = "," if micro is None else f",{micro},"
    key = row_key(v, name, micro)
    if t is None:
        return Entry(f"{v},{squashed},", mid, key, None, "nan", "nan")
    return Entry(f"{v},{squashed},", mid, key, t, shape_cell(t.shape), t.dtype)


def row_key(v: int, name: str, micro: int | None) -> str:
    return f"{v}:{name}:{micro}"


def module_rows(v: int, m: Module, backward: bool, micro: int, sq: bool) -> list[Entry]:
    ins, outs = (m.bwd_in, m.bwd_out) if backward else (m.fwd_in, m.fwd_out)
    short = squash(m.name, sq)
    rows = []
    for role, tensors in (("input", ins), ("output", outs)):
        for full, shortened, t in zip(role_names(m.name, role, tensors), role_names(short, role, tensors), tensors):
            rows.append(entry(v, full, micro, t, shortened))
    return rows


def actv_writes(chunks: list[Chunk], opts: Opts) -> list[list[Entry]]:
    """One write per module (each module's context is written separately), micro-batches in order."""
    writes = []
    for v, chunk in enumerate(chunks):
        for m in chunk.fwd:
            writes.append(
                [e for mb in range(opts.micro_batches) for e in module_rows(v, m, False, mb, opts.squash_name)]
            )
    return writes


def actv_grad_writes(chunks: list[Chunk], opts: Opts) -> list[list[Entry]]:
    """One write: micro-batch 0 of all modules in backward order (last chunk first), then micro-batch 1, …"""
    rows = []
    for mb in range(opts.micro_batches):
        for v in reversed(range(len(chunks))):
            for m in chunks[v].bwd:
                rows.extend(module_rows(v, m, True, mb, opts.squash_name))
    return [rows]


def weight_tensor(metric: str, shape: tuple[int, ...], kind: str, jitter: float) -> T:
    """The tensor a weight-side metric reports for a parameter (main grads and optimizer state are fp32)."""
    if metric in ("param_origin", "param_updated"):
        return T(shape, BF16, 0.05 * jitter, "ln") if kind == "ln" else T(shape, BF16, 0.02 * jitter)
    if metric == "exp_avg":
        return T(shape, FP32, 6e-5 * jitter)
    if metric == "exp_avg_sq":
        return T(shape, FP32, 1e-4 * jitter, "sq")
    if metric == "other":
        return T((), FP32, 0.0, "scalar")
    return T(shape, FP32, (6e-5 if kind == "ln" else 1e-4) * jitter, "sparse" if kind == "emb" else "float")


def weight_writes(metric: str, chunks: list[Chunk], opts: Opts, rank: int) -> list[list[Entry]]:
    """One write per step in parameter order; grad_unreduced in backward order, per micro-batch if so configured."""
    tp_rank, _, pp_rank = position(rank, opts)
    params = []
    for v, chunk in enumerate(chunks):
        rng = rng_for(opts, 0, "weights", tp_rank, pp_rank, v)
        params.extend(
            (v, name, weight_tensor(metric, shape, kind, rng.lognormvariate(0, 0.12)))
            for name, shape, kind in chunk.params
        )
    if metric != "grad_unreduced":
        return [[entry(v, n, None, t, squash(n, opts.squash_name)) for v, n, t in params]]
    micros = range(opts.micro_batches) if opts.monitor_mbs_grad else [None]
    return [[entry(v, n, mb, t, squash(n, opts.squash_name)) for mb in micros for v, n, t in reversed(params)]]


# -- statistics ----------------------------------------------------------------------------------------------------
def draw(t: T, r: Callable[[], float], level: float) -> tuple[float, float, float, float, float, float, float]:
    """(norm, min, max, zeros, nans, id, mean) of a tensor; min <= mean <= max and norm >= 0 always hold."""
    kind, n = t.kind, t.numel
    if kind in ("float", "sparse"):
        s = t.scale * level * (0.92 + 0.16 * r())
        mean = s * 0.01 * (2.0 * r() - 1.0)
        mx, mn = s * (3.5 + 3.0 * r()), -s * (3.5 + 3.0 * r())
        if t.dtype == BF16:
            mx, mn = bf16(mx), bf16(mn)
        zeros = 0.84 + 0.03 * r() if kind == "sparse" else 0.0  # share of vocabulary rows no token touched
        return math.sqrt(n * (1.0 - zeros) * (s * s + mean * mean)), mn, mx, zeros, 0.0, NAN, mean
    if kind == "ids":
        vocab = t.scale
        mean = vocab * (0.45 + 0.1 * r())
        mn, mx = float(int(3 * r())), float(int(vocab) - 1 - int(40 * r()))
        return math.sqrt(n * (mean * mean + vocab * vocab / 12.0)), mn, mx, 0.0, 0.0, NAN, mean
    if kind == "pos":  # position ids 0 … n-1
        return math.sqrt((n - 1) * n * (2 * n - 1) / 6.0), 0.0, n - 1.0, 1.0 / n, 0.0, NAN, (n - 1) / 2.0
    if kind == "rope":  # cos/sin of fixed angles: the same values every step
        return math.sqrt(n / 2.0), -1.0, 1.0, 0.0, 0.0, NAN, t.scale
    if kind == "ln":
        s = t.scale * level * (0.9 + 0.2 * r())
        mean = 1.0 + s * (r() - 0.5)
        mn, mx = bf16(1.0 - s * (3.0 + 2.0 * r())), bf16(1.0 + s * (3.0 + 2.0 * r()))
        return math.sqrt(n * (mean * mean + s * s)), mn, mx, 0.0, 0.0, NAN, mean
    if kind == "sq":
        g = t.scale * level * (0.9 + 0.2 * r())
        zeros = math.erf(1e-4 / (g * math.sqrt(2.0)))  # |g²| < eps = 1e-8 where |g| < 1e-4
        return math.sqrt(3.0 * n) * g * g, 0.0, g * g * (20.0 + 20.0 * r()), zeros, 0.0, NAN, g * g
    v = 1.0 - level * r()  # scalar mg_direction, the share of agreeing signs; ``level`` is its spread below 1
    return abs(v), v, v, 1.0 if abs(v) < 1e-8 else 0.0, 0.0, v, v


NAN_STATS = (NAN, NAN, NAN, 0.0, 0.0, NAN, NAN)  # nans is filled in per row
INF_STATS = (math.inf, -math.inf, math.inf, 0.0, 0.0, NAN, NAN)  # an overflowed gradient (docs/monitor-format.md §8)


def level_of(metric: str, step: int) -> float:
    """A slow trend over training: activations grow a little, gradients and moments decay, weights drift."""
    if metric == "actv":
        return 1.0 + 5e-4 * step
    if metric in ("param_origin", "param_updated"):
        return 1.0 + 1e-4 * step
    return 1.0 / (1.0 + step / 300.0)


class Renderer:
    """Renders writes to CSV lines for one run directory."""

    def __init__(self, opts: Opts) -> None:
        self.opts = opts
        self.slots = [OP_SLOT[c] for c in opts.columns]
        self.nan_tail = ",".join(["nan"] * len(opts.columns))

    def render(
        self, write: list[Entry], step: int, rng: random.Random, level: float, seen: dict, odd: str = ""
    ) -> list[str]:
        """Lines of one write; the row whose key is ``odd`` gets NaN (activations) or ±inf (gradients).

        ``seen`` maps (tensor, micro-batch) to the statistics already drawn in this step, so a tensor that several
        modules see shows the same values in each of their rows.
        """
        r, slots, step_s = rng.random, self.slots, str(step)
        # A CPU-side count stays an int unless the write's column also holds a NaN (a None row): then it is float.
        int_nans = self.opts.integer_counts and all(e.t is not None for e in write)
        lines = []
        for e in write:
            t = e.t
            if t is None:
                lines.append(f"{e.pre}{step_s}{e.mid}{self.nan_tail}\n")
                continue
            if e.key == odd:
                stats = INF_STATS if t.dtype == FP32 else (*NAN_STATS[:4], float(rng.randint(1, 4096)), NAN, NAN)
                nans, cells = stats[4], cells_of(stats, e)
            else:
                cached = seen.get((t, e.mid))
                if cached is None:
                    stats = draw(t, r, level)
                    cached = seen[t, e.mid] = stats[4], cells_of(stats, e)
                nans, cells = cached
            if int_nans:
                cells = (*cells[:4], str(int(nans)), *cells[5:])
            lines.append(f"{e.pre}{step_s}{e.mid}{','.join([cells[i] for i in slots])}\n")
        return lines


def cells_of(stats: tuple[float, ...], e: Entry) -> tuple[str, ...]:
    """The nine cells a row's columns are picked from, in ``OP_SLOT`` order."""
    return (*map(fmt, stats), e.shape, e.dtype)


# -- files ---------------------------------------------------------------------------------------------------------
class CsvFile:
    """``write_df_to_csv`` as the monitor uses it: the header when the file is created, then one append per write;
    a write above ``limit`` rows goes instead, without header, to ``<stem>_part_1.csv``, ``_part_2.csv``, …"""

    def __init__(self, name: str, header: str, limit: int = WRITER_MAX_ROWS) -> None:
        self.name, self.limit = name, limit
        self.files: dict[str, list[str]] = {name: [header]}

    def write(self, lines: list[str]) -> None:
        if len(lines) <= self.limit:
            self.files[self.name].extend(lines)
            return
        stem = self.name[: -len(".csv")]
        for i in range(0, len(lines), self.limit):
            self.files.setdefault(f"{stem}_part_{i // self.limit + 1}.csv", []).extend(lines[i : i + self.limit])

    def rows(self) -> int:
        return len(self.files[self.name]) - 1

    def save(self, directory: Path) -> tuple[int, int]:
        total = 0
        for name, lines in self.files.items():
            text = "".join(lines)
            (directory / name).write_text(text, encoding="ascii", newline="")
            total += len(text)
        return len(self.files), total


def file_ranges(opts: Opts) -> dict[tuple[int, int], list[int]]:
    """Monitored steps grouped by file: ``start = step // k * k``, ``end = start + k - 1``."""
    ranges: dict[tuple[int, int], list[int]] = {}
    for step in opts.steps:
        start = step // opts.k * opts.k
        ranges.setdefault((start, start + opts.k - 1), []).append(step)
    return ranges


def odd_step(opts: Opts, step: int) -> bool:
    return opts.nan_every > 0 and (opts.steps.index(step) + 1) % opts.nan_every == 0


def odd_key(opts: Opts, rng: random.Random, metric: str) -> str:
    """The row that overflows: linear_fc1's output (one micro-batch) or weight gradient, random layer of chunk 0."""
    layer = rng.randrange(opts.layers // (opts.pp * opts.vpp))
    name = f"{MODEL_PREFIX}decoder.layers.{layer}.mlp.linear_fc1"
    if metric == "actv":
        return row_key(0, f"{name}.output_0", rng.randrange(opts.micro_batches))
    return row_key(0, f"{name}.weight", None)


class RunWriter:
    """Writes one run directory: the metric files, then the per-run extras."""

    def __init__(self, job: Job, out: Path) -> None:
        self.job, self.opts = job, job.opts
        self.dir = out / job.name
        self.chunks = rank_chunks(job.rank, self.opts)
        self.renderer = Renderer(self.opts)
        self.files = self.bytes = self.rows = 0

    def stream(self, metric: str) -> str:
        """Whose values a metric shows: each rank its own activations and local gradients; data-parallel replicas
        the same reduced gradients, moments and weights (keyed by model position, not by rank)."""
        if metric in ("actv", "actv_grad", "grad_unreduced"):
            return f"rank{self.job.rank}"
        tp_rank, _, pp_rank = position(self.job.rank, self.opts)
        return f"tp{tp_rank}/pp{pp_rank}"

    def writes_of(self, metric: str) -> list[list[Entry]]:
        if metric == "actv":
            return actv_writes(self.chunks, self.opts)
        if metric == "actv_grad":
            return actv_grad_writes(self.chunks, self.opts)
        return weight_writes(metric, self.chunks, self.opts, self.job.rank)

    def step_lines(self, metric: str, writes: list[list[Entry]], step: int) -> list[list[str]]:
        # param_updated at step s is the weight after the update, i.e. param_origin of step s + 1.
        version = step + 1 if metric == "param_updated" else step
        base = "param" if metric in ("param_origin", "param_updated") else metric
        rng = rng_for(self.opts, self.job.run, base, self.stream(metric), version)
        odd = ""
        if odd_step(self.opts, step) and metric in ("actv", "grad_reduced"):
            odd = odd_key(self.opts, rng, metric)
        level = level_of(metric, version)
        if metric == "other":  # mg_direction is 1.0 at the first monitored step (no momentum yet), then below
            level = 0.0 if step == self.opts.steps[0] else 0.45
        seen: dict = {}
        return [self.renderer.render(w, step, rng, level, seen, odd) for w in writes]

    def metric_files(self, metric: str, split_first: bool) -> list[CsvFile]:
        """The metric's files; with ``split_first`` (the "parts" extra) the first one has a small row limit."""
        header = header_line(self.opts.columns, has_micro(metric, self.opts))
        writes, result = self.writes_of(metric), []
        for i, ((start, end), steps) in enumerate(file_ranges(self.opts).items()):
            limit = WRITER_MAX_ROWS
            if i == 0 and split_first:
                limit = self.opts.part_rows or max(1, (max(map(len, writes)) + 1) // 2)
            f = CsvFile(f"{metric}_{start}-{end}.csv", header, limit)
            for step in steps:
                for lines in self.step_lines(metric, writes, step):
                    f.write(lines)
            result.append(f)
        return result

    def save(self, f: CsvFile, counted: bool = True) -> None:
        n, size = f.save(self.dir)
        self.files, self.bytes = self.files + n, self.bytes + size
        if counted:
            self.rows += f.rows()

    def text(self, path: Path, content: str) -> None:
        path.write_text(content, encoding="ascii", newline="")
        self.files, self.bytes = self.files + 1, self.bytes + len(content)

    def run(self) -> tuple[int, int, int]:
        self.dir.mkdir(parents=True, exist_ok=True)
        extras = self.opts.extras if self.job.rank == 0 and self.job.run == 0 else frozenset()
        parts_metric = pick(self.opts.metrics, "grad_reduced") if "parts" in extras else None
        for metric in self.opts.metrics:
            for f in self.metric_files(metric, metric == parts_metric):
                self.save(f)
        if "stack_info" in self.opts.extras:
            self.text(self.dir / "stack_info.csv", stack_info(self.chunks, self.opts.squash_name))
        if "hooks" in self.opts.extras:
            self.hook_files()
        self.rank0_extras(extras)
        return self.files, self.bytes, self.rows

    def hook_files(self) -> None:
        for hook, (stats, micro) in HOOKS.items():
            header = header_line(stats, micro)
            for (start, end), steps in file_ranges(self.opts).items():
                f = CsvFile(f"{hook}_{start}-{end}.csv", header)
                for step in steps:
                    rng = rng_for(self.opts, self.job.run, hook, self.stream("actv"), step)
                    for lines in hook_writes(hook, self.chunks, self.opts, step, rng):
                        f.write(lines)
                self.save(f, counted=False)

    def rank0_extras(self, extras: frozenset[str]) -> None:
        """The single-file extras, in rank 0's first run directory."""
        first = file_ranges(self.opts)
        (start, end) = next(iter(first))
        if "bak" in extras:
            name = f"{pick(self.opts.metrics, 'actv')}_{start}-{end}.csv"
            self.copy(self.dir / name, self.dir / f"{name}.bak")
        if "subdir" in extras:
            name = f"{pick(self.opts.metrics, 'actv')}_{start}-{end}.csv"
            (self.dir / SUBDIR).mkdir(exist_ok=True)
            self.copy(self.dir / name, self.dir / SUBDIR / name)
        if "header_only" in extras:
            metric, (a, b) = header_only_target(self.opts)
            self.text(self.dir / f"{metric}_{a}-{b}.csv", header_line(self.opts.columns, has_micro(metric, self.opts)))

    def copy(self, src: Path, dst: Path) -> None:
        shutil.copyfile(src, dst)
        self.files, self.bytes = self.files + 1, self.bytes + dst.stat().st_size


def pick(metrics: tuple[str, ...], preferred: str) -> str:
    return preferred if preferred in metrics else metrics[0]


def header_only_target(opts: Opts) -> tuple[str, tuple[int, int]]:
    """A metric that has no other file (docs/monitor-format.md Q1), else ``actv`` for the step range after the last
    one."""
    missing = [m for m in ALL_NINE if m not in opts.metrics]
    if missing:
        return missing[0], next(iter(file_ranges(opts)))
    start = (opts.steps[-1] // opts.k + 1) * opts.k
    return "actv", (start, start + opts.k - 1)


# Which modules each L2 hook is registered on (by the last part of the module name), the hooked sub-module, the
# name suffix the hook adds, and each stat as (low, spread) of a uniform draw.
HOOK_TARGETS = {
    "attention_hook": (("core_attention",), "", ".attention", ((5.5, 2.5), (0.02, 0.3))),
    "linear_hook": (
        ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2", "output_layer"),
        "",
        ".linear",
        ((5.0, 40.0), (1.0, 4.0)),
    ),
    "moe_router_weight_hook": (("mlp",), ".router", ".moe_router", ((0.1, 0.5),)),  # as if the MLPs were MoE layers
    "moe_router_logit_hook": (("mlp",), ".router", ".moe_router", ((1.2, 0.8),)),
}


def hook_writes(hook: str, chunks: list[Chunk], opts: Opts, step: int, rng: random.Random) -> list[list[str]]:
    """L2 feature rows, one write per hooked module, micro-batches in order where the hook has them."""
    bases, child, suffix, stats = HOOK_TARGETS[hook]
    micros = range(opts.micro_batches) if HOOKS[hook][1] else [None]
    writes = []
    for v, chunk in enumerate(chunks):
        for m in chunk.fwd:
            if m.name.rsplit(".", 1)[-1] not in bases:
                continue
            name = squash(m.name + child, opts.squash_name) + suffix
            lines = []
            for mb in micros:
                mid = "," if mb is None else f",{mb},"
                values = ",".join(fmt(low + spread * rng.random()) for low, spread in stats)
                lines.append(f"{v},{name},{step}{mid}{values}\n")
            writes.append(lines)
    return writes


def stack_info(chunks: list[Chunk], sq: bool) -> str:
    """``write_stack_info``: ``module_name,stack_info``, one multi-line call stack per hooked module."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["module_name", "stack_info"])
    for v, chunk in enumerate(chunks):
        for m in chunk.fwd:
            w.writerow([f"{v}:{squash(m.name, sq)}", call_stack(m.name)])
    return buf.getvalue()


def call_stack(name: str) -> str:
    frames = [
        ("/workspace/Megatron-LM/pretrain_gpt.py", 160, "forward_step", "output_tensor = model(tokens, position_ids)"),
        (
            "/workspace/Megatron-LM/megatron/core/distributed/data_parallel_base.py",
            22,
            "forward",
            "return self.module(*inputs, **kwargs)",
        ),
        (
            "/workspace/Megatron-LM/megatron/core/transformer/module.py",
            178,
            "forward",
            "outputs = self.module(*inputs, **kwargs)",
        ),
    ]
    if ".layers." in name:
        frames.append(
            (
                "/workspace/Megatron-LM/megatron/core/transformer/transformer_block.py",
                549,
                "forward",
                "hidden_states, context = layer(",
            )
        )
    return "".join(f"File {p}, line {n}, in {f}, \n {code} \n" for p, n, f, code in frames)


def tensor_struct(tensors: tuple[T | None, ...], as_list: bool) -> dict[str, str]:
    """``get_param_struct``: a lone forward output is a tensor, inputs a list, tuples are tuples."""

    def desc(t: T | None) -> str:
        return f"size={tuple(t.shape)}, dtype={t.dtype}" if t is not None else "<class 'NoneType'>"

    if not as_list and len(tensors) == 1 and tensors[0] is not None:
        return {"config": "tensor", "tensor": desc(tensors[0])}
    struct = {"config": f"{'list' if as_list else 'tuple'}[{len(tensors)}]"}
    struct.update({str(i): desc(t) for i, t in enumerate(tensors)})
    return struct


def module_struct(chunks: list[Chunk], sq: bool) -> str:
    data = {}
    for v, chunk in enumerate(chunks):
        for m in chunk.fwd:
            data[f"{v}:{squash(m.name, sq)}"] = {
                "input": tensor_struct(m.fwd_in, True),
                "output": tensor_struct(m.fwd_out, False),
                "input_grad": tensor_struct(m.bwd_in, False),
                "output_grad": tensor_struct(m.bwd_out, False),
            }
    return json.dumps(data, indent=2)


def anomaly_json(rank: int, opts: Opts) -> str:
    """``anomaly_detected/rank<R>/anomaly.json``: ``{}`` as initialised; rank 0 holds one detected anomaly."""
    if rank != 0:
        return json.dumps({}, indent=1)
    tag = f"0:{MODEL_PREFIX}decoder.layers.0.mlp.linear_fc1.weight/rank0/post_grad"
    step = opts.steps[-1]
    anomaly = {
        "rank": 0,
        "step": step,
        "micro_step": 0,
        "pp_stage": 0,
        "vpp_stage": 0,
        "call_id": 112,
        "tag_name": tag,
        "message": f"Rule AnomalyTurbulence reports anomaly signal in ('{tag}', 'norm') at step {step}, "
        "current value 0.412, history mean 0.096.",
        "group_mates": list(range(opts.ranks)),
    }
    return json.dumps({f"{tag}_step_{step}_call_112": anomaly}, indent=1)


# -- run directories -----------------------------------------------------------------------------------------------
def time_tag(when: datetime) -> str:
    return f"{MONTHS[when.month - 1]}{when:%d_%H-%M-%S}"


def job_start(seed: int) -> datetime:
    """A deterministic start time; day <= 28 (a 29 February tag aborts data2db, docs/monitor-format.md Q7) and a
    non-leap year."""
    rng = random.Random(f"gen_monitor/{seed}/clock")
    return datetime(
        2025, rng.randint(1, 12), rng.randint(1, 28), rng.randrange(24), rng.randrange(60), rng.randrange(60)
    )


def uuid8(seed: int, rank: int, run: int) -> str:
    return hashlib.sha256(f"gen_monitor/{seed}/{rank}/{run}".encode()).hexdigest()[:8]


def plan_jobs(opts: Opts) -> list[Job]:
    start = job_start(opts.seed)
    jobs = []
    for rank in range(opts.ranks):
        when = start + timedelta(seconds=1 if rank == opts.late_rank else 0)
        jobs.append(Job(opts, rank, 0, f"{time_tag(when)}-rank{rank}-{uuid8(opts.seed, rank, 0)}"))
    if "second_run" in opts.extras:  # a restarted job: the last rank's later run directory, with its own values
        rank = opts.ranks - 1
        when = start + timedelta(hours=2, minutes=13, seconds=41)
        jobs.append(Job(opts, rank, 1, f"{time_tag(when)}-rank{rank}-{uuid8(opts.seed, rank, 1)}"))
    return jobs


def write_job(args: tuple[Job, Path]) -> tuple[int, int, int]:
    job, out = args
    return RunWriter(job, out).run()


def write_shared_extras(out: Path, opts: Opts) -> tuple[int, int]:
    """The per-job directories next to the run directories."""
    files = size = 0
    for rank in range(opts.ranks):
        targets = []
        if "anomaly_detected" in opts.extras:
            targets.append((out / "anomaly_detected" / f"rank{rank}" / "anomaly.json", anomaly_json(rank, opts)))
        if "module_struct" in opts.extras:
            text = module_struct(rank_chunks(rank, opts), opts.squash_name)
            targets.append((out / "module_struct" / f"rank{rank}" / "module_struct.json", text))
        for path, text in targets:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="ascii")
            files, size = files + 1, size + len(text)
    return files, size


def check_args(
    ranks: int,
    steps: int,
    layers: int,
    micro_batches: int,
    k: int,
    start_step: int,
    step_interval: int,
    metrics: Sequence[str],
    extras: Sequence[str],
    tp: int,
    pp: int,
    vpp: int,
) -> None:
    if min(ranks, steps, layers, micro_batches, k, step_interval, tp, pp, vpp) < 1 or start_step < 0:
        raise ValueError("ranks, steps, layers, micro_batches, k, step_interval, tp, pp, vpp must be >= 1")
    if ranks % (tp * pp) or layers % (pp * vpp):
        raise ValueError("ranks must be a multiple of tp*pp and layers a multiple of pp*vpp")
    unknown = [m for m in metrics if m not in ALL_NINE] + [e for e in extras if e not in EXTRAS]
    if unknown or not metrics:
        raise ValueError(f"unknown metrics/extras {unknown}; metrics must not be empty")


def generate(
    out: Path,
    *,
    ranks: int = 4,
    steps: int = 4,
    layers: int = 2,
    micro_batches: int = 2,
    step_count_per_record: int = 1,
    start_step: int = 0,
    step_interval: int = 1,
    metrics: Sequence[str] = ALL_NINE,
    ops: Sequence[str] = DEFAULT_OPS,
    seed: int = 0,
    tp: int = 1,
    pp: int = 1,
    vpp: int = 1,
    squash_name: bool = False,
    monitor_mbs_grad: bool = False,
    integer_counts: bool = False,
    extras: Sequence[str] = (),
    procs: int = 1,
    nan_every: int = 0,
    part_rows: int | None = None,
    late_rank: int | None = None,
) -> GenSummary:
    """Write monitor output for ``ranks`` ranks under ``out`` and return what was written.

    ``layers`` is the model's total layer count, split evenly over ``pp * vpp`` chunks; monitored steps are
    ``start_step + i * step_interval`` for ``i < steps``, filed by ``step_count_per_record``. ``nan_every = n`` turns,
    at every n-th monitored step, one activation row into NaN and one grad_reduced row into ±inf. ``part_rows`` is
    the row limit of the file the "parts" extra splits (default: half of its largest write, so it always splits).
    ``late_rank`` gets a time tag one second later. ``procs > 1`` writes run directories in that many processes;
    the bytes do not depend on it.

    ``extras`` (any of ``EXTRAS``):
    ``anomaly_detected`` - ``OUT/anomaly_detected/rank<R>/anomaly.json`` (``{}``; rank 0 holds one anomaly);
    ``module_struct`` - ``OUT/module_struct/rank<R>/module_struct.json`` (print_struct output);
    ``stack_info`` - ``stack_info.csv`` (``module_name,stack_info``, multi-line stacks) in every run directory;
    ``hooks`` - ``attention_hook`` / ``linear_hook`` / ``moe_router_weight_hook`` / ``moe_router_logit_hook`` files
    per step range in every run directory;
    and in rank 0's run directory: ``parts`` - the first grad_reduced file's writes go, without header, to
    ``grad_reduced_<a>-<b>_part_<i>.csv`` (limit ``part_rows``), leaving the file itself header-only;
    ``bak`` - ``actv_<a>-<b>.csv.bak``, a copy of the first actv file; ``header_only`` - a header-only file of the
    first metric not in ``metrics`` (first step range), or ``actv`` for the range after the last;
    ``subdir`` - ``old/actv_<a>-<b>.csv``, a copy inside a sub-directory;
    ``second_run`` - a second run directory of the last rank, two hours later, same files, other values.
    """
    k = step_count_per_record
    check_args(ranks, steps, layers, micro_batches, k, start_step, step_interval, metrics, extras, tp, pp, vpp)
    opts = Opts(
        ranks=ranks,
        steps=tuple(start_step + i * step_interval for i in range(steps)),
        layers=layers,
        micro_batches=micro_batches,
        k=k,
        metrics=tuple(dict.fromkeys(metrics)),
        columns=columns_of(ops),
        seed=seed,
        tp=tp,
        pp=pp,
        vpp=vpp,
        squash_name=squash_name,
        monitor_mbs_grad=monitor_mbs_grad,
        integer_counts=integer_counts,
        extras=frozenset(extras),
        nan_every=nan_every,
        part_rows=part_rows,
        late_rank=late_rank,
    )
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    jobs = plan_jobs(opts)
    tasks = [(job, out) for job in jobs]
    if procs > 1 and len(jobs) > 1:
        with multiprocessing.get_context().Pool(min(procs, len(jobs))) as pool:
            results = pool.map(write_job, tasks, chunksize=1)
    else:
        results = [write_job(t) for t in tasks]
    files, size = write_shared_extras(out, opts)
    return GenSummary(
        run_dirs=len(jobs),
        files=files + sum(r[0] for r in results),
        rows=sum(r[2] for r in results),
        bytes=size + sum(r[1] for r in results),
        runs=tuple((job.rank, job.name) for job in jobs),
    )


# -- CLI -----------------------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m datagen.monitor", description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="the monitor output directory that receives the run directories")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--steps", type=int, default=4, help="number of monitored steps")
    p.add_argument("--layers", type=int, default=2, help="total transformer layers of the model")
    p.add_argument("--micro-batches", type=int, default=2)
    p.add_argument("--k", type=int, default=1, help="step_count_per_record")
    p.add_argument("--start-step", type=int, default=0)
    p.add_argument("--step-interval", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--pp", type=int, default=1)
    p.add_argument("--vpp", type=int, default=1)
    p.add_argument("--metrics", default=",".join(ALL_NINE), help="comma-separated metric file prefixes")
    p.add_argument("--ops", default=",".join(DEFAULT_OPS), help="comma-separated ops, as in the monitor config")
    p.add_argument("--extras", default="", help=f"comma-separated, from: {','.join(EXTRAS)} (or 'all')")
    p.add_argument("--procs", type=int, default=1)
    p.add_argument("--nan-every", type=int, default=0)
    p.add_argument("--part-rows", type=int, default=None)
    p.add_argument("--late-rank", type=int, default=None)
    p.add_argument("--squash-name", action="store_true")
    p.add_argument("--monitor-mbs-grad", action="store_true")
    p.add_argument("--integer-counts", action="store_true")
    return p.parse_args(argv)


def split_list(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)
    extras = EXTRAS if a.extras == "all" else split_list(a.extras)
    summary = generate(
        a.out,
        ranks=a.ranks,
        steps=a.steps,
        layers=a.layers,
        micro_batches=a.micro_batches,
        step_count_per_record=a.k,
        start_step=a.start_step,
        step_interval=a.step_interval,
        metrics=split_list(a.metrics),
        ops=split_list(a.ops),
        seed=a.seed,
        tp=a.tp,
        pp=a.pp,
        vpp=a.vpp,
        squash_name=a.squash_name,
        monitor_mbs_grad=a.monitor_mbs_grad,
        integer_counts=a.integer_counts,
        extras=extras,
        procs=a.procs,
        nan_every=a.nan_every,
        part_rows=a.part_rows,
        late_rank=a.late_rank,
    )
    print(
        f"wrote {summary.run_dirs} run directories, {summary.files} files, {summary.rows} rows, "
        f"{summary.bytes} bytes to {a.out}"
    )
    for rank, name in summary.runs:
        print(f"  rank {rank}: {name}")


if __name__ == "__main__":
    main()
