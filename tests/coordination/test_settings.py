from __future__ import annotations

import pytest

from coordinated.coordination.settings import (
    CoordinationSettings,
    Setting,
    SettingsError,
    coordination_registry,
    format_time_ms,
    parse_time_ms,
)


def test_defaults_are_elasticsearchs() -> None:
    settings = CoordinationSettings.from_strings({"node.name": "n1"})
    assert settings.cluster_name == "coordinated"
    assert settings.election_initial_timeout == 100
    assert settings.election_max_timeout == 10_000
    assert settings.leader_check_timeout == 10_000
    assert settings.follower_check_retry_count == 3
    assert settings.publish_timeout == 30_000
    assert settings.follower_lag_timeout == 90_000
    assert settings.no_master_block == "write"
    assert settings.master_eligible


def test_values_are_parsed_with_units_and_lists() -> None:
    settings = CoordinationSettings.from_strings(
        {
            "node.name": "n1",
            "node.roles": "[]",
            "discovery.seed_hosts": "a:9300, b.svc:9300",
            "cluster.initial_master_nodes": "n1,n2,n3",
            "cluster.publish.timeout": "2m",
        }
    )
    assert not settings.master_eligible
    assert settings.seed_hosts == ("a:9300", "b.svc:9300")
    assert settings.initial_master_nodes == ("n1", "n2", "n3")
    assert settings.publish_timeout == 120_000
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
    ],
)
def test_bad_settings_are_rejected_with_a_message_naming_them(raw: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        coordination_registry().parse(raw)


def test_only_dynamic_settings_can_change_at_runtime() -> None:
    registry = coordination_registry()
    assert registry.validate_dynamic({"cluster.no_master_block": "all", "cluster.publish.timeout": None}) == {
        "cluster.no_master_block": "all",
        "cluster.publish.timeout": None,
    }
    with pytest.raises(SettingsError, match="not dynamically updateable"):
        registry.validate_dynamic({"cluster.election.duration": "1s"})


def test_dynamic_settings_overlay_the_nodes_own() -> None:
    settings = CoordinationSettings.from_strings({"node.name": "n1"})
    overlaid = settings.with_dynamic({"cluster.no_master_block": "all", "cluster.publish.timeout": "5s"})
    assert overlaid.no_master_block == "all"
    assert overlaid.publish_timeout == 5000


def test_an_affix_setting_covers_one_user_chosen_segment() -> None:
    registry = coordination_registry()
    registry.register(Setting("s3.client.*.read_timeout", parse_time_ms, "50s"))
    parsed = registry.parse({"node.name": "n1", "s3.client.backups.read_timeout": "5s"})
    assert parsed["s3.client.backups.read_timeout"] == 5000
    assert "s3.client.*.read_timeout" not in parsed, "an affix setting's default belongs to no name"
    for wrong in ("s3.client.read_timeout", "s3.client.a.b.read_timeout", "s3.client.a.read_timeouts"):
        with pytest.raises(SettingsError, match=rf"unknown setting \[{wrong}\]"):
            registry.parse_one(wrong, "5s")
    with pytest.raises(SettingsError, match=r"\[s3.client.backups.read_timeout\]"):
        registry.parse_one("s3.client.backups.read_timeout", "soon")
