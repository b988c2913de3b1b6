"""The synthetic monitor-output generator (datagen/monitor.py): layout, CSV format, values, extras."""

from __future__ import annotations

import csv
import json
import math
import random
from pathlib import Path

import pytest

from datagen import monitor as gen_monitor
from datagen.monitor import ALL_NINE, EXTRAS, GenSummary, generate, r6

RUN0 = "Apr17_01-37-55-rank0-19d2c9f1"  # seed 0
RUN1 = "Apr17_01-37-55-rank1-90af0e01"
MICRO_HEADER = "vpp_stage,name,step,micro_step,min,max,norm,zeros,nans,mean,shape,dtype"
PLAIN_HEADER = "vpp_stage,name,step,min,max,norm,zeros,nans,mean,shape,dtype"
NAN8 = ",".join(["nan"] * 8)


def files_of(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def actv_rows(layers: int, micro: int = 2) -> int:
    """Rows per rank and step of a single-chunk model (embedding and output layer on the same rank)."""
    return micro * (27 * layers + 10)


def actv_grad_rows(layers: int, micro: int = 2) -> int:
    return micro * (24 * layers + 8)


def weight_rows(layers: int) -> int:
    return 6 * layers + 3


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> tuple[Path, GenSummary]:
    out = tmp_path_factory.mktemp("gen") / "monitor_output"
    return out, generate(out, ranks=2, steps=2, layers=2)


# -- layout ------------------------------------------------------------------------------------------------------
def test_run_directories_files_and_summary(small):
    out, summary = small
    assert sorted(p.name for p in out.iterdir()) == [RUN0, RUN1]
    assert sorted(p.name for p in (out / RUN0).iterdir()) == sorted(
        f"{m}_{s}-{s}.csv" for m in ALL_NINE for s in (0, 1)
    )
    on_disk = files_of(out)
    per_step = actv_rows(2) + actv_grad_rows(2) + 7 * weight_rows(2)
    assert summary == GenSummary(
        run_dirs=2,
        files=36,
        rows=2 * 2 * per_step,
        bytes=sum(len(b) for b in on_disk.values()),
        runs=((0, RUN0), (1, RUN1)),
    )
    assert len(on_disk) == 36


def test_headers(small):
    out, _ = small
    for metric in ALL_NINE:
        expected = MICRO_HEADER if metric in ("actv", "actv_grad") else PLAIN_HEADER
        assert lines(out / RUN0 / f"{metric}_0-0.csv")[0] == expected, metric


def test_first_rows_for_seed_0(small):
    out, _ = small
    assert lines(out / RUN0 / "actv_0-0.csv")[1:3] == [
        "0,module.module.embedding.word_embeddings.input,0,0,0.0,31992.0,1233693.06077,0.0,0.0,16918.875505,"
        '"[1, 4096]",torch.int64',
        "0,module.module.embedding.word_embeddings.output,0,0,-3.59375,3.375,2592.839215,0.0,0.0,-0.00149,"
        '"[1, 4096, 4096]",torch.bfloat16',
    ]
    assert lines(out / RUN0 / "actv_grad_0-0.csv")[1:3] == [
        "0,module.module.output_layer.input,0,0,-7.2e-05,7.9e-05,0.057054,0.0,0.0,-0.0,"
        '"[4096, 1, 4096]",torch.bfloat16',
        "0,module.module.output_layer.output_0,0,0,-0.000125,0.00012,0.260906,0.0,0.0,0.0,"
        '"[4096, 1, 32000]",torch.bfloat16',
    ]
    assert lines(out / RUN0 / "grad_reduced_0-0.csv")[1] == (
        "0,module.module.embedding.word_embeddings.weight,0,-0.000694,0.000474,0.52775,0.842385,0.0,1e-06,"
        '"[32000, 4096]",torch.float32'
    )
    assert lines(out / RUN0 / "grad_unreduced_0-0.csv")[1] == (
        '0,module.module.output_layer.weight,0,-0.000487,0.000335,1.020896,0.0,0.0,1e-06,"[32000, 4096]",torch.float32'
    )
    # mg_direction: 0-d, 1.0 at the first monitored step, then below
    assert lines(out / RUN0 / "other_0-0.csv")[1] == (
        "0,module.module.embedding.word_embeddings.weight,0,1.0,1.0,1.0,0.0,0.0,1.0,[],torch.float32"
    )
    assert lines(out / RUN0 / "other_1-1.csv")[1] == (
        "0,module.module.embedding.word_embeddings.weight,1,0.575045,0.575045,0.575045,0.0,0.0,0.575045,[],torch.float32"
    )


@pytest.mark.parametrize(("layers", "micro"), [(1, 1), (3, 2), (2, 3)])
def test_row_counts_by_formula(tmp_path, layers, micro):
    generate(tmp_path, ranks=1, steps=1, layers=layers, micro_batches=micro)
    (run,) = tmp_path.iterdir()
    counts = {m: len(lines(run / f"{m}_0-0.csv")) - 1 for m in ALL_NINE}
    weights = weight_rows(layers)
    assert counts == {
        "actv": actv_rows(layers, micro),
        "actv_grad": actv_grad_rows(layers, micro),
        **{m: weights for m in ALL_NINE[2:]},
    }


def test_module_and_row_order(small):
    out, _ = small
    names = [r["name"] + ":" + r["micro_step"] for r in rows(out / RUN0 / "actv_0-0.csv")]
    # module by module (children before parents), each module's rows for micro-batch 0, then 1
    p = "module.module.decoder.layers.0."
    qkv = p + "self_attention.linear_qkv"
    assert names[10:16] == [f"{qkv}.input:0", f"{qkv}.output_0:0", f"{qkv}.output_1:0"] + [
        f"{qkv}.input:1",
        f"{qkv}.output_0:1",
        f"{qkv}.output_1:1",
    ]
    modules = list(dict.fromkeys(n.rsplit(".", 1)[0] for n in names))
    assert modules[:10] == [
        "module.module.embedding.word_embeddings",
        "module.module.embedding",
        qkv,
        p + "self_attention.core_attention",
        p + "self_attention.linear_proj",
        p + "self_attention",
        p + "mlp.linear_fc1",
        p + "mlp.linear_fc2",
        p + "mlp",
        "module.module.decoder.layers.0",
    ]
    assert modules[-2:] == ["module.module.decoder.final_layernorm", "module.module.output_layer"]
    grad = [r["micro_step"] for r in rows(out / RUN0 / "actv_grad_0-0.csv")]
    assert grad == ["0"] * actv_grad_rows(2, 1) + ["1"] * actv_grad_rows(2, 1)  # all of mb 0, then mb 1
    params = [r["name"] for r in rows(out / RUN0 / "grad_reduced_0-0.csv")]
    assert params[:4] == [
        "module.module.embedding.word_embeddings.weight",
        p + "self_attention.linear_proj.weight",
        p + "self_attention.linear_qkv.layer_norm_weight",
        p + "self_attention.linear_qkv.weight",
    ]
    assert [r["name"] for r in rows(out / RUN0 / "grad_unreduced_0-0.csv")] == params[::-1]


def test_none_outputs_are_all_nan_rows(small):
    out, _ = small
    text = (out / RUN0 / "actv_0-0.csv").read_text()
    assert f"0,module.module.decoder.layers.0.self_attention.linear_qkv.output_1,0,0,{NAN8}\n" in text
    assert f"0,module.module.decoder.layers.1.output_1,0,1,{NAN8}\n" in text  # the layer's (None) context
    grad = (out / RUN0 / "actv_grad_0-0.csv").read_text()
    assert f"0,module.module.embedding.word_embeddings.input,0,0,{NAN8}\n" in grad  # no gradient into token ids
    nan_rows = [line for line in text.splitlines() if line.endswith(NAN8)]
    assert len(nan_rows) == 2 * (7 * 2 + 1)  # 7 per layer (linears, attention, mlp, layer) + output_layer, 2 micro


def test_keyword_only_modules_have_no_backward_inputs(small):
    out, _ = small
    names = {r["name"] for r in rows(out / RUN0 / "actv_grad_0-0.csv")}
    assert "module.module.decoder.layers.0.input_0" not in names
    assert "module.module.embedding.output" in names and "module.module.embedding.input_0" not in names
    assert "module.module.decoder.layers.0.self_attention.input" in names  # rotary_pos_emb is a kwarg


def test_value_text_format(small):
    out, _ = small
    seen = set()
    for path in (out / RUN0).glob("*.csv"):
        for row in rows(path):
            for col in ("min", "max", "norm", "zeros", "nans", "mean"):
                cell = row[col]
                if cell in ("nan", "inf", "-inf"):
                    continue
                value = float(cell)
                assert cell == repr(value) and r6(value) == value, (path.name, col, cell)
                seen.add(cell)
    assert {"-0.0", "0.0", "1e-06", "-1e-06"} <= seen
    assert any("e-05" in c for c in seen)
    text = (out / RUN0 / "grad_reduced_0-0.csv").read_text()
    assert ',"[32000, 4096]",torch.float32\n' in text and ",[4096],torch.float32\n" in text


def test_values_are_plausible(small):
    out, _ = small
    checked = 0
    for path in out.glob("*/*.csv"):
        for row in rows(path):
            if row["norm"] == "nan":
                continue
            mn, mx, mean = float(row["min"]), float(row["max"]), float(row["mean"])
            assert mn <= mean <= mx and float(row["norm"]) >= 0.0, (path.name, row)
            assert 0.0 <= float(row["zeros"]) <= 1.0 and float(row["nans"]) == 0.0
            if row["dtype"] == "torch.bfloat16" and path.name.startswith("actv"):
                assert gen_monitor.bf16(mn) == pytest.approx(mn, abs=1e-6)
            checked += 1
    assert checked > 1000


def test_r6_matches_numpy_round():
    np = pytest.importorskip("numpy")
    rng = random.Random(7)
    values = [rng.choice((-1, 1)) * rng.random() * 10 ** rng.randint(-12, 12) for _ in range(20000)]
    values += [k / 1e6 + 5e-7 for k in range(-200, 200)] + [-3e-7, 0.0, -0.0, 0.1234565, 1e16]
    rounded = np.round(np.array(values), 6)
    for v, w in zip(values, rounded.tolist()):
        assert repr(r6(v)) == repr(w), v
    assert [gen_monitor.fmt(x) for x in (math.nan, math.inf, -math.inf, -2e-7, 1e-6)] == [
        "nan",
        "inf",
        "-inf",
        "-0.0",
        "1e-06",
    ]


# -- determinism -------------------------------------------------------------------------------------------------
def test_same_bytes_for_any_procs_other_seed_other_bytes(tmp_path):
    kwargs = {"ranks": 3, "steps": 2, "layers": 1, "extras": EXTRAS, "nan_every": 2}
    one = generate(tmp_path / "p1", procs=1, **kwargs)
    two = generate(tmp_path / "p2", procs=2, **kwargs)
    assert one == two
    reference = files_of(tmp_path / "p1")
    assert files_of(tmp_path / "p2") == reference
    other = generate(tmp_path / "s1", seed=1, ranks=3, steps=2, layers=1)
    assert other.runs != one.runs[:3]
    name0 = other.runs[0][1]
    assert (tmp_path / "s1" / name0 / "actv_0-0.csv").read_bytes() != reference[f"{one.runs[0][1]}/actv_0-0.csv"]


def test_time_tags_shared_and_late_rank(tmp_path):
    summary = generate(tmp_path, ranks=3, steps=1, layers=1, late_rank=2)
    tags = [name.split("-rank")[0] for _, name in summary.runs]
    assert tags == ["Apr17_01-37-55", "Apr17_01-37-55", "Apr17_01-37-56"]
    uuids = [name.rsplit("-", 1)[1] for _, name in summary.runs]
    assert len(set(uuids)) == 3 and all(len(u) == 8 and int(u, 16) >= 0 for u in uuids)


# -- step ranges -------------------------------------------------------------------------------------------------
def test_step_count_per_record_start_step_and_interval(tmp_path):
    generate(tmp_path, ranks=1, steps=4, layers=1, step_count_per_record=10, start_step=100, step_interval=5)
    (run,) = tmp_path.iterdir()
    assert sorted(p.name for p in run.glob("actv_[0-9]*")) == ["actv_100-109.csv", "actv_110-119.csv"]
    first = lines(run / "actv_100-109.csv")
    assert first.count(MICRO_HEADER) == 1 and first[0] == MICRO_HEADER
    assert sorted({r["step"] for r in rows(run / "actv_100-109.csv")}) == ["100", "105"]
    assert sorted({r["step"] for r in rows(run / "grad_reduced_110-119.csv")}) == ["110", "115"]
    assert len(first) == 1 + 2 * actv_rows(1)


def test_last_file_keeps_its_nominal_range(tmp_path):
    generate(tmp_path, ranks=1, steps=7, layers=1, step_count_per_record=5, metrics=("other",))
    (run,) = tmp_path.iterdir()
    assert sorted(p.name for p in run.iterdir()) == ["other_0-4.csv", "other_5-9.csv"]
    assert [r["step"] for r in rows(run / "other_5-9.csv")][:: weight_rows(1)] == ["5", "6"]


# -- options -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("ops", "columns"),
    [
        (("mean", "bogus", "norm"), "mean,norm,shape,dtype"),
        (("bogus",), "norm,shape,dtype"),
        (("shape", "max", "id"), "shape,max,id,dtype"),
    ],
)
def test_ops_filter(tmp_path, ops, columns):
    if "bogus" in ops:
        with pytest.warns(UserWarning, match="bogus"):
            generate(tmp_path, ranks=1, steps=1, layers=1, ops=ops)
    else:
        generate(tmp_path, ranks=1, steps=1, layers=1, ops=ops)
    (run,) = tmp_path.iterdir()
    assert lines(run / "actv_0-0.csv")[0] == f"vpp_stage,name,step,micro_step,{columns}"
    assert lines(run / "exp_avg_0-0.csv")[0] == f"vpp_stage,name,step,{columns}"
    if "id" in ops:
        assert (
            lines(run / "other_0-0.csv")[1]
            == "0,module.module.embedding.word_embeddings.weight,0,[],1.0,1.0,torch.float32"
        )
        assert ",nan,torch.bfloat16" in lines(run / "actv_0-0.csv")[2]  # id of a non-0-d tensor


