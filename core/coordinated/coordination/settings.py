"""Node settings with Elasticsearch names, defaults and units (listed in docs/settings.md).

Settings arrive as strings (`-E key=value`, pod config, `PUT /_cluster/settings`). Each one is parsed and
validated here; an unknown, invalid or retired (Zen1) setting raises `SettingsError` naming the setting.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

_TIME_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_TIME_VALUE = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)\s*$")
_SIZE = re.compile(r"^\s*(\d+)\s*(b|kb|mb|gb)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"b": 1, "kb": 1024, "mb": 1024**2, "gb": 1024**3}
_NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")

NO_MASTER_BLOCKS = ("all", "write", "metadata_write")


class SettingsError(ValueError):
    """A setting is unknown, malformed, out of range, or retired."""


def parse_time_ms(value: str) -> int:
    match = _TIME_VALUE.match(value)
    if not match:
        raise ValueError(f"expected a time value such as 500ms, 1s or 2m, got [{value}]")
    return int(match.group(1)) * _TIME_UNITS_MS[match.group(2)]


def format_time_ms(ms: int) -> str:
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms % size == 0 and ms >= size:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def parse_byte_size(value: str) -> int:
    match = _SIZE.match(value)
    if not match:
        raise ValueError(f"expected a byte size such as 512kb or 1mb, got [{value}]")
    size = int(match.group(1)) * _SIZE_UNITS[(match.group(2) or "b").lower()]
    if size <= 0:
        raise ValueError(f"must be positive, got [{value}]")
    return size


def format_byte_size(size: int) -> str:
    for unit, factor in (("gb", 1024**3), ("mb", 1024**2), ("kb", 1024)):
        if size % factor == 0 and size >= factor:
            return f"{size // factor}{unit}"
    return f"{size}b"


def parse_bool(value: str) -> bool:
    if value in ("true", "false"):
        return value == "true"
    raise ValueError(f"expected [true] or [false], got [{value}]")


def parse_list(value: str) -> tuple[str, ...]:
    stripped = value.strip()
    if stripped.startswith("[") and stripped.endswith("]"):
        stripped = stripped[1:-1]
    return tuple(item.strip() for item in stripped.split(",") if item.strip())


def parse_roles(value: str) -> tuple[str, ...]:
    roles = parse_list(value)
    unknown = [role for role in roles if role != "master"]
    if unknown:
        raise ValueError(f"unknown node roles {unknown}; the only role is [master], or [] for none")
    return roles


def parse_node_name(value: str) -> str:
    if not _NODE_NAME.match(value):
        raise ValueError(
            f"[{value}] is not a valid node name: use 1-63 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return value


def parse_node_names(value: str) -> tuple[str, ...]:
    return tuple(parse_node_name(name) for name in parse_list(value))


# Object storage names, shared by the S3 client settings and the `s3` snapshot repository: S3's bucket naming
# rules, key prefixes in S3's "safe characters" (no escaping anywhere: URLs, Hadoop paths, shells), client names.
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_BASE_PATH = re.compile(r"[A-Za-z0-9!_.*'()/-]*")
_CLIENT_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def parse_bucket(value: str) -> str:
    if not _BUCKET.fullmatch(value) or ".." in value:
        raise ValueError(f"[{value}] is not a valid bucket name: 3 to 63 lowercase letters, digits, '.' or '-'")
    return value


def parse_base_path(value: str) -> str:
    """A key prefix without leading or trailing slashes ("" for the bucket's root)."""
    path = value.strip("/")
    if not _BASE_PATH.fullmatch(path) or (path and any(part in ("", ".", "..") for part in path.split("/"))):
        raise ValueError(
            f"[{value}] is not a valid base path: letters, digits and !_.*'()- in segments separated by '/', "
            "none empty, '.' or '..'"
        )
    return path


def parse_client_name(value: str) -> str:
    if not _CLIENT_NAME.fullmatch(value):
        raise ValueError(f"[{value}] is not a valid client name: 1 to 64 letters, digits, '_' or '-'")
    return value


def parse_seed_hosts(value: str) -> tuple[str, ...]:
    hosts = parse_list(value)
    for host in hosts:
        _, sep, port = host.rpartition(":")
        if not sep or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"seed host [{host}] must be host:port with a transport port")
    return hosts


def parse_no_master_block(value: str) -> str:
    if value not in NO_MASTER_BLOCKS:
        raise ValueError(f"expected one of {list(NO_MASTER_BLOCKS)}, got [{value}]")
    return value


def _positive(parser: Callable[[str], int]) -> Callable[[str], int]:
    def parse(value: str) -> int:
        parsed = parser(value)
        if parsed <= 0:
            raise ValueError(f"must be positive, got [{value}]")
        return parsed

    return parse


