"""Seeds stopped nodes with a large state through the node's own persistence layer (whichever version the
PYTHONPATH selects), so that a benchmark does not spend minutes writing 100,000 keys one publication at a
time. Every node gets the same new state on top of the newest last-accepted one; each keeps its term.
With `--sessions N` the state also holds N TTL sessions (of a day), each with one ephemeral key.

python bench/suites/state_seed.py --keys N --large M [--sessions N] DATA_DIR...
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click

from coordinated.coordination.state import KeyVersion, Session
from coordinated.sidecar.events.history_read import read_history_summary
from coordinated.sidecar.storage.persistence import FilePersistedState

LARGE_VALUE_BYTES = 900_000


@dataclass(frozen=True)
class SeedOptions:
    keys: int
    large: int
    sessions: int
    cluster_name: str
    data_dirs: tuple[Path, ...]


@click.command()
@click.option("--keys", type=int, required=True, help="small keys (about 40 bytes each)")
@click.option("--large", type=int, default=0, help="values of about 900 KB")
@click.option("--sessions", type=int, default=0, help="TTL sessions of a day, one ephemeral key each")
@click.option("--cluster-name", default="coordinated")
@click.argument("data_dirs", nargs=-1, required=True, type=click.Path(path_type=Path))
def main(keys: int, large: int, sessions: int, cluster_name: str, data_dirs: tuple[Path, ...]) -> None:
    seed(SeedOptions(keys, large, sessions, cluster_name, data_dirs))


def seed(args: SeedOptions) -> None:
    states = []
    for data_dir in args.data_dirs:
        persisted = FilePersistedState(data_dir, args.cluster_name, read_history=read_history_summary)
        states.append(persisted.last_accepted_state)
        persisted.close()
    # The newest one, so that no node's history shows a newer accepted state than the seeded one.
    base = max(states, key=lambda state: state.term_version())
    version = base.version + 1
    kv = dict(base.kv)
    kv.update({f"seed-{i:06d}": {"v": i, "pad": "x" * 20} for i in range(args.keys)})
    kv.update({f"large-{i}": "L" * LARGE_VALUE_BYTES for i in range(args.large)})
    sessions = dict(base.sessions)
    kv_sessions = dict(base.kv_sessions)
    for i in range(args.sessions):
        session_id = f"seeded-session-{i:06d}"
        sessions[session_id] = Session(ttl_ms=86_400_000, create_version=version)
        kv[f"eph/{i:06d}"] = {"holder": i}
        kv_sessions[f"eph/{i:06d}"] = session_id
    versions = {**base.kv_versions, **{key: KeyVersion(version, version) for key in kv if key not in base.kv}}
    seeded = base.replace(
        version=version,
        state_uuid=f"seeded{version:026d}",
        parent_uuid=base.state_uuid,
        kv=kv,
        kv_versions=versions,
        sessions=sessions,
        kv_sessions=kv_sessions,
    )
    for data_dir in args.data_dirs:
        persisted = FilePersistedState(data_dir, args.cluster_name, read_history=read_history_summary)
        persisted.set_last_accepted_state(seeded)
        persisted.close()
    print(f"seeded {len(args.data_dirs)} nodes: {len(kv)} keys, {len(sessions)} sessions at version {version}")


if __name__ == "__main__":
    main()
