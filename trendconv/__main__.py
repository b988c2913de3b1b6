"""`python -m trendconv` runs the command line."""

from trendconv.cli import main

main()
