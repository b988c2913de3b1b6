"""Build configuration beyond pyproject.toml: the optional C reader of dump.json (trendconv.dump._extract).

Where it cannot be compiled (no C compiler), trendconv installs without it and parses in Python: the
same shards, more slowly.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "trendconv.dump._extract",
            ["trendconv/dump/_extract.c"],
            extra_compile_args=["-O2", "-std=c11"],
            optional=True,
        ),
    ]
)