def _time_within(minimum_ms: int, maximum_ms: int | None = None) -> Callable[[str], int]:
    """A time value within Elasticsearch's bounds for the setting (beyond them a cluster cannot work well)."""

    def parse(value: str) -> int:
        parsed = parse_time_ms(value)
        if parsed < minimum_ms:
            raise ValueError(f"must be at least [{format_time_ms(minimum_ms)}], got [{value}]")
        if maximum_ms is not None and parsed > maximum_ms:
            raise ValueError(f"must be at most [{format_time_ms(maximum_ms)}], got [{value}]")
        return parsed

    return parse


def _int_at_least(minimum: int) -> Callable[[str], int]:
    def parse(value: str) -> int:
        try:
            parsed = int(value)
        except ValueError:
            raise ValueError(f"expected an integer, got [{value}]") from None
        if parsed < minimum:
            raise ValueError(f"must be at least {minimum}, got [{value}]")
        return parsed

    return parse


@dataclass(frozen=True)
class Setting:
    name: str
    parse: Callable[[str], Any]
    default: str | None  # None: required, or absent unless given
    dynamic: bool = False
    required: bool = False
    attribute: str | None = None  # the field of CoordinationSettings that holds it
    per_node: bool = False  # the node's identity or its way into the cluster, given by whoever starts it


# In a registered name, `*` stands for one name segment chosen by the user, as in Elasticsearch's affix settings
# (`s3.client.*.endpoint` covers `s3.client.backups.endpoint`).
AFFIX = "*"


def _affix_pattern(name: str) -> re.Pattern[str]:
    return re.compile(r"[^.]+".join(re.escape(part) for part in name.split(AFFIX)))


@dataclass
class SettingsRegistry:
    """The known settings. The sidecar registers its own on top of the coordination ones."""

    settings: dict[str, Setting] = field(default_factory=dict)
    # Rules between settings, run on the parsed map; each raises SettingsError.
    cross_checks: list[Callable[[Mapping[str, Any]], None]] = field(default_factory=list)
    _affixes: list[tuple[re.Pattern[str], Setting]] = field(default_factory=list)

    def register(self, setting: Setting) -> None:
        self.settings[setting.name] = setting
        if AFFIX in setting.name:
            self._affixes.append((_affix_pattern(setting.name), setting))

    def find(self, name: str) -> Setting | None:
        """The setting `name` is, directly or through an affix name."""
        setting = self.settings.get(name)
        if setting is None:
            setting = next((found for pattern, found in self._affixes if pattern.fullmatch(name)), None)
        return setting

    def parse(self, raw: Mapping[str, str]) -> dict[str, Any]:
        """Validate every raw setting and fill in defaults. Raises SettingsError naming the setting."""
        parsed: dict[str, Any] = {}
        for name, value in raw.items():
            parsed[name] = self.parse_one(name, value)
        for name, setting in self.settings.items():
            if name in parsed or AFFIX in name:  # an affix setting's default is read where it is used
                continue
            if setting.required:
                raise SettingsError(f"setting [{name}] is required")
            if setting.default is not None:
                parsed[name] = setting.parse(setting.default)
        for check in self.cross_checks:
            check(parsed)
        return parsed

    def parse_one(self, name: str, value: str) -> Any:
        retired = retired_setting_message(name)
        if retired:
            raise SettingsError(retired)
        setting = self.find(name)
        if setting is None:
            raise SettingsError(f"unknown setting [{name}]")
        if not isinstance(value, str):
            raise SettingsError(f"setting [{name}] must be given as a string, got {type(value).__name__}")
        try:
            return setting.parse(value)
        except ValueError as error:
            raise SettingsError(f"invalid value for setting [{name}]: {error}") from None

    def validate_dynamic(self, updates: Mapping[str, str | None]) -> dict[str, Any]:
        """Check a `PUT /_cluster/settings` body; None resets a setting to its default."""
        checked: dict[str, Any] = {}
        for name, value in updates.items():
            setting = self.find(name)
            if setting is not None and not setting.dynamic:
                raise SettingsError(f"setting [{name}] is not dynamically updateable")
            checked[name] = None if value is None else self.parse_one(name, value)
        return checked


