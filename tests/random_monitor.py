"""Hypothesis strategies for small random monitor output directories that exercise the cell rules.

Only inputs where msprobe data2db is deterministic and where trendconv does not differ on purpose: one run
per rank, text target names, every file with a valid row, and step ranges that do not overlap between the
files of a metric (so which duplicate wins never depends on the file-system listing order).
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import strategies as st

METRICS = ["actv", "actv_grad", "grad_reduced", "exp_avg", "other"]
WITH_MICRO = {"actv", "actv_grad"}
STATS = ["norm", "min", "max", "zeros", "nans", "mean", "entropy", "sr"]
NAMES = st.sampled_from(
    [
        "module.decoder.layers.0.mlp.linear_fc1.output_0",
        "module.decoder.layers.1.self_attention.linear_qkv.input",
        "layers.0.mlp.linear_fc2.weight",
        "embedding.word_embeddings.weight",
        "a..b",
        "x.0.1.y",
        "final_layernorm.weight",
        "NA",
        "",
    ]
)
CELLS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=64).map(repr),
    st.integers(min_value=-(10**10), max_value=10**10).map(str),
    st.sampled_from(["nan", "inf", "-inf", "Infinity", "-0.0", "1e-06", "", "NA", "abc", " 2.5 ", "1_000", "2e9"]),
)


@st.composite
def csv_files(draw, metric: str, start: int):
    micro = metric in WITH_MICRO
    stats = draw(st.lists(st.sampled_from(STATS), unique=True, min_size=1, max_size=5))
    header = ["vpp_stage", "name", "step", *(["micro_step"] if micro else []), *stats, "shape", "dtype"]
    rows = []
    for _ in range(draw(st.integers(min_value=1, max_value=6))):
        key = [str(draw(st.integers(0, 1))), draw(NAMES), str(start + draw(st.integers(0, 1)))]
        if micro:
            key.append(str(draw(st.integers(0, 2))))
        rows.append([*key, *(draw(CELLS) for _ in stats), '"[2, 3]"', "torch.float32"])
    return "\n".join(",".join(row) for row in [header, *rows]) + "\n"


@st.composite
def monitor_trees(draw):
    """{run directory: {file name: text}}."""
    tree = {}
    for rank in draw(st.lists(st.integers(0, 3), unique=True, min_size=1, max_size=3)):
        files = {}
        for metric in draw(st.lists(st.sampled_from(METRICS), unique=True, min_size=1, max_size=3)):
            for start in draw(st.lists(st.sampled_from([0, 2, 4]), unique=True, min_size=1, max_size=2)):
                files[f"{metric}_{start}-{start + 1}.csv"] = draw(csv_files(metric, start))
        tree[f"Mar0{rank + 1}_10-00-00-rank{rank}-{rank:08x}"] = files
    return tree


def write_monitor_tree(data: Path, tree: dict) -> None:
    for run, files in tree.items():
        (data / run).mkdir(parents=True)
        for name, text in files.items():
            (data / run / name).write_text(text)
