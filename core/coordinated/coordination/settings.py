"""Settings with Elasticsearch's names, defaults and units, each declared beside the component that reads it.

Settings arrive as strings (`-E key=value`, the pod's config, `PUT /_cluster/settings`). Each is parsed and
checked against its bounds; an unknown, invalid or retired (Zen1) setting raises `SettingsError`, naming it.

How to add a setting
--------------------
Declare it as a module-level constant in the module of the component that reads it, as Elasticsearch declares
`LagDetector.CLUSTER_FOLLOWER_LAG_TIMEOUT_SETTING` (in the sans-IO core), or, outside the core, in the light
`*_settings` module beside that component (`peers/transport_settings.py` for `peers/transport.py`), which imports
nothing of its I/O, so that other deployables (the operator) read settings without importing the sidecar:

    FOLLOWER_LAG_TIMEOUT = time_setting(
        "cluster.follower_lag.timeout", "90s", minimum="1s", maximum="1h",
        doc="a follower that has not applied a committed state after this long is removed",
    )

and read it, typed, from the node's settings: `ctx.settings[FOLLOWER_LAG_TIMEOUT]` is an int of milliseconds.
A setting that takes one of a few words is an `enum_setting` of a `StrEnum`, read as its member
(`settings[NO_MASTER_BLOCK] is BlockLevel.ALL`).
The registries collect every `Setting` and `SettingsRule` of the modules they list: `coordination.registry`
for the core, `coordinated.sidecar.node_settings` for the sidecar. A module that declares its first setting is added
to that list once; a test fails while a module with settings is missing from it. Then run
`python -m coordinated.operator.generate`: it writes docs/settings.md (the `doc` line and the bounds) and the
CRD's allow-list and value rules; `make lint` fails while either is out of date. A setting a user may put in
`spec.settings` needs nothing more; one the operator sets itself is listed in the operator's
`OPERATOR_MANAGED_SETTINGS` with the reason.

A name with a `*` declares an affix setting, as Elasticsearch's `s3.client.*.endpoint`: the `*` is one name
segment the user chooses (a namespace: `s3.client.backups.endpoint`), and `settings.for_namespace(SETTING, "backups")`
reads it (its default when the namespace has no value); `settings.namespaces(SETTING)` lists the namespaces given.

`dynamic=True` lets `PUT /_cluster/settings` change the setting for the whole cluster: the committed value
then overrides every node's own (`-E`) until it is reset. Only do that when every value within the bounds
still lets the cluster commit the write that resets it (tests/sidecar/test_sidecar_dynamic_settings.py and the
simulator's random schedules with setting changes prove it for each dynamic setting); timing settings that a
publication or a fault detector depends on stay node-level, as in Elasticsearch.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from types import ModuleType
from typing import Any, Generic, TypeVar, cast

from coordinated.coordination.retired_settings import retired_setting_message

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
E = TypeVar("E", bound=StrEnum)

_TIME_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_TIME_VALUE = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)\s*$")
_SIZE = re.compile(r"^\s*(\d+)\s*(b|kb|mb|gb)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"b": 1, "kb": 1024, "mb": 1024**2, "gb": 1024**3}
_NODE_NAME_PATTERN = "^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
_NODE_NAME = re.compile(_NODE_NAME_PATTERN)
_INTEGER = re.compile(r"[+-]?[0-9]+")
# Numbers that no setting, timer or wire field can hold are refused before they are converted.
_MAX_DIGITS = 18


class SettingsError(ValueError):
    """A setting is unknown, malformed, out of range, or retired."""


def _digits(text: str, value: str) -> int:
    if len(text) > _MAX_DIGITS:
        raise ValueError(f"[{value}] is out of range")
    return int(text)


def parse_time_ms(value: str) -> int:
    match = _TIME_VALUE.match(value)
    if not match:
        raise ValueError(f"expected a time value such as 500ms, 1s or 2m, got [{value}]")
    return _digits(match.group(1), value) * _TIME_UNITS_MS[match.group(2)]


def format_time_ms(ms: int) -> str:
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms % size == 0 and ms >= size:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def parse_byte_size(value: str) -> int:
    match = _SIZE.match(value)
    if not match:
        raise ValueError(f"expected a byte size such as 512kb or 1mb, got [{value}]")
    size = _digits(match.group(1), value) * _SIZE_UNITS[(match.group(2) or "b").lower()]
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


def parse_node_name(value: str) -> str:
    if not _NODE_NAME.match(value):
        raise ValueError(
            f"[{value}] is not a valid node name: use 1-63 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return value


# -- value types: how a setting's string becomes its value, and what the API server can check of it ------------


@dataclass(frozen=True)
class Syntax:
    """What the Kubernetes API server can check of a value before any node sees it: a regular expression (RE2)
    or a list of choices, and what to tell the user. Ranges and rules between settings are the operator's."""

    expected: str
    pattern: str | None = None
    choices: tuple[str, ...] = ()


