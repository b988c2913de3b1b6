"""Generators of msprobe-like input data, for the tests and the benchmarks (a development tool, not installed).

`datagen.dump`: statistics-mode dumps (`python -m datagen.dump --help`); `datagen.monitor`: training-monitor CSV
output (`python -m datagen.monitor --help`). The same arguments always give the same bytes.
"""