def test_data_parallel_replicas_agree(tmp_path):
    summary = generate(tmp_path, ranks=4, steps=2, layers=1, tp=2)  # rank = tp_rank + 2 * dp_rank
    run = {rank: tmp_path / name for rank, name in summary.runs}
    for metric in ("grad_reduced", "exp_avg", "exp_avg_sq", "param_origin", "param_updated", "other"):
        assert (run[0] / f"{metric}_1-1.csv").read_bytes() == (run[2] / f"{metric}_1-1.csv").read_bytes(), metric
        assert (run[0] / f"{metric}_1-1.csv").read_bytes() != (run[1] / f"{metric}_1-1.csv").read_bytes(), metric
    for metric in ("actv", "actv_grad", "grad_unreduced"):
        assert (run[0] / f"{metric}_1-1.csv").read_bytes() != (run[2] / f"{metric}_1-1.csv").read_bytes(), metric
    shapes = {r["name"]: r["shape"] for r in rows(run[1] / "grad_reduced_0-0.csv")}
    assert shapes["module.module.decoder.layers.0.self_attention.linear_qkv.weight"] == "[6144, 4096]"
    assert shapes["module.module.embedding.word_embeddings.weight"] == "[16000, 4096]"


def test_param_updated_is_next_steps_param_origin(tmp_path):
    generate(tmp_path, ranks=1, steps=3, layers=1)
    (run,) = tmp_path.iterdir()
    for s in (0, 1):
        updated = [line.replace(f",{s},", ",#,", 1) for line in lines(run / f"param_updated_{s}-{s}.csv")]
        origin = [line.replace(f",{s + 1},", ",#,", 1) for line in lines(run / f"param_origin_{s + 1}-{s + 1}.csv")]
        assert updated == origin
    assert lines(run / "param_origin_0-0.csv")[1:] != lines(run / "param_origin_1-1.csv")[1:]