class ValueType(ABC, Generic[T_co]):
    @abstractmethod
    def parse(self, text: str) -> T_co:
        """The value, or ValueError saying what is wrong (the registry adds the setting's name)."""

    def bounds(self) -> str:
        """The range, as docs/settings.md shows it; empty when the type has none."""
        return ""

    def extremes(self) -> tuple[str, ...]:
        """The values at the ends of the range, as users write them (every choice of a choice): what the tests of
        dynamic settings set, to show that no value within the bounds can take the cluster down."""
        return ()

    def syntax(self) -> Syntax | None:
        return None


def _at_most_digits(maximum: int) -> str:
    return f"{{0,{len(str(maximum)) - 1}}}"


@dataclass(frozen=True)
class TimeValue(ValueType[int]):
    """A time with a unit, in milliseconds, within [minimum_ms, maximum_ms]."""

    minimum_ms: int
    maximum_ms: int

    def parse(self, text: str) -> int:
        parsed = parse_time_ms(text)
        if parsed < self.minimum_ms:
            raise ValueError(f"must be at least [{format_time_ms(self.minimum_ms)}], got [{text}]")
        if parsed > self.maximum_ms:
            raise ValueError(f"must be at most [{format_time_ms(self.maximum_ms)}], got [{text}]")
        return parsed

    def bounds(self) -> str:
        return f"{format_time_ms(self.minimum_ms)} to {format_time_ms(self.maximum_ms)}"

    def extremes(self) -> tuple[str, ...]:
        return (format_time_ms(self.minimum_ms), format_time_ms(self.maximum_ms))

    def syntax(self) -> Syntax:
        # At most as many digits as the maximum has in milliseconds, so that no unit can exceed it by far.
        first = "[1-9]" if self.minimum_ms >= 1 else "[0-9]"
        return Syntax(
            "expected a positive time with a unit, such as 500ms, 1s or 2m",
            f"^0*{first}[0-9]{_at_most_digits(self.maximum_ms)}(ms|s|m|h|d)$",
        )


@dataclass(frozen=True)
class ByteSize(ValueType[int]):
    """A size in bytes, with an optional unit (b, kb, mb, gb), within [minimum, maximum]."""

    minimum: int
    maximum: int

    def parse(self, text: str) -> int:
        parsed = parse_byte_size(text)
        if not self.minimum <= parsed <= self.maximum:
            raise ValueError(f"must be between [{self.bounds_text()}], got [{text}]")
        return parsed

    def bounds_text(self) -> str:
        return f"{format_byte_size(self.minimum)}] and [{format_byte_size(self.maximum)}"

    def bounds(self) -> str:
        return f"{format_byte_size(self.minimum)} to {format_byte_size(self.maximum)}"

    def extremes(self) -> tuple[str, ...]:
        return (format_byte_size(self.minimum), format_byte_size(self.maximum))

    def syntax(self) -> Syntax:
        return Syntax(
            "expected a positive byte size such as 512kb or 1mb",
            f"^0*[1-9][0-9]{_at_most_digits(self.maximum)}([bB]|[kKmMgG][bB])?$",
        )


@dataclass(frozen=True)
class Integer(ValueType[int]):
    minimum: int
    maximum: int

    def parse(self, text: str) -> int:
        stripped = text.strip()
        if _INTEGER.fullmatch(stripped) is None:
            raise ValueError(f"expected an integer, got [{text}]")
        parsed = _digits(stripped.lstrip("+-"), text) * (-1 if stripped.startswith("-") else 1)
        if parsed < self.minimum:
            raise ValueError(f"must be at least {self.minimum}, got [{text}]")
        if parsed > self.maximum:
            raise ValueError(f"must be at most {self.maximum}, got [{text}]")
        return parsed

    def bounds(self) -> str:
        return f"{self.minimum} to {self.maximum}"

    def extremes(self) -> tuple[str, ...]:
        return (str(self.minimum), str(self.maximum))

    def syntax(self) -> Syntax:
        first = "[1-9]" if self.minimum >= 1 else "[0-9]"
        return Syntax(
            f"expected an integer of at least {self.minimum}",
            f"^0*{first}[0-9]{_at_most_digits(self.maximum)}$",
        )


