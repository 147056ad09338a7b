"""The benchmarks are the `bench` package at the checkout's root, which is not installed: put the root on the
path of the tests here, as `python -m bench` run from the root has it."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
