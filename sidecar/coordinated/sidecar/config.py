"""The node's settings: the coordination core's registry plus the sidecar's own, validated at startup."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinated.coordination.settings import (
    CoordinationSettings,
    Setting,
    SettingsError,
    SettingsRegistry,
    coordination_registry,
    parse_bool,
    parse_byte_size,
    parse_time_ms,
)
from coordinated.sidecar.s3_settings import ARCHIVE_SETTINGS, S3_CLIENT_SETTINGS, check_archive_settings
from coordinated.sidecar.security_settings import SECURITY_SETTINGS, check_security_settings


def parse_secret_file(value: str) -> str:
    # Read at startup so that a missing or empty secret stops the node instead of running unauthenticated.
    path = Path(value)
    try:
        secret = path.read_bytes().strip()
    except OSError as error:
        raise ValueError(f"cannot read [{value}]: {error.strerror or error}") from None
    if len(secret) < 16:
        raise ValueError(f"the secret in [{value}] is shorter than 16 bytes")
    return str(path)


def parse_positive_int(value: str) -> int:
    try:
        parsed = int(value)
    except ValueError:
        raise ValueError(f"expected an integer, got [{value}]") from None
    if parsed <= 0:
        raise ValueError(f"must be positive, got [{value}]")
    return parsed


def parse_non_negative_int(value: str) -> int:
    try:
        parsed = int(value)
    except ValueError:
        raise ValueError(f"expected an integer, got [{value}]") from None
    if parsed < 0:
        raise ValueError(f"must not be negative, got [{value}]")
    return parsed


MAX_CHANGE_LOG_SIZE = 1_000_000


def parse_change_log_size(value: str) -> int:
    """How many key changes each node keeps for watches (docs/applications.md)."""
    parsed = parse_positive_int(value)
    if parsed > MAX_CHANGE_LOG_SIZE:
        raise ValueError(f"must be at most {MAX_CHANGE_LOG_SIZE}, got [{value}]")
    return parsed


EVENT_LOOPS = ("uvloop", "asyncio")


def parse_event_loop(value: str) -> str:
    if value not in EVENT_LOOPS:
        raise ValueError(f"expected one of {list(EVENT_LOOPS)}, got [{value}]")
    return value


PERSISTENCE_SYNCS = ("background", "inline")


def parse_persistence_sync(value: str) -> str:
    if value not in PERSISTENCE_SYNCS:
        raise ValueError(f"expected one of {list(PERSISTENCE_SYNCS)}, got [{value}]")
    return value


def parse_repo_paths(value: str) -> tuple[str, ...]:
    """`path.repo`: a comma list of absolute directories that snapshot repositories may live under."""
    paths = tuple(part.strip() for part in value.split(",") if part.strip())
    for path in paths:
        if not path.startswith("/"):
            raise ValueError(f"[{path}] is not an absolute path")
    return paths


MIN_CHUNK_SIZE = 4 * 1024
MAX_CHUNK_SIZE = 64 * 1024 * 1024


def parse_chunk_size(value: str) -> int:
    """`transport.max_chunk_size`: the largest peer frame; a smaller one costs more frames per large state, a
    larger one more memory per connection."""
    parsed = parse_byte_size(value)
    if not MIN_CHUNK_SIZE <= parsed <= MAX_CHUNK_SIZE:
        raise ValueError(f"must be between [4kb] and [64mb], got [{value}]")
    return parsed


def _time(value: str) -> int:
    parsed = parse_time_ms(value)
    if parsed <= 0:
        raise ValueError(f"must be positive, got [{value}]")
    return parsed


SIDECAR_SETTINGS = (
    Setting("transport.secret_file", parse_secret_file, None),
    Setting("transport.request_timeout", _time, "10s"),
    Setting("transport.connect_timeout", _time, "1s"),
    Setting("transport.retries", parse_non_negative_int, "2"),
    Setting("transport.queue_size", parse_positive_int, "10000"),
    Setting("transport.max_chunk_size", parse_chunk_size, "1mb"),
    Setting("http.max_content_length", parse_byte_size, "1mb"),
    Setting("history.segment_size", parse_byte_size, "16mb"),
    Setting("history.fsync", parse_bool, "false"),
    Setting("hooks.timeout", _time, "5s"),
    Setting("watch.change_log.size", parse_change_log_size, "10000"),
    # libuv's event loop (uvloop) or the standard library's; see docs/benchmarks.md for what it saves.
    Setting("node.event_loop", parse_event_loop, "uvloop"),
    # Where the durable store's fsync runs: on the event loop, or a worker thread with group commit (see
    # group_commit; measured slower on a 2-core machine with a fast disk, docs/benchmarks.md).
    Setting("persistence.sync", parse_persistence_sync, "inline"),
    Setting("path.repo", parse_repo_paths, None),
    *SECURITY_SETTINGS,
    *ARCHIVE_SETTINGS,
    *S3_CLIENT_SETTINGS,
)


def sidecar_registry() -> SettingsRegistry:
    registry = coordination_registry()
    for setting in SIDECAR_SETTINGS:
        registry.register(setting)
    registry.cross_checks.append(check_security_settings)
    registry.cross_checks.append(check_archive_settings)
    return registry


@dataclass(frozen=True)
class NodeConfig:
    """Everything a node needs, parsed and validated."""

    data_dir: Path
    host: str
    http_port: int
    transport_port: int
    raw: dict[str, str]
    parsed: dict[str, Any]
    coordination: CoordinationSettings

    @property
    def transport_address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.transport_port}"

    def get(self, name: str) -> Any:
        return self.parsed.get(name)


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
    registry = sidecar_registry()
    parsed = registry.parse(raw)
    return NodeConfig(
        data_dir=Path(data_dir),
        host=host,
        http_port=http_port,
        transport_port=transport_port,
        raw=raw,
        parsed=parsed,
        coordination=CoordinationSettings.from_parsed(parsed),
    )


def parse_e_option(option: str) -> tuple[str, str]:
    name, sep, value = option.partition("=")
    if not sep or not name.strip():
        raise SettingsError(f"-E expects key=value, got [{option}]")
    return name.strip(), value
