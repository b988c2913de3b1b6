"""The `trendconv` command line (trendconv.cli.app), and what it shows a person (trendconv.cli.report)."""

from trendconv.cli import report
from trendconv.cli.app import app, main

__all__ = ["app", "main", "report"]
