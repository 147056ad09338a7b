"""Every setting a node takes: the protocol core's registry plus the sidecar's own.

Each sidecar setting is declared in a light `*_settings` module beside the code that reads it (see
`coordinated.coordination.settings` for how to add one), which imports nothing of the node's I/O: the operator
validates `spec.settings` and generates the CRD and docs/settings.md from these registries without importing
the sidecar itself. `MODULES` lists the modules the sidecar's registry collects them from, in the order
docs/settings.md lists them; `build_config` parses a node's options and settings with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

from coordinated.coordination.registry import coordination_registry
from coordinated.coordination.settings import SettingsError, SettingsRegistry
from coordinated.s3 import s3_settings
from coordinated.sidecar import event_loop_settings
from coordinated.sidecar.config import NodeConfig
from coordinated.sidecar.events import archive_settings, history_settings
from coordinated.sidecar.features import hooks_settings, snapshot_settings, watch_settings
from coordinated.sidecar.peers import auth_settings, tls_settings, transport_settings
from coordinated.sidecar.storage import persistence_settings
from coordinated.sidecar.web import access_settings, http_settings

MODULES: tuple[ModuleType, ...] = (
    auth_settings,
    transport_settings,
    http_settings,
    history_settings,
    hooks_settings,
    watch_settings,
    event_loop_settings,
    persistence_settings,
    snapshot_settings,
    s3_settings,  # the S3 clients
    archive_settings,
    tls_settings,
    access_settings,
)


def sidecar_only_registry() -> SettingsRegistry:
    """The settings of the sidecar service alone, without the core's."""
    return SettingsRegistry.collect(MODULES)


def sidecar_registry() -> SettingsRegistry:
    """Every setting a node takes: the core's and the sidecar's."""
    return coordination_registry().merged(sidecar_only_registry())


def build_config(
    *, name: str, data_dir: str, host: str, http_port: int, transport_port: int, overrides: Mapping[str, str]
) -> NodeConfig:
    """Raises SettingsError naming the setting that is wrong."""
    raw = dict(overrides)
    if "node.name" in raw and raw["node.name"] != name:
        raise SettingsError(f"setting [node.name] is [{raw['node.name']}] but --name is [{name}]; give only one")
    raw["node.name"] = name
    for port_name, port in (("--http-port", http_port), ("--transport-port", transport_port)):
        if not 0 < port < 65536:
            raise SettingsError(f"{port_name} must be between 1 and 65535, got {port}")
    if http_port == transport_port:
        raise SettingsError("--http-port and --transport-port must differ")
    return NodeConfig(
        data_dir=Path(data_dir),
        host=host,
        http_port=http_port,
        transport_port=transport_port,
        raw=raw,
        settings=sidecar_registry().parse(raw),
    )