def test_pipeline_stages_have_local_layers(tmp_path):
    summary = generate(tmp_path, ranks=4, steps=1, layers=4, pp=2, metrics=("actv", "grad_reduced"))
    names = {rank: {r["name"] for r in rows(tmp_path / name / "actv_0-0.csv")} for rank, name in summary.runs}
    layer_ids = {
        rank: {n.split("layers.")[1].split(".")[0] for n in ns if "layers." in n} for rank, ns in names.items()
    }
    assert layer_ids == {0: {"0", "1"}, 1: {"0", "1"}, 2: {"0", "1"}, 3: {"0", "1"}}
    for rank in (0, 1):  # stage 0: embedding, no head
        assert "module.module.embedding.word_embeddings.input" in names[rank]
        assert not any("output_layer" in n for n in names[rank])
    for rank in (2, 3):
        assert "module.module.output_layer.output_0" in names[rank]
        assert not any("embedding" in n for n in names[rank])
    for rank, name in summary.runs:
        assert len(rows(tmp_path / name / "actv_0-0.csv")) == 2 * (27 * 2 + 5)
        # the embedding weight on stage 0; final_layernorm and output_layer weights on stage 1
        assert len(rows(tmp_path / name / "grad_reduced_0-0.csv")) == 6 * 2 + (1 if rank < 2 else 2)


