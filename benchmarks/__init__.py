"""Benchmarks: trendconv against msprobe data2db on data from `datagen`."""
