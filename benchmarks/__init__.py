"""Benchmark helpers: synthetic msprobe dumps for timing and testing converters."""
