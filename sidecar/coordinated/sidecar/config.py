"""The node's settings: the protocol core's registry plus the sidecar's own, validated at startup.

Each sidecar setting is declared in the module that reads it (see `coordinated.coordination.settings` for how to
add one); `MODULES` lists the modules the sidecar's registry collects them from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from coordinated.coordination.registry import coordination_registry
from coordinated.coordination.settings import NODE_NAME, Settings, SettingsError, SettingsRegistry
from coordinated.sidecar import event_loop
from coordinated.sidecar.auth import service_accounts, tokens_file
from coordinated.sidecar.events import history_settings
from coordinated.sidecar.features import change_log, hooks, snapshots, watch_streams
from coordinated.sidecar.peers import auth, tls, transport
from coordinated.sidecar.s3 import s3_settings
from coordinated.sidecar.storage import group_commit
from coordinated.sidecar.web import http_server

MODULES: tuple[ModuleType, ...] = (
    auth,
    transport,
    http_server,
    history_settings,
    hooks,
    change_log,
    watch_streams,
    event_loop,
    group_commit,
    snapshots,
    s3_settings,  # the S3 clients and the history archive
    tls,
    tokens_file,
    service_accounts,  # http.auth.kubernetes.*
)


def sidecar_only_registry() -> SettingsRegistry:
    """The settings of the sidecar service alone, without the core's."""
    return SettingsRegistry.collect(MODULES)


def sidecar_registry() -> SettingsRegistry:
    """Every setting a node takes: the core's and the sidecar's."""
    return coordination_registry().merged(sidecar_only_registry())


@dataclass(frozen=True)
class NodeConfig:
    """Everything a node needs, parsed and validated."""

    data_dir: Path
    host: str
    http_port: int
    transport_port: int
    raw: dict[str, str]
    settings: Settings  # the core's and the sidecar's; read one with settings[SETTING]

    @property
    def transport_address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.transport_port}"

    @property
    def node_name(self) -> str:
        return self.settings[NODE_NAME]


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


def parse_e_option(option: str) -> tuple[str, str]:
    name, sep, value = option.partition("=")
    if not sep or not name.strip():
        raise SettingsError(f"-E expects key=value, got [{option}]")
    return name.strip(), value