@dataclass(frozen=True)
class Boolean(ValueType[bool]):
    def parse(self, text: str) -> bool:
        return parse_bool(text)

    def extremes(self) -> tuple[str, ...]:
        return ("false", "true")

    def syntax(self) -> Syntax:
        return Syntax('expected "true" or "false"', choices=("true", "false"))


@dataclass(frozen=True)
class EnumChoice(ValueType[E]):
    """One of a `StrEnum`'s values, in its order, read as the member: its readers compare members, not strings."""

    enum: type[E]

    @property
    def choices(self) -> tuple[str, ...]:
        return tuple(member.value for member in self.enum)

    def parse(self, text: str) -> E:
        if text not in self.choices:
            raise ValueError(f"expected one of {list(self.choices)}, got [{text}]")
        return self.enum(text)

    def extremes(self) -> tuple[str, ...]:
        return self.choices

    def syntax(self) -> Syntax:
        listed = ", ".join(self.choices[:-1]) + f" or {self.choices[-1]}"
        return Syntax(f"expected {listed}", choices=self.choices)


@dataclass(frozen=True)
class NodeName(ValueType[str]):
    def parse(self, text: str) -> str:
        return parse_node_name(text)

    def syntax(self) -> Syntax:
        return Syntax('use 1-63 letters, digits, ".", "_" or "-", starting with a letter or digit', _NODE_NAME_PATTERN)


@dataclass(frozen=True)
class NodeNames(ValueType[tuple[str, ...]]):
    def parse(self, text: str) -> tuple[str, ...]:
        return tuple(parse_node_name(name) for name in parse_list(text))


@dataclass(frozen=True)
class Parsed(ValueType[T_co]):
    """A value type made of a parse function, for values without bounds or an API-server check (files, lists)."""

    function: Callable[[str], T_co]

    def parse(self, text: str) -> T_co:
        return self.function(text)


# -- settings ------------------------------------------------------------------------------------------------

# In a declared name, `*` stands for one name segment chosen by the user (a namespace), as in Elasticsearch's affix
# settings: `s3.client.*.endpoint` covers `s3.client.backups.endpoint`. Read one with `Settings.for_namespace`.
AFFIX = "*"


@dataclass(frozen=True, eq=False)
class Setting(Generic[T_co]):
    """One setting: its name, how its value is parsed, its default (a string, as users give it; None: absent
    unless given) and its one-line meaning for docs/settings.md."""

    name: str
    value_type: ValueType[T_co]
    default: str | None
    doc: str
    dynamic: bool = False
    required: bool = False

    def parse(self, text: str, name: str | None = None) -> T_co:
        """The value; `name` is the concrete name an affix setting was given under, for the error."""
        try:
            return self.value_type.parse(text)
        except ValueError as error:
            raise SettingsError(f"invalid value for setting [{name or self.name}]: {error}") from None

    @cached_property
    def default_value(self) -> T_co | None:
        return None if self.default is None else self.parse(self.default)

    @property
    def is_affix(self) -> bool:
        return AFFIX in self.name

    @cached_property
    def affix_pattern(self) -> re.Pattern[str]:
        """The concrete names of an affix setting, the namespace captured."""
        return re.compile(r"([^.]+)".join(re.escape(part) for part in self.name.split(AFFIX)))

    def concrete(self, namespace: str) -> str:
        """An affix setting's name for one namespace."""
        return self.name.replace(AFFIX, namespace)

    def required_default(self) -> T_co:
        """The parsed default, for a tool that runs without the node's settings; the setting must have one."""
        if self.default is None:
            raise ValueError(f"setting [{self.name}] has no default")
        return self.parse(self.default)


def time_setting(
    name: str, default: str, *, minimum: str, maximum: str, doc: str, dynamic: bool = False
) -> Setting[int]:
    """A time in milliseconds; the bounds are written as users write times (`100ms`, `5m`)."""
    return Setting(name, TimeValue(parse_time_ms(minimum), parse_time_ms(maximum)), default, doc, dynamic)


