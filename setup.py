"""Build configuration beyond pyproject.toml: five optional C parts, each with a Python path that gives the
same bytes more slowly where it cannot be compiled (no compiler, no SQLite headers):

- trendconv.formats.dump._extract, the rows of a dump.json read in one pass (a Python extension module);
- trendconv.formats.monitor._cells, the cells of a regular monitor CSV file read in one pass (the same);
- trendconv.loading._btree, the pages of trend_data's read indexes (a Python extension module);
- trendconv.loading._table, trend_data's rows onto its leaf pages while loading (the same);
- trendconv.loading._columns, a SQLite extension the loader inserts Arrow columns through (never imported by
  Python: the loader's SQLite loads it).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "trendconv.formats.dump._extract",
            ["trendconv/formats/dump/_extract.c"],
            extra_compile_args=["-O2", "-std=c11"],
            optional=True,
        ),
        Extension(
            "trendconv.formats.monitor._cells",
            ["trendconv/formats/monitor/_cells.c"],
            extra_compile_args=["-O2", "-std=c11"],
            optional=True,
        ),
        Extension(
            "trendconv.loading._btree",
            ["trendconv/loading/_btree.c"],
            extra_compile_args=["-O2", "-std=c11"],
            optional=True,
        ),
        Extension(
            "trendconv.loading._table",
            ["trendconv/loading/_table.c"],
            extra_compile_args=["-O2", "-std=c11"],
            optional=True,
        ),
        Extension(
            "trendconv.loading._columns",
            ["trendconv/loading/_columns.c"],
            extra_compile_args=["-O2", "-std=c11"],
            optional=True,
        ),
    ]
)
