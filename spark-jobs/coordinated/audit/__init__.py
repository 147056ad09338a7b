"""PySpark audit of the sidecars' committed-state histories (docs/protocol.md and docs/audit.md).

Every invariant is a set of DataFrame transformations; only small aggregates and a few example events
ever reach the driver. `coordinated audit` (see `cli.py`) is the entry point; the invariants are listed in
`schema.INVARIANTS`. The package imports nothing itself, so that naming one of its light modules (`commands`)
does not start PySpark.
"""