def size_setting(
    name: str, default: str, *, minimum: str, maximum: str, doc: str, dynamic: bool = False
) -> Setting[int]:
    return Setting(name, ByteSize(parse_byte_size(minimum), parse_byte_size(maximum)), default, doc, dynamic)


def int_setting(
    name: str, default: int, *, minimum: int, maximum: int, doc: str, dynamic: bool = False
) -> Setting[int]:
    return Setting(name, Integer(minimum, maximum), str(default), doc, dynamic)


def bool_setting(name: str, default: bool, *, doc: str, dynamic: bool = False) -> Setting[bool]:
    return Setting(name, Boolean(), "true" if default else "false", doc, dynamic)


def enum_setting(name: str, default: E, *, doc: str, dynamic: bool = False) -> Setting[E]:
    """A setting whose values are those of `default`'s enum."""
    return Setting(name, EnumChoice(type(default)), default.value, doc, dynamic)


@dataclass(frozen=True)
class SettingsRule:
    """A rule between settings, run on the parsed settings at startup: `check` returns the problem or None.
    `doc` states the rule for docs/settings.md."""

    doc: str
    check: Callable[[Settings], str | None]


class Settings:
    """A node's parsed settings. Read one, typed, by its declaration: `settings[PUBLISH_TIMEOUT]` is an int.
    Immutable: `with_values` and `with_dynamic` return new objects."""

    __slots__ = ("_values", "registry")

    def __init__(self, registry: SettingsRegistry, values: Mapping[str, Any]) -> None:
        self.registry = registry
        self._values = dict(values)

    def __getitem__(self, setting: Setting[T]) -> T:
        try:
            value: T = self._values[setting.name]
        except KeyError:
            if setting.name not in self.registry.settings:
                raise KeyError(f"setting [{setting.name}] is not registered") from None
            raise SettingsError(f"setting [{setting.name}] is required") from None
        return value

    def for_namespace(self, setting: Setting[T], namespace: str) -> T:
        """An affix setting's value for one namespace (`s3.client.*.endpoint` for `backups`), or its default."""
        if setting.name not in self.registry.settings:
            raise KeyError(f"setting [{setting.name}] is not registered")
        name = setting.concrete(namespace)
        # A setting without a default is declared as Setting[X | None], so None is one of its values.
        return self._values[name] if name in self._values else cast(T, setting.default_value)

    def namespaces(self, *settings: Setting[Any]) -> set[str]:
        """The namespaces that some given value of these affix settings names."""
        found: set[str] = set()
        for setting in settings:
            found.update(match.group(1) for name in self._values if (match := setting.affix_pattern.fullmatch(name)))
        return found

    def with_values(self, values: Mapping[Setting[Any], object]) -> Settings:
        """These settings with some values replaced (already parsed: for tests, tools and the simulator)."""
        unknown = [setting.name for setting in values if setting.name not in self.registry.settings]
        if unknown:
            raise KeyError(f"settings {unknown} are not registered")
        held = {setting.name: _held(setting.value_type, value) for setting, value in values.items()}
        return Settings(self.registry, {**self._values, **held})

    def with_dynamic(self, persistent: Mapping[str, str]) -> Settings:
        """The cluster-wide dynamic settings of the applied state over the node's own. A persisted value that is
        not a valid dynamic one (a setting that is node-level now, or one an older version accepted beyond
        today's bounds) is ignored: it was checked before it was committed, and crashing on it would wedge."""
        overrides: dict[str, Any] = {}
        for name, text in persistent.items():
            setting = self.registry.find(name)
            if setting is not None and setting.dynamic:
                try:
                    overrides[name] = setting.parse(text)
                except SettingsError:
                    continue
        return Settings(self.registry, {**self._values, **overrides}) if overrides else self