def test_virtual_pipeline_chunks(tmp_path):
    summary = generate(tmp_path, ranks=2, steps=1, layers=4, pp=2, vpp=2, metrics=("actv", "param_origin"))
    first = tmp_path / summary.runs[0][1]
    vpp = [(r["vpp_stage"], r["name"]) for r in rows(first / "param_origin_0-0.csv")]
    assert [v for v, _ in vpp] == ["0"] * 7 + ["1"] * 6  # chunk 0 holds the embedding
    assert {n.split("layers.")[1][0] for _, n in vpp if "layers." in n} == {"0"}
    assert all(not n.startswith("0:") for _, n in vpp)


def test_squash_name(tmp_path):
    generate(tmp_path, ranks=1, steps=1, layers=1, squash_name=True, metrics=("actv", "grad_reduced"))
    (run,) = tmp_path.iterdir()
    params = [r["name"] for r in rows(run / "grad_reduced_0-0.csv")]
    assert params[:3] == [
        "embedding.word_embeddings.weight",
        "layers.0.self_attention.linear_proj.weight",
        "layers.0.self_attention.linear_qkv.layer_norm_weight",
    ]
    assert params[-2:] == ["final_layernorm.weight", "output_layer.weight"]
    acts = {r["name"] for r in rows(run / "actv_0-0.csv")}
    assert {"layers.0.mlp.linear_fc1.output_0", "layers.0.output_0", "output_layer.input"} <= acts
    assert "module.module.embedding.input_0" in acts  # no pattern matches the embedding module itself


