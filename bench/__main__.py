"""`python -m bench SUITE ...`: see bench/cli.py."""

from bench.cli import main

main()
