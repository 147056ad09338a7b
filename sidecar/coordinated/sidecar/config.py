"""The node's configuration: its command-line options and its settings, parsed and validated at startup
(`node_settings.build_config`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from coordinated.coordination.settings import NODE_NAME, Settings


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