def test_monitor_mbs_grad(tmp_path):
    generate(tmp_path, ranks=1, steps=1, layers=1, monitor_mbs_grad=True, metrics=("grad_unreduced", "grad_reduced"))
    (run,) = tmp_path.iterdir()
    assert lines(run / "grad_unreduced_0-0.csv")[0] == MICRO_HEADER
    assert lines(run / "grad_reduced_0-0.csv")[0] == PLAIN_HEADER
    micro = [r["micro_step"] for r in rows(run / "grad_unreduced_0-0.csv")]
    assert micro == ["0"] * weight_rows(1) + ["1"] * weight_rows(1)


def test_integer_counts(tmp_path):
    generate(tmp_path, ranks=1, steps=1, layers=1, integer_counts=True, metrics=("actv", "grad_reduced"))
    (run,) = tmp_path.iterdir()
    assert {r["nans"] for r in rows(run / "grad_reduced_0-0.csv")} == {"0"}
    by_name = {r["name"]: r["nans"] for r in rows(run / "actv_0-0.csv")}
    # a write (one module) with a None row makes the column float; a write without keeps the int
    assert by_name["module.module.decoder.layers.0.self_attention.linear_qkv.input"] == "0.0"
    assert by_name["module.module.decoder.layers.0.self_attention.core_attention.output"] == "0"


