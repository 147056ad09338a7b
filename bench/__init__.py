"""coordinated-cluster's benchmarks: one entry point (`python -m bench SUITE ...`), a subcommand per suite
(bench/suites/), one harness shared by all of them (bench/harness/) and the report that docs/performance.md is
generated from (bench/report.py). The method is in docs/benchmarking.md."""

from pathlib import Path

# The checkout's root: the folder that holds this package, put on the path of the suites' child processes.
ROOT = Path(__file__).resolve().parent.parent
