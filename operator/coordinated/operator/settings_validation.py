"""Validation of `spec.settings`, the sidecar settings map, against DESIGN section 4.

The sidecar owns the authoritative parser (`coordinated.coordination.settings`); this copy stays
import-free of the sidecar so that the operator can reject a bad spec before any pod starts, with a
message naming the setting. `tests/operator/test_settings_validation.py` checks that both agree on the
setting names. The same rules appear as CEL in the CRD, so the API server rejects most mistakes first.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

_TIME = re.compile(r"^\d+(ms|s|m|h|d)$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_NONZERO_TIME = re.compile(r"^0*[1-9]\d*(ms|s|m|h|d)$")


def _time(value: str) -> str | None:
    if not _TIME.match(value):
        return f"expected a time value such as 500ms, 1s or 2m, got [{value}]"
    if not _NONZERO_TIME.match(value):
        return f"must be positive, got [{value}]"
    return None


def _positive_int(value: str) -> str | None:
    return None if value.isdigit() and int(value) >= 1 else f"expected an integer of at least 1, got [{value}]"


def _bool(value: str) -> str | None:
    return None if value in ("true", "false") else f"expected [true] or [false], got [{value}]"


def _name(value: str) -> str | None:
    if _NAME.match(value):
        return None
    return f"[{value}] must be 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit"


def _one_of(*choices: str) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        return None if value in choices else f"expected one of {list(choices)}, got [{value}]"

    return check


# Settings a user may put in spec.settings, with their value checks.
USER_SETTINGS: dict[str, Callable[[str], str | None]] = {
    "cluster.name": _name,
    "discovery.find_peers_interval": _time,
    "discovery.cluster_formation_warning_timeout": _time,
    "cluster.election.initial_timeout": _time,
    "cluster.election.back_off_time": _time,
    "cluster.election.max_timeout": _time,
    "cluster.election.duration": _time,
    "cluster.fault_detection.leader_check.interval": _time,
    "cluster.fault_detection.leader_check.timeout": _time,
    "cluster.fault_detection.leader_check.retry_count": _positive_int,
    "cluster.fault_detection.follower_check.interval": _time,
    "cluster.fault_detection.follower_check.timeout": _time,
    "cluster.fault_detection.follower_check.retry_count": _positive_int,
    "cluster.publish.timeout": _time,
    "cluster.follower_lag.timeout": _time,
    "cluster.no_master_block": _one_of("all", "write", "metadata_write"),
    "cluster.auto_shrink_voting_configuration": _bool,
    "cluster.max_voting_config_exclusions": _positive_int,
}

# Settings the operator sets on every pod; a user value would break discovery, bootstrap or scaling.
OPERATOR_MANAGED_SETTINGS: dict[str, str] = {
    "node.name": "every node is named after its pod",
    "node.roles": "every pod of a CoordinatedCluster is master-eligible",
    "discovery.seed_hosts": "the operator points discovery at the headless Service",
    "cluster.initial_master_nodes": "the operator computes it once, for the first bootstrap only",
    "transport.secret_file": "the operator mounts the transport secret it generates",
}

# Zen1 names, rejected with what replaced them (the sidecar rejects them the same way at startup).
_ZEN1_REPLACEMENTS = {
    "discovery.zen.minimum_master_nodes": "nothing: the voting configuration sets the quorum automatically",
    "discovery.zen.ping.unicast.hosts": "discovery.seed_hosts (managed by the operator)",
    "discovery.zen.no_master_block": "cluster.no_master_block",
    "discovery.zen.commit_timeout": "cluster.publish.timeout",
    "discovery.zen.publish_timeout": "cluster.publish.timeout",
}


def validate_settings(settings: Mapping[str, object] | None) -> list[str]:
    """Every problem in the map, one message per setting that names it; empty when valid."""
    problems: list[str] = []
    for name, value in sorted((settings or {}).items()):
        if name.startswith("discovery.zen."):
            replacement = _ZEN1_REPLACEMENTS.get(name, "the cluster.* and discovery.* settings of Zen2")
            problems.append(f"setting [{name}] is from Zen1 discovery and is not supported; use {replacement}")
        elif name in OPERATOR_MANAGED_SETTINGS:
            problems.append(f"setting [{name}] is managed by the operator: {OPERATOR_MANAGED_SETTINGS[name]}")
        elif name not in USER_SETTINGS:
            problems.append(f"unknown setting [{name}]")
        elif not isinstance(value, str):
            problems.append(f"setting [{name}] must be a string, got {type(value).__name__} (quote it in YAML)")
        elif (problem := USER_SETTINGS[name](value)) is not None:
            problems.append(f"invalid value for setting [{name}]: {problem}")
    return problems