def retired_setting_message(name: str) -> str | None:
    if name == "discovery.zen.minimum_master_nodes":
        return (
            "setting [discovery.zen.minimum_master_nodes] is from Zen1 discovery and is not supported: "
            "the voting configuration now sets the quorum automatically; use cluster.initial_master_nodes "
            "to bootstrap a new cluster"
        )
    if name.startswith("discovery.zen."):
        replacement = {
            "discovery.zen.ping.unicast.hosts": "discovery.seed_hosts",
            "discovery.zen.hosts_provider": "discovery.seed_hosts",
            "discovery.zen.no_master_block": "cluster.no_master_block",
            "discovery.zen.commit_timeout": "cluster.publish.timeout",
            "discovery.zen.publish_timeout": "cluster.publish.timeout",
            "discovery.zen.fd.ping_interval": "cluster.fault_detection.*.interval",
            "discovery.zen.fd.ping_timeout": "cluster.fault_detection.*.timeout",
            "discovery.zen.fd.ping_retries": "cluster.fault_detection.*.retry_count",
        }.get(name, "the cluster.* and discovery.* settings of Zen2 discovery")
        return f"setting [{name}] is from Zen1 discovery and is not supported; use {replacement} instead"
    return None


def _max_timeout_covers_initial_timeout(parsed: Mapping[str, Any]) -> None:
    initial, maximum = parsed.get("cluster.election.initial_timeout"), parsed.get("cluster.election.max_timeout")
    if initial is not None and maximum is not None and maximum < initial:
        raise SettingsError(
            f"setting [cluster.election.max_timeout] is [{format_time_ms(maximum)}], but must be at least "
            f"[cluster.election.initial_timeout] which is [{format_time_ms(initial)}]"
        )


def coordination_registry() -> SettingsRegistry:
    """A fresh registry of the core's settings (the sidecar registers its own on top)."""
    registry = SettingsRegistry()
    time = _positive(parse_time_ms)
    for setting in (
        Setting("cluster.name", parse_node_name, "coordinated", attribute="cluster_name"),
        Setting("node.name", parse_node_name, None, required=True, attribute="node_name", per_node=True),
        Setting("node.roles", parse_roles, "master", per_node=True),
        Setting("discovery.seed_hosts", parse_seed_hosts, "", attribute="seed_hosts", per_node=True),
        Setting("cluster.initial_master_nodes", parse_node_names, "", attribute="initial_master_nodes", per_node=True),
        Setting("discovery.find_peers_interval", time, "1s", attribute="find_peers_interval"),
        Setting(
            "discovery.cluster_formation_warning_timeout", time, "10s", attribute="cluster_formation_warning_timeout"
        ),
        # Bounds as in Elasticsearch's ElectionSchedulerFactory and fault detection settings.
        Setting(
            "cluster.election.initial_timeout", _time_within(1, 10_000), "100ms", attribute="election_initial_timeout"
        ),
        Setting("cluster.election.back_off_time", _time_within(1, 60_000), "100ms", attribute="election_back_off_time"),
        Setting("cluster.election.max_timeout", _time_within(200, 300_000), "10s", attribute="election_max_timeout"),
        Setting("cluster.election.duration", _time_within(1, 300_000), "500ms", attribute="election_duration"),
        Setting(
            "cluster.fault_detection.leader_check.interval", _time_within(100), "1s", attribute="leader_check_interval"
        ),
        Setting("cluster.fault_detection.leader_check.timeout", time, "10s", attribute="leader_check_timeout"),
        Setting(
            "cluster.fault_detection.leader_check.retry_count",
            _int_at_least(1),
            "3",
            attribute="leader_check_retry_count",
        ),
        Setting(
            "cluster.fault_detection.follower_check.interval",
            _time_within(100),
            "1s",
            attribute="follower_check_interval",
        ),
        Setting("cluster.fault_detection.follower_check.timeout", time, "10s", attribute="follower_check_timeout"),
        Setting(
            "cluster.fault_detection.follower_check.retry_count",
            _int_at_least(1),
            "3",
            attribute="follower_check_retry_count",
        ),
        Setting("cluster.publish.timeout", time, "30s", dynamic=True, attribute="publish_timeout"),
        Setting("cluster.follower_lag.timeout", time, "90s", dynamic=True, attribute="follower_lag_timeout"),
        # Elasticsearch's order: the master applies a committed state (and answers the writes in it) only once a
        # quorum of nodes has applied it. `false` drops that round from a write's latency: the master applies as
        # soon as it has committed its own copy, and the followers apply as their commits arrive.
        Setting(
            "cluster.publish.master_applies_last",
            parse_bool,
            "true",
            dynamic=True,
            attribute="master_applies_last",
        ),
        # The recent diffs each node keeps to catch a lagging or rejoining node up without the full state.
        Setting(
            "cluster.publish.diff_history.max_diffs",
            _int_at_least(0),
            "10000",
            dynamic=True,
            attribute="diff_history_max_diffs",
        ),
        Setting(
            "cluster.publish.diff_history.max_size",
            parse_byte_size,
            "64mb",
            dynamic=True,
            attribute="diff_history_max_size",
        ),
        Setting("cluster.no_master_block", parse_no_master_block, "write", dynamic=True, attribute="no_master_block"),
        Setting(
            "cluster.auto_shrink_voting_configuration",
            parse_bool,
            "true",
            dynamic=True,
            attribute="auto_shrink_voting_configuration",
        ),
        Setting(
            "cluster.max_voting_config_exclusions",
            _int_at_least(1),
            "10",
            dynamic=True,
            attribute="max_voting_config_exclusions",
        ),
        # Ceilings on what clients can store, checked by the master against the state each batch builds.
        # Every node holds the whole state in memory and a joining node receives all of it.
        Setting("cluster.metadata.max_value_size", parse_byte_size, "1mb", dynamic=True, attribute="max_value_size"),
        Setting("cluster.metadata.max_state_size", parse_byte_size, "256mb", dynamic=True, attribute="max_state_size"),
    ):
        registry.register(setting)
    registry.cross_checks.append(_max_timeout_covers_initial_timeout)
    return registry