@dataclass
class SettingsRegistry:
    """The known settings, by name, and the rules between them."""

    settings: dict[str, Setting[Any]] = field(default_factory=dict)
    rules: list[SettingsRule] = field(default_factory=list)

    @classmethod
    def collect(cls, modules: Iterable[ModuleType]) -> SettingsRegistry:
        """Every `Setting` and `SettingsRule` that the modules declare at module level, in their order."""
        registry = cls()
        for module in modules:
            for value in vars(module).values():
                if isinstance(value, Setting):
                    registry.register(value)
                elif isinstance(value, SettingsRule):
                    registry.rules.append(value)
        return registry

    def register(self, setting: Setting[Any]) -> None:
        known = self.settings.get(setting.name)
        if known is not None and known is not setting:
            raise ValueError(f"setting [{setting.name}] is declared twice")
        self.settings[setting.name] = setting

    def find(self, name: str) -> Setting[Any] | None:
        """The setting `name` is, directly or as a concrete name of an affix setting."""
        setting = self.settings.get(name)
        if setting is None:
            setting = next(
                (found for found in self.settings.values() if found.is_affix and found.affix_pattern.fullmatch(name)),
                None,
            )
        return setting

    def merged(self, other: SettingsRegistry) -> SettingsRegistry:
        merged = SettingsRegistry(dict(self.settings), list(self.rules))
        for setting in other.settings.values():
            merged.register(setting)
        merged.rules.extend(rule for rule in other.rules if rule not in merged.rules)
        return merged

    def parse(self, raw: Mapping[str, str]) -> Settings:
        """Validate every raw setting, fill in defaults and check the rules. Raises SettingsError naming the
        setting."""
        values: dict[str, Any] = {name: self.parse_one(name, value) for name, value in raw.items()}
        for name, setting in self.settings.items():
            if name in values or setting.is_affix:  # an affix setting's default is read by `for_namespace`
                continue
            if setting.required:
                raise SettingsError(f"setting [{name}] is required")
            values[name] = setting.default_value
        settings = Settings(self, values)
        for rule in self.rules:
            problem = rule.check(settings)
            if problem is not None:
                raise SettingsError(problem)
        return settings

    def defaults(self, values: Mapping[Setting[Any], object] | None = None) -> Settings:
        """Every setting at its default, with `values` (parsed) for the required ones: for tests and tools."""
        parsed = {name: setting.default_value for name, setting in self.settings.items() if not setting.is_affix}
        return Settings(self, parsed).with_values(values or {})

    def parse_one(self, name: str, value: str) -> Any:
        retired = retired_setting_message(name)
        if retired:
            raise SettingsError(retired)
        setting = self.find(name)
        if setting is None:
            raise SettingsError(f"unknown setting [{name}]")
        if not isinstance(value, str):
            raise SettingsError(f"setting [{name}] must be given as a string, got {type(value).__name__}")
        return setting.parse(value, name)

    def validate_dynamic(self, updates: Mapping[str, str | None]) -> dict[str, Any]:
        """Check a `PUT /_cluster/settings` body. None removes a persisted setting, whatever it is, so that one
        left by an older version (a setting that is node-level now, or unknown) can always be cleared."""
        checked: dict[str, Any] = {}
        for name, value in updates.items():
            if value is None:
                checked[name] = None
                continue
            setting = self.find(name)
            if setting is not None and not setting.dynamic:
                raise SettingsError(
                    f"setting [{name}] is not dynamically updateable: it is a node setting, given to each node "
                    "with -E (docs/settings.md)"
                )
            checked[name] = self.parse_one(name, value)
        return checked

    def validate_persisted(self, persistent: Mapping[str, str]) -> None:
        """Settings restored into the cluster state (a snapshot's): each known, and each dynamic one valid. A
        node-level one is kept but ignored, as after an upgrade that made it node-level."""
        for name, value in persistent.items():
            setting = self.find(name)
            if setting is None or setting.dynamic:
                self.parse_one(name, value)


def _held(value_type: ValueType[Any], value: object) -> object:
    """An enum setting's value given as text is held as its member (ValueError if it is none)."""
    return value_type.enum(value) if isinstance(value_type, EnumChoice) and isinstance(value, str) else value


# -- the node's identity: read by every layer ------------------------------------------------------------------


def _parse_roles(value: str) -> tuple[str, ...]:
    roles = parse_list(value)
    unknown = [role for role in roles if role != "master"]
    if unknown:
        raise ValueError(f"unknown node roles {unknown}; the only role is [master], or [] for none")
    return roles


CLUSTER_NAME = Setting(
    "cluster.name",
    NodeName(),
    "coordinated",
    "the cluster's name; nodes with different names never join each other (1-63 letters, digits, `.`, `_`, `-`)",
)
NODE_NAME = Setting("node.name", NodeName(), None, "this node's name, unique in the cluster", required=True)
NODE_ROLES = Setting(
    "node.roles",
    Parsed(_parse_roles),
    "master",
    "`master` for a master-eligible node, `[]` for a node that never votes or leads",
)
