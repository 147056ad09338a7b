"""The settings mechanism: declarations beside their components, collected by the registries, parsed within
their bounds, read typed; and which settings may change while the cluster runs."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from types import ModuleType

import pytest

from coordinated.coordination import registry as core_registry
from coordinated.coordination.client_requests import NO_MASTER_BLOCK
from coordinated.coordination.elections import ELECTION_INITIAL_TIMEOUT, ELECTION_MAX_TIMEOUT
from coordinated.coordination.followers_checker import FOLLOWER_CHECK_RETRY_COUNT, FOLLOWER_LAG_TIMEOUT
from coordinated.coordination.formation import INITIAL_MASTER_NODES
from coordinated.coordination.leader_checker import LEADER_CHECK_TIMEOUT
from coordinated.coordination.peer_finder import SEED_HOSTS
from coordinated.coordination.publication import PUBLISH_TIMEOUT
from coordinated.coordination.registry import coordination_registry, default_settings
from coordinated.coordination.settings import (
    CLUSTER_NAME,
    NODE_ROLES,
    EnumChoice,
    Setting,
    SettingsError,
    SettingsRegistry,
    format_time_ms,
    parse_time_ms,
    time_setting,
)
from coordinated.coordination.status import BlockLevel
from coordinated.sidecar import node_settings


def test_defaults_are_elasticsearchs() -> None:
    settings = coordination_registry().parse({"node.name": "n1"})
    assert settings[CLUSTER_NAME] == "coordinated"
    assert settings[ELECTION_INITIAL_TIMEOUT] == 100
    assert settings[ELECTION_MAX_TIMEOUT] == 10_000
    assert settings[LEADER_CHECK_TIMEOUT] == 10_000
    assert settings[FOLLOWER_CHECK_RETRY_COUNT] == 3
    assert settings[PUBLISH_TIMEOUT] == 30_000
    assert settings[FOLLOWER_LAG_TIMEOUT] == 90_000
    assert settings[NO_MASTER_BLOCK] == "write"
    assert settings[NODE_ROLES] == ("master",)


def test_values_are_parsed_with_units_and_lists() -> None:
    settings = coordination_registry().parse(
        {
            "node.name": "n1",
            "node.roles": "[]",
            "discovery.seed_hosts": "a:9300, b.svc:9300",
            "cluster.initial_master_nodes": "n1,n2,n3",
            "cluster.publish.timeout": "2m",
        }
    )
    assert settings[NODE_ROLES] == ()
    assert settings[SEED_HOSTS] == ("a:9300", "b.svc:9300")
    assert settings[INITIAL_MASTER_NODES] == ("n1", "n2", "n3")
    assert settings[PUBLISH_TIMEOUT] == 120_000
    assert parse_time_ms("500ms") == 500
    assert format_time_ms(90_000) == "90s"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"node.name": "n1", "cluster.publish.timeout": "soon"}, r"\[cluster.publish.timeout\].*time value"),
        ({"node.name": "n1", "cluster.no_master_block": "none"}, r"\[cluster.no_master_block\]"),
        ({"node.name": "n1", "discovery.seed_hosts": "hostwithoutport"}, "host:port"),
        ({"node.name": "n1", "node.roles": "data"}, "unknown node roles"),
        ({"node.name": "n1", "cluster.fault_detection.leader_check.retry_count": "0"}, "at least 1"),
        ({"node.name": "n1", "no.such.setting": "1"}, r"unknown setting \[no.such.setting\]"),
        ({}, r"\[node.name\] is required"),
        ({"node.name": "n1", "discovery.zen.minimum_master_nodes": "2"}, "Zen1.*voting configuration"),
        ({"node.name": "n1", "discovery.zen.ping.unicast.hosts": "a:9300"}, "discovery.seed_hosts"),
        ({"node.name": "n1", "cluster.election.initial_timeout": "20s"}, r"initial_timeout\].*at most \[10s\]"),
        ({"node.name": "n1", "cluster.election.max_timeout": "100ms"}, r"max_timeout\].*at least \[200ms\]"),
        ({"node.name": "n1", "cluster.fault_detection.follower_check.interval": "10ms"}, r"at least \[100ms\]"),
        (
            {"node.name": "n1", "cluster.election.initial_timeout": "5s", "cluster.election.max_timeout": "1s"},
            r"\[cluster.election.max_timeout\] is \[1s\], but must be at least \[cluster.election.initial_timeout\]",
        ),
        # Upper bounds, and numbers that no timer or wire field could hold.
        ({"node.name": "n1", "cluster.publish.timeout": "99999999999999999999d"}, r"publish.timeout\].*out of range"),
        ({"node.name": "n1", "cluster.publish.timeout": "11m"}, r"publish.timeout\].*at most \[10m\]"),
        ({"node.name": "n1", "cluster.publish.timeout": "999ms"}, r"publish.timeout\].*at least \[1s\]"),
        ({"node.name": "n1", "cluster.follower_lag.timeout": "2h"}, r"lag.timeout\].*at most \[1h\]"),
        ({"node.name": "n1", "cluster.metadata.max_state_size": "1gb"}, r"max_state_size\].*\[1kb\] and \[256mb\]"),
        ({"node.name": "n1", "cluster.max_voting_config_exclusions": "1" + "0" * 30}, "out of range"),
        ({"node.name": "n1", "cluster.max_voting_config_exclusions": "١٢"}, "expected an integer"),
    ],
)
def test_bad_settings_are_rejected_with_a_message_naming_them(raw: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        coordination_registry().parse(raw)


def test_only_dynamic_settings_can_change_at_runtime_and_null_removes_any() -> None:
    registry = coordination_registry()
    assert registry.validate_dynamic({"cluster.no_master_block": "all", "cluster.publish.timeout": None}) == {
        "cluster.no_master_block": "all",
        "cluster.publish.timeout": None,
    }
    assert registry.validate_dynamic({"left.by.an.older.version": None}) == {"left.by.an.older.version": None}
    with pytest.raises(SettingsError, match="not dynamically updateable"):
        registry.validate_dynamic({"cluster.election.duration": "1s"})
    # The two that could take a cluster down for good are node settings, as in Elasticsearch.
    for name in ("cluster.publish.timeout", "cluster.follower_lag.timeout"):
        with pytest.raises(SettingsError, match=rf"\[{name}\] is not dynamically updateable: it is a node setting"):
            registry.validate_dynamic({name: "30s"})


def test_dynamic_settings_overlay_the_nodes_own_and_a_persisted_node_setting_is_ignored() -> None:
    settings = coordination_registry().parse({"node.name": "n1", "cluster.publish.timeout": "20s"})
    overlaid = settings.with_dynamic(
        {
            "cluster.no_master_block": "all",
            # What an older version let `PUT /_cluster/settings` persist: ignored, so the node's own value holds.
            "cluster.publish.timeout": "1ms",
            "cluster.metadata.max_state_size": "99999999999999999999d",
            "unknown.setting": "x",
        }
    )
    assert overlaid[NO_MASTER_BLOCK] == "all"
    assert overlaid[PUBLISH_TIMEOUT] == 20_000
    assert overlaid[core_registry.batch.MAX_STATE_SIZE] == 256 * 1024 * 1024
    assert settings.with_dynamic({}) is settings


def test_restored_settings_keep_a_node_setting_but_check_the_dynamic_ones() -> None:
    registry = coordination_registry()
    registry.validate_persisted({"cluster.publish.timeout": "1ms", "cluster.no_master_block": "all"})
    with pytest.raises(SettingsError, match=r"\[cluster.no_master_block\]"):
        registry.validate_persisted({"cluster.no_master_block": "never"})
    with pytest.raises(SettingsError, match=r"unknown setting \[no.such\]"):
        registry.validate_persisted({"no.such": "1"})


def test_settings_are_read_typed_and_replaced_only_when_registered() -> None:
    settings = default_settings("n1")
    assert settings.with_values({PUBLISH_TIMEOUT: 5000})[PUBLISH_TIMEOUT] == 5000
    stray = time_setting("nowhere.declared", "1s", minimum="1ms", maximum="1m", doc="not registered")
    with pytest.raises(KeyError, match=r"\[nowhere.declared\] is not registered"):
        settings[stray]
    with pytest.raises(KeyError, match="not registered"):
        settings.with_values({stray: 1})


def test_a_setting_declared_twice_is_refused() -> None:
    registry = SettingsRegistry()
    registry.register(PUBLISH_TIMEOUT)
    registry.register(PUBLISH_TIMEOUT)  # the same declaration, collected twice, is one setting
    with pytest.raises(ValueError, match=r"\[cluster.publish.timeout\] is declared twice"):
        registry.register(time_setting("cluster.publish.timeout", "1s", minimum="1s", maximum="1m", doc="again"))


def _modules_of(package: str) -> list[ModuleType]:
    root = importlib.import_module(package)
    found = pkgutil.walk_packages(root.__path__, prefix=f"{package}.")  # subpackages too (the sidecar's are)
    return [importlib.import_module(info.name) for info in found]


@pytest.mark.parametrize(
    ("package", "registry"),
    [("coordinated.coordination", coordination_registry), ("coordinated.sidecar", node_settings.sidecar_registry)],
)
def test_every_declared_setting_is_collected(package: str, registry: Callable[[], SettingsRegistry]) -> None:
    """A setting declared in a module that the registry does not list would be unknown to every node."""
    collected = {id(setting) for setting in registry().settings.values()}
    missing = [
        f"{module.__name__}.{name}"
        for module in _modules_of(package)
        for name, value in vars(module).items()
        if isinstance(value, Setting) and id(value) not in collected
    ]
    assert missing == [], "add their modules to the registry's MODULES"


def test_an_affix_setting_covers_one_user_chosen_segment() -> None:
    registry = coordination_registry()
    read_timeout = time_setting("s3.client.*.read_timeout", "50s", minimum="1s", maximum="1h", doc="affix")
    registry.register(read_timeout)
    settings = registry.parse({"node.name": "n1", "s3.client.backups.read_timeout": "5s"})
    assert settings.for_namespace(read_timeout, "backups") == 5000
    assert settings.for_namespace(read_timeout, "other") == 50_000, "a namespace without a value has the default"
    assert settings.namespaces(read_timeout) == {"backups"}
    for wrong in ("s3.client.read_timeout", "s3.client.a.b.read_timeout", "s3.client.a.read_timeouts"):
        with pytest.raises(SettingsError, match=rf"unknown setting \[{wrong}\]"):
            registry.parse_one(wrong, "5s")
    with pytest.raises(SettingsError, match=r"\[s3.client.backups.read_timeout\]: expected a time"):
        registry.parse_one("s3.client.backups.read_timeout", "soon")


def test_a_setting_of_a_few_choices_is_read_as_its_enum_member() -> None:
    settings = coordination_registry().parse({"node.name": "n1", "cluster.no_master_block": "all"})
    assert settings[NO_MASTER_BLOCK] is BlockLevel.ALL
    assert coordination_registry().parse({"node.name": "n1"})[NO_MASTER_BLOCK] is BlockLevel.WRITE
    assert settings.with_dynamic({"cluster.no_master_block": "metadata_write"})[NO_MASTER_BLOCK] is (
        BlockLevel.METADATA_WRITE
    )
    assert settings.with_values({NO_MASTER_BLOCK: "write"})[NO_MASTER_BLOCK] is BlockLevel.WRITE  # given as text
    with pytest.raises(ValueError, match="none"):
        settings.with_values({NO_MASTER_BLOCK: "none"})
    with pytest.raises(SettingsError, match=r"expected one of \['all', 'write', 'metadata_write'\], got \[none\]"):
        coordination_registry().parse_one("cluster.no_master_block", "none")


def test_every_setting_of_a_fixed_choice_of_words_is_an_enum() -> None:
    """Its readers compare members, so that a misspelt value in the code is a type error, not a silent False."""
    for setting in node_settings.sidecar_registry().settings.values():
        syntax = setting.value_type.syntax()
        if syntax is not None and syntax.choices and syntax.choices != ("true", "false"):
            assert isinstance(setting.value_type, EnumChoice), setting.name
            assert setting.default is None or setting.default_value in setting.value_type.enum, setting.name