def _default(name: str) -> Any:
    """The parsed registry default of a setting: the registry is the one source of the defaults."""
    setting = _REGISTRY.settings[name]
    assert setting.default is not None
    return setting.parse(setting.default)


_REGISTRY = coordination_registry()


@dataclass(frozen=True)
class CoordinationSettings:
    """The parsed settings the protocol core needs; durations in milliseconds."""

    cluster_name: str = _default("cluster.name")
    node_name: str = "node"  # required in the registry; a placeholder for tests and tools
    master_eligible: bool = True  # node.roles: master
    seed_hosts: tuple[str, ...] = _default("discovery.seed_hosts")
    initial_master_nodes: tuple[str, ...] = _default("cluster.initial_master_nodes")
    find_peers_interval: int = _default("discovery.find_peers_interval")
    cluster_formation_warning_timeout: int = _default("discovery.cluster_formation_warning_timeout")
    election_initial_timeout: int = _default("cluster.election.initial_timeout")
    election_back_off_time: int = _default("cluster.election.back_off_time")
    election_max_timeout: int = _default("cluster.election.max_timeout")
    election_duration: int = _default("cluster.election.duration")
    leader_check_interval: int = _default("cluster.fault_detection.leader_check.interval")
    leader_check_timeout: int = _default("cluster.fault_detection.leader_check.timeout")
    leader_check_retry_count: int = _default("cluster.fault_detection.leader_check.retry_count")
    follower_check_interval: int = _default("cluster.fault_detection.follower_check.interval")
    follower_check_timeout: int = _default("cluster.fault_detection.follower_check.timeout")
    follower_check_retry_count: int = _default("cluster.fault_detection.follower_check.retry_count")
    publish_timeout: int = _default("cluster.publish.timeout")
    follower_lag_timeout: int = _default("cluster.follower_lag.timeout")
    master_applies_last: bool = _default("cluster.publish.master_applies_last")
    diff_history_max_diffs: int = _default("cluster.publish.diff_history.max_diffs")
    diff_history_max_size: int = _default("cluster.publish.diff_history.max_size")
    no_master_block: str = _default("cluster.no_master_block")
    auto_shrink_voting_configuration: bool = _default("cluster.auto_shrink_voting_configuration")
    max_voting_config_exclusions: int = _default("cluster.max_voting_config_exclusions")
    max_value_size: int = _default("cluster.metadata.max_value_size")
    max_state_size: int = _default("cluster.metadata.max_state_size")

    @classmethod
    def from_parsed(cls, parsed: Mapping[str, Any]) -> CoordinationSettings:
        fields = {
            setting.attribute: parsed[name]
            for name, setting in coordination_registry().settings.items()
            if setting.attribute is not None
        }
        return cls(master_eligible="master" in parsed["node.roles"], **fields)

    @classmethod
    def from_strings(cls, raw: Mapping[str, str]) -> CoordinationSettings:
        return cls.from_parsed(coordination_registry().parse(raw))

    def with_dynamic(self, persistent: Mapping[str, str]) -> CoordinationSettings:
        """Overlay the cluster-wide dynamic settings of the applied state on the node's own."""
        if not persistent:
            return self
        overrides: dict[str, Any] = {}
        for name, setting in _REGISTRY.settings.items():
            if setting.dynamic and setting.attribute is not None and name in persistent:
                try:
                    overrides[setting.attribute] = _REGISTRY.parse_one(name, persistent[name])
                except SettingsError:
                    continue  # validated before it was committed; ignore rather than crash
        if not overrides:
            return self
        return replace(self, **overrides)
