"""Validation of `spec.settings`, the sidecar settings map (docs/settings.md lists them).

Values are checked by the sidecar's own registry (shipped in the same image), so the operator refuses exactly
what would stop a sidecar from starting, before any pod starts and without a crash loop. On top of it this
module adds the operator's policy: the settings it sets itself. Every other registered setting may go in
`spec.settings`. The CRD's rules, generated from the same registry (`crd_settings`), let the API server reject
unknown settings and malformed values first; ranges and rules between settings are left to this check (the
status condition and the ScalingRefused event).
"""

from __future__ import annotations

from collections.abc import Mapping

from coordinated.coordination.formation import INITIAL_MASTER_NODES
from coordinated.coordination.peer_finder import SEED_HOSTS
from coordinated.coordination.retired_settings import retired_setting_message
from coordinated.coordination.settings import NODE_NAME, NODE_ROLES, SettingsError
from coordinated.s3.s3_settings import S3_CLIENT_SETTINGS
from coordinated.sidecar.events.archive_settings import ARCHIVE_SETTINGS
from coordinated.sidecar.features.snapshot_settings import PATH_REPO
from coordinated.sidecar.node_settings import sidecar_registry
from coordinated.sidecar.peers.auth_settings import SECRET_FILE
from coordinated.sidecar.peers.tls_settings import (
    HTTP_SSL_CLIENT_AUTHENTICATION,
    HTTP_TLS,
    TRANSPORT_SSL_TRUST_RESTRICTIONS,
    TRANSPORT_TLS,
)
from coordinated.sidecar.web.access_settings import TOKENS_FILE

_TLS = "the operator sets TLS from spec.tls and mounts the certificates it manages"
_ARCHIVE = "the operator sets the archive from spec.archive"
_S3_CLIENT = "the operator sets the S3 clients from spec.archive and spec.snapshots"

# Settings the operator sets on every pod; a user value would break discovery, bootstrap, scaling or security.
OPERATOR_MANAGED_SETTINGS: dict[str, str] = {
    NODE_NAME.name: "every node is named after its pod",
    NODE_ROLES.name: "every pod of a CoordinatedCluster is master-eligible",
    SEED_HOSTS.name: "the operator points discovery at the headless Service",
    INITIAL_MASTER_NODES.name: "the operator computes it once, for the first bootstrap only",
    SECRET_FILE.name: "the operator mounts the transport secret it generates",
    **{setting.name: _TLS for port in (TRANSPORT_TLS, HTTP_TLS) for setting in port.all()},
    HTTP_SSL_CLIENT_AUTHENTICATION.name: "set spec.tls.clientAuthentication instead",
    TRANSPORT_SSL_TRUST_RESTRICTIONS.name: "the operator restricts the transport to its pods' certificates",
    TOKENS_FILE.name: "the operator sets tokens from spec.auth and mounts the tokens file it manages",
    PATH_REPO.name: "the operator sets it to the snapshot volume's mount path from spec.snapshots",
    **{setting.name: _ARCHIVE for setting in ARCHIVE_SETTINGS},
    **{setting.name: _S3_CLIENT for setting in S3_CLIENT_SETTINGS},
}
_REGISTRY = sidecar_registry()


def operator_managed(name: str) -> str | None:
    """Why the operator sets `name` itself (a declared name, or a concrete name of an affix setting such as
    `s3.client.default.endpoint`), or None if a user may."""
    setting = _REGISTRY.find(name)
    return OPERATOR_MANAGED_SETTINGS.get(name if setting is None else setting.name)


# Settings a user may put in spec.settings: every registered setting that the operator does not set.
USER_SETTINGS: frozenset[str] = frozenset(_REGISTRY.settings) - frozenset(OPERATOR_MANAGED_SETTINGS)


def validate_settings(settings: Mapping[str, object] | None) -> list[str]:
    """Every problem in the map, one message per setting that names it; empty when valid."""
    problems: list[str] = []
    registry = _REGISTRY
    strings: dict[str, str] = {}
    for name, value in sorted((settings or {}).items()):
        retired = retired_setting_message(name)
        managed = operator_managed(name)
        if retired is not None:
            problems.append(retired)
        elif managed is not None:
            problems.append(f"setting [{name}] is managed by the operator: {managed}")
        elif name not in USER_SETTINGS:
            problems.append(f"unknown setting [{name}]")
        elif not isinstance(value, str):
            problems.append(f"setting [{name}] must be a string, got {type(value).__name__} (quote it in YAML)")
        else:
            try:
                registry.parse_one(name, value)
                strings[name] = value
            except SettingsError as error:
                problems.append(str(error))
    if not problems:
        try:  # the rules between settings; node.name is the operator's, any valid name will do here
            registry.parse({**strings, NODE_NAME.name: "validation"})
        except SettingsError as error:
            problems.append(str(error))
    return problems