def test_nan_every(tmp_path):
    summary = generate(tmp_path, ranks=2, steps=4, layers=2, nan_every=2, metrics=("actv", "grad_reduced"))
    for _, name in summary.runs:
        run = tmp_path / name
        for s in range(4):
            odd_actv = [r for r in rows(run / f"actv_{s}-{s}.csv") if r["norm"] == "nan" and r["nans"] != "nan"]
            odd_grad = [r for r in rows(run / f"grad_reduced_{s}-{s}.csv") if r["norm"] == "inf"]
            assert len(odd_actv) == len(odd_grad) == (1 if s in (1, 3) else 0)
            if odd_actv:
                assert odd_actv[0]["name"].endswith("mlp.linear_fc1.output_0") and float(odd_actv[0]["nans"]) >= 1
                assert (odd_grad[0]["min"], odd_grad[0]["max"], odd_grad[0]["mean"]) == ("-inf", "inf", "nan")
    a, b = (tmp_path / name / "grad_reduced_3-3.csv" for _, name in summary.runs)
    assert a.read_bytes() == b.read_bytes()  # replicas overflow together


# -- extras ------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def with_extras(tmp_path_factory) -> tuple[Path, GenSummary]:
    out = tmp_path_factory.mktemp("extras") / "monitor_output"
    return out, generate(out, ranks=2, steps=2, layers=1, extras=EXTRAS)


def test_extras_layout(with_extras):
    out, summary = with_extras
    second = "Apr17_03-51-36-rank1-058717c1"
    assert summary.runs == ((0, RUN0), (1, RUN1), (1, second))
    assert sorted(p.name for p in out.iterdir()) == sorted(["anomaly_detected", "module_struct", RUN0, RUN1, second])
    top = {p.name for p in (out / RUN0).iterdir()}
    assert {
        "actv_0-0.csv.bak",
        "actv_2-2.csv",
        "grad_reduced_0-0_part_1.csv",
        "grad_reduced_0-0_part_2.csv",
        "stack_info.csv",
        "old",
    } <= top
    assert {f"{h}_{s}-{s}.csv" for h in gen_monitor.HOOKS for s in (0, 1)} <= top
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*.json")) == [
        "anomaly_detected/rank0/anomaly.json",
        "anomaly_detected/rank1/anomaly.json",
        "module_struct/rank0/module_struct.json",
        "module_struct/rank1/module_struct.json",
    ]
    assert summary.files == len(files_of(out))
    assert summary.bytes == sum(len(b) for b in files_of(out).values())
    # rows: all metric files of the three runs, minus the rows moved to _part_ files
    assert summary.rows == 3 * 2 * (actv_rows(1) + actv_grad_rows(1) + 7 * weight_rows(1)) - weight_rows(1)


