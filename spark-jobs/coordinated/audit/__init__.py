"""PySpark audit of the sidecars' committed-state histories (docs/protocol.md and docs/audit.md).

Every invariant is a set of DataFrame transformations; only small aggregates and a few example events
ever reach the driver. `coordinated audit` (see `cli.py`) is the entry point.
"""

from coordinated.audit.schema import INVARIANTS

__all__ = ["INVARIANTS"]
