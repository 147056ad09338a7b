"""Validation of `spec.settings`, the sidecar settings map (docs/settings.md lists them).

Values are checked by the sidecar's own parser (`coordinated.coordination.settings`, shipped in the same
image), so the operator refuses exactly what would stop a sidecar from starting, before any pod starts and
without a crash loop. On top of it this module adds the operator's policy: which settings a user may set.
The CRD repeats the per-setting rules as CEL, so the API server rejects most mistakes first; ranges and
rules between settings are left to this check (the status condition and the ScalingRefused event).
"""

from __future__ import annotations

from collections.abc import Mapping

from coordinated.coordination.settings import SettingsError, coordination_registry

# Settings a user may put in spec.settings: every core setting but the per-node ones, which the operator sets.
USER_SETTINGS: frozenset[str] = frozenset(
    name for name, setting in coordination_registry().settings.items() if not setting.per_node
)

# The sidecar's TLS and token settings (registered by the sidecar service, not the protocol core's registry).
SECURITY_SETTINGS: frozenset[str] = frozenset(
    {
        *(
            f"{port}.ssl.{name}"
            for port in ("transport", "http")
            for name in ("enabled", "certificate", "key", "certificate_authorities")
        ),
        "http.ssl.client_authentication",
        "http.auth.tokens_file",
    }
)

# Settings the operator sets on every pod; a user value would break discovery, bootstrap or scaling.
OPERATOR_MANAGED_SETTINGS: dict[str, str] = {
    "node.name": "every node is named after its pod",
    "node.roles": "every pod of a CoordinatedCluster is master-eligible",
    "discovery.seed_hosts": "the operator points discovery at the headless Service",
    "cluster.initial_master_nodes": "the operator computes it once, for the first bootstrap only",
    "transport.secret_file": "the operator mounts the transport secret it generates",
    **{
        name: "the operator sets TLS from spec.tls and mounts the certificates it manages" for name in SECURITY_SETTINGS
    },
    "http.ssl.client_authentication": "set spec.tls.clientAuthentication instead",
    "http.auth.tokens_file": "the operator sets tokens from spec.auth and mounts the tokens file it manages",
    "path.repo": "the operator sets it to the snapshot volume's mount path from spec.snapshots",
    **{
        name: "the operator sets the archive from spec.archive"
        for name in ("history.archive.type", "history.archive.s3.bucket", "history.archive.s3.base_path")
    },
    "history.archive.s3.client": "the operator sets the archive from spec.archive",
}
# Whole families of settings the operator writes: the S3 clients come from spec.archive and spec.snapshots.
OPERATOR_MANAGED_PREFIXES: dict[str, str] = {
    "s3.client.": "the operator sets the S3 client from spec.archive and spec.snapshots",
}


def operator_managed(name: str) -> str | None:
    """Why the operator sets `name` itself, or None if a user may."""
    if name in OPERATOR_MANAGED_SETTINGS:
        return OPERATOR_MANAGED_SETTINGS[name]
    return next((why for prefix, why in OPERATOR_MANAGED_PREFIXES.items() if name.startswith(prefix)), None)


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
    registry = coordination_registry()
    for name, value in sorted((settings or {}).items()):
        if name.startswith("discovery.zen."):
            replacement = _ZEN1_REPLACEMENTS.get(name, "the cluster.* and discovery.* settings of Zen2")
            problems.append(f"setting [{name}] is from Zen1 discovery and is not supported; use {replacement}")
        elif operator_managed(name) is not None:
            problems.append(f"setting [{name}] is managed by the operator: {operator_managed(name)}")
        elif name not in USER_SETTINGS:
            problems.append(f"unknown setting [{name}]")
        elif not isinstance(value, str):
            problems.append(f"setting [{name}] must be a string, got {type(value).__name__} (quote it in YAML)")
        else:
            try:
                registry.parse_one(name, value)
            except SettingsError as error:
                problems.append(str(error))
    if not problems:
        try:  # the rules between settings; node.name is the operator's, any valid name will do here
            registry.parse({**(settings or {}), "node.name": "validation"})  # type: ignore[dict-item]
        except SettingsError as error:
            problems.append(str(error))
    return problems
