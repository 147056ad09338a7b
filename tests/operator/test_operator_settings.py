"""spec.settings validation (docs/settings.md), and the CRD's schema for it, both from the sidecar's registry."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from coordinated.operator import crd_settings, generate
from coordinated.operator.settings_validation import OPERATOR_MANAGED_SETTINGS, USER_SETTINGS, validate_settings
from coordinated.sidecar.node_settings import sidecar_registry


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
                "watch.change_log.size": "50000",
            }
        )
        == []
    )


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"discovery.zen.minimum_master_nodes": "2"}, "Zen1"),
        ({"discovery.zen.ping.unicast.hosts": "a:1"}, "use discovery.seed_hosts instead"),
        ({"node.name": "x"}, "managed by the operator"),
        ({"cluster.initial_master_nodes": "a,b"}, "managed by the operator"),
        ({"transport.ssl.key": "/k"}, "managed by the operator"),
        ({"bogus.setting": "1"}, "unknown setting [bogus.setting]"),
        ({"cluster.publish.timeout": "30"}, "[cluster.publish.timeout]"),
        ({"cluster.publish.timeout": "0s"}, "at least [1s]"),
        ({"cluster.publish.timeout": "99999999999999999999d"}, "out of range"),
        ({"cluster.no_master_block": "reads"}, "[cluster.no_master_block]"),
        ({"cluster.auto_shrink_voting_configuration": "yes"}, "[true] or [false]"),
        ({"cluster.max_voting_config_exclusions": "0"}, "at least 1"),
        ({"cluster.name": "-bad"}, "[cluster.name]"),
        ({"watch.change_log.size": "2000000"}, "at most 1000000"),
        ({"cluster.fault_detection.leader_check.retry_count": 3}, "must be a string"),
    ],
)
def test_invalid_settings_name_the_setting(settings: dict[str, object], expected: str) -> None:
    problems = validate_settings(settings)
    assert len(problems) == 1 and expected in problems[0], problems


def test_every_registered_setting_is_the_users_or_the_operators() -> None:
    registered = set(sidecar_registry().settings)
    assert USER_SETTINGS | set(OPERATOR_MANAGED_SETTINGS) == registered
    assert not USER_SETTINGS & set(OPERATOR_MANAGED_SETTINGS)
    assert set(OPERATOR_MANAGED_SETTINGS) <= registered, "the operator manages a setting no node knows"


def test_the_s3_clients_are_the_operators_under_any_client_name() -> None:
    for name in ("s3.client.default.endpoint", "s3.client.backups.region", "history.archive.s3.bucket"):
        problems = validate_settings({name: "x"})
        assert len(problems) == 1 and "is managed by the operator" in problems[0], problems


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


def _settings_schema(crd: str) -> dict[str, object]:
    version = yaml.safe_load(crd)["spec"]["versions"][0]
    schema: dict[str, object] = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["settings"]
    return schema


def test_the_crd_holds_the_generated_schema_for_every_user_setting() -> None:
    """The committed CRD is what the generator writes (`make lint` checks it too), and it reads back as the schema
    the registry gives: one allow-list, and a value rule for each user setting whose value type has a form."""
    assert generate.main(["--check"]) == 0, "run: python -m coordinated.operator.generate"
    schema = _settings_schema(generate.CRD.read_text())
    assert schema == crd_settings.settings_schema()
    rules = [rule["rule"] for rule in schema["x-kubernetes-validations"]]  # type: ignore[index]
    for name in USER_SETTINGS:
        assert any(f"'{name}'" in rule for rule in rules if "self.all(k, k in" in rule), name
    registry = sidecar_registry().settings
    checked = {name for name in USER_SETTINGS if registry[name].value_type.syntax() is not None}
    assert checked >= {"cluster.publish.timeout", "watch.change_log.size", "cluster.no_master_block"}
    for name in checked:
        assert any(rule.startswith(f"!('{name}' in self)") for rule in rules), name


def test_the_check_notices_a_stale_crd_or_doc_and_the_generator_rewrites_them(tmp_path: Path) -> None:
    crd, doc = tmp_path / "crd.yaml", tmp_path / "settings.md"
    crd.write_text(generate.CRD.read_text().replace("'watch.change_log.size', ", ""))
    doc.write_text(generate.DOC.read_text())
    args = ["--crd", str(crd), "--doc", str(doc)]
    assert generate.main(["--check", *args]) == 1
    assert generate.main(args) == 0
    assert generate.main(["--check", *args]) == 0
    assert crd.read_text() == generate.CRD.read_text()
    doc.write_text(doc.read_text().replace("cluster.publish.timeout", "cluster.publish.deadline"))
    assert generate.main(["--check", *args]) == 1


def test_a_crd_without_the_markers_is_refused() -> None:
    with pytest.raises(ValueError, match="no block between"):
        crd_settings.render("apiVersion: v1\n")


def test_the_charts_crd_is_the_same_file() -> None:
    chart_crd = generate.REPO / "charts" / "coordinated-cluster" / "crds" / generate.CRD.name
    assert chart_crd.is_symlink() and chart_crd.resolve() == generate.CRD.resolve()
