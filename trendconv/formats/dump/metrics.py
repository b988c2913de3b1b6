"""The metrics and stat columns of dump data (docs/dump-format.md §8), in id and column order."""

METRICS = ("forward", "backward", "recompute", "parameters_grad")
STATS = ("norm", "max", "min", "mean")
