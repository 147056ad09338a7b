"""The node's configuration: its command-line options and `-E` settings, parsed and validated at startup against
every setting a node takes (`node_settings`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from coordinated.coordination.settings import NODE_NAME, Settings, SettingsError
from coordinated.sidecar.node_settings import sidecar_registry


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
