"""spec.settings validation (docs/settings.md), and its agreement with the sidecar's own registry."""

from __future__ import annotations

import re

import pytest
from operator_schemas import REPO

from coordinated.operator.settings_validation import (
    OPERATOR_MANAGED_SETTINGS,
    SECURITY_SETTINGS,
    USER_SETTINGS,
    validate_settings,
)


def test_valid_settings() -> None:
    assert validate_settings(None) == []
    assert (
        validate_settings(
            {
                "cluster.name": "orders",
                "cluster.publish.timeout": "30s",
                "cluster.election.initial_timeout": "100ms",
                "cluster.fault_detection.leader_check.retry_count": "3",
                "cluster.no_master_block": "metadata_write",
                "cluster.auto_shrink_voting_configuration": "false",
            }
        )
        == []
    )


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"discovery.zen.minimum_master_nodes": "2"}, "Zen1"),
        ({"node.name": "x"}, "managed by the operator"),
        ({"cluster.initial_master_nodes": "a,b"}, "managed by the operator"),
        ({"bogus.setting": "1"}, "unknown setting [bogus.setting]"),
        ({"cluster.publish.timeout": "30"}, "[cluster.publish.timeout]"),
        ({"cluster.publish.timeout": "0s"}, "positive"),
        ({"cluster.no_master_block": "reads"}, "[cluster.no_master_block]"),
        ({"cluster.auto_shrink_voting_configuration": "yes"}, "[true] or [false]"),
        ({"cluster.max_voting_config_exclusions": "0"}, "at least 1"),
        ({"cluster.name": "-bad"}, "[cluster.name]"),
        ({"cluster.fault_detection.leader_check.retry_count": 3}, "must be a string"),
    ],
)
def test_invalid_settings_name_the_setting(settings: dict[str, object], expected: str) -> None:
    problems = validate_settings(settings)
    assert len(problems) == 1 and expected in problems[0], problems


def test_agrees_with_the_sidecar_registry() -> None:
    sidecar_settings = pytest.importorskip("coordinated.coordination.settings")
    known = set(sidecar_settings.coordination_registry().settings)
    ours = set(USER_SETTINGS) | set(OPERATOR_MANAGED_SETTINGS)
    # transport.secret_file, path.repo, the archive's and the TLS and token settings are the sidecar service's,
    # registered outside the protocol core; the operator sets them all itself.
    archive = {name for name in OPERATOR_MANAGED_SETTINGS if name.startswith("history.archive.")}
    assert ours - known <= {"transport.secret_file", "path.repo", *SECURITY_SETTINGS, *archive}
    assert set(OPERATOR_MANAGED_SETTINGS) >= SECURITY_SETTINGS
    assert known - ours == set(), f"settings the operator does not know: {sorted(known - ours)}"


def test_ranges_and_rules_between_settings_are_the_sidecars() -> None:
    # The CRD's CEL cannot see these; a sidecar would refuse to start with them, so the operator refuses first.
    assert validate_settings({"cluster.election.initial_timeout": "20s"}) == [
        "invalid value for setting [cluster.election.initial_timeout]: must be at most [10s], got [20s]"
    ]
    problems = validate_settings({"cluster.election.initial_timeout": "5s", "cluster.election.max_timeout": "1s"})
    assert problems == [
        "setting [cluster.election.max_timeout] is [1s], but must be at least "
        "[cluster.election.initial_timeout] which is [5s]"
    ]
    assert validate_settings({"cluster.election.initial_timeout": "1s", "cluster.election.max_timeout": "30s"}) == []


def test_the_crd_admits_every_user_setting_and_checks_its_value() -> None:
    """The CRD's CEL repeats the registry by hand: a setting added to the sidecar must be added there too, or
    the API server refuses a setting that docs/settings.md says goes in spec.settings."""
    crd = (REPO / "crds" / "coordinatedclusters.coordinated.dev.yaml").read_text()
    allowed = re.search(r"self\.all\(k, k in \[(.*?)\]", crd, re.DOTALL)
    assert allowed is not None
    listed = {name.strip().strip("'") for name in allowed.group(1).split(",")}
    assert listed == set(USER_SETTINGS), (sorted(USER_SETTINGS - listed), sorted(listed - USER_SETTINGS))
    checked = set(re.findall(r"rule: \"!\('([^']+)' in self\)", crd))
    assert set(USER_SETTINGS) <= checked, f"no value rule for {sorted(set(USER_SETTINGS) - checked)}"
