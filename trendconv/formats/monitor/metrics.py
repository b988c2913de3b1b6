"""The metrics and stat columns of monitor data, in their canonical orders."""

# Canonical orders (docs/monitor-format.md §4.2, §4.4): metric ids and trend_data stat columns follow them.
METRICS = (
    "actv",
    "actv_grad",
    "exp_avg",
    "exp_avg_sq",
    "grad_unreduced",
    "grad_reduced",
    "param_origin",
    "param_updated",
    "other",
)
STATS = (
    "norm",
    "min",
    "max",
    "zeros",
    "nans",
    "mean",
    "entropy",
    "softmax_max",
    "sr",
    "kernel_norm",
    "std_x",
    "jacobian",
    "proxy",
    "token_similarity",
)