def test_extras_contents(with_extras):
    out, _ = with_extras
    run = out / RUN0
    assert (run / "actv_0-0.csv.bak").read_bytes() == (run / "actv_0-0.csv").read_bytes()
    assert (run / "old" / "actv_0-0.csv").read_bytes() == (run / "actv_0-0.csv").read_bytes()
    assert (run / "actv_2-2.csv").read_text() == MICRO_HEADER + "\n"  # header_only: the range after the last step
    # parts: the split write goes, without header, to the part files; the main file keeps only its header
    assert (run / "grad_reduced_0-0.csv").read_text() == PLAIN_HEADER + "\n"
    part1, part2 = lines(run / "grad_reduced_0-0_part_1.csv"), lines(run / "grad_reduced_0-0_part_2.csv")
    assert (len(part1), len(part2)) == (5, 4) and part1[0].startswith("0,module.module.embedding.word_embeddings")
    assert lines(out / RUN1 / "grad_reduced_0-0.csv")[1:] == part1 + part2  # replicas: the same rows
    assert lines(run / "attention_hook_0-0.csv")[:2] == [
        "vpp_stage,name,step,micro_step,entropy,softmax_max",
        lines(run / "attention_hook_0-0.csv")[1],
    ]
    assert lines(run / "attention_hook_0-0.csv")[1].startswith(
        "0,module.module.decoder.layers.0.self_attention.core_attention.attention,0,0,"
    )
    assert lines(run / "linear_hook_0-0.csv")[0] == "vpp_stage,name,step,sr,kernel_norm"
    assert lines(run / "moe_router_weight_hook_0-0.csv")[0] == "vpp_stage,name,step,router_weight_similarity"
    assert lines(run / "moe_router_logit_hook_0-0.csv")[0] == "vpp_stage,name,step,micro_step,per_token_expert_entropy"
    assert len(lines(run / "linear_hook_0-0.csv")) == 1 + 5  # four linears per layer and the output layer
    with (run / "stack_info.csv").open(newline="") as f:
        stack = list(csv.reader(f))
    assert stack[0] == ["module_name", "stack_info"]
    assert stack[1][0] == "0:module.module.embedding.word_embeddings" and "\n" in stack[1][1]
    struct = json.loads((out / "module_struct/rank0/module_struct.json").read_text())
    assert struct["0:module.module.decoder.layers.0.self_attention.linear_qkv"]["output"] == {
        "config": "tuple[2]",
        "0": "size=(4096, 1, 12288), dtype=torch.bfloat16",
        "1": "<class 'NoneType'>",
    }
    assert json.loads((out / "anomaly_detected/rank1/anomaly.json").read_text()) == {}
    assert len(json.loads((out / "anomaly_detected/rank0/anomaly.json").read_text())) == 1


def test_second_run_has_same_files_other_values(with_extras):
    out, summary = with_extras
    first, second = out / RUN1, out / summary.runs[2][1]
    assert sorted(p.name for p in first.iterdir()) == sorted(p.name for p in second.iterdir())
    assert lines(first / "actv_0-0.csv")[0] == lines(second / "actv_0-0.csv")[0]
    assert lines(first / "actv_0-0.csv")[1:] != lines(second / "actv_0-0.csv")[1:]


def test_header_only_names_a_missing_metric_and_part_rows(tmp_path):
    generate(tmp_path, ranks=1, steps=1, layers=1, metrics=("actv", "grad_reduced"), extras=("header_only", "parts"),
             part_rows=4)  # fmt: skip
    (run,) = tmp_path.iterdir()
    assert (run / "actv_grad_0-0.csv").read_text() == MICRO_HEADER + "\n"
    parts = sorted(run.glob("grad_reduced_0-0_part_*.csv"))
    assert [len(lines(p)) for p in parts] == [4, 4, 1]


# -- CLI and errors ----------------------------------------------------------------------------------------------
def test_cli(tmp_path, capsys):
    gen_monitor.main([str(tmp_path / "o"), "--ranks", "1", "--steps", "2", "--layers", "1", "--extras", "hooks,parts"])
    out = capsys.readouterr().out
    rows_ = 2 * (actv_rows(1) + actv_grad_rows(1) + 7 * weight_rows(1)) - weight_rows(1)
    assert out.startswith(f"wrote 1 run directories, 28 files, {rows_} rows, ")
    assert f"  rank 0: {RUN0}\n" in out


@pytest.mark.parametrize(
    "kwargs",
    [
        {"ranks": 3, "tp": 2},
        {"layers": 3, "pp": 2, "ranks": 2},
        {"metrics": ("bogus",)},
        {"extras": ("x",)},
        {"steps": 0},
    ],
)
def test_bad_arguments(tmp_path, kwargs):
    with pytest.raises(ValueError):
        generate(tmp_path, **{"ranks": 2, "steps": 1, "layers": 2, **kwargs})
