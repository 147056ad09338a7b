"""The chart's alert rules evaluated by Prometheus's own rule engine (`promtool test rules`, from Debian's
`prometheus` package) on series shaped like what the sidecars, the operator and the kubelet export: every rule
parses, every rule has a case where it fires and one where it does not (another application's claim, an absent
operator...), and the lag alert fires on a follower the master sees behind, not on the skew between pods
scraped at different moments."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from operator_schemas import REPO
from required_commands import require_command

CHART = REPO / "charts" / "coordinated-cluster"


SIDECAR = 'job="coordinated-sidecar", namespace="shop", cluster="orders"'
LAGGING_FOR_MINUTES = 2  # values.yaml: prometheusRule.laggingFor


@pytest.fixture(scope="module")
def rules_file(tmp_path_factory: pytest.TempPathFactory, installed_tools: dict[str, Path]) -> Path:
    require_command("promtool", "scripts/system-deps.sh test (Debian's prometheus package)")
    helm = installed_tools["HELM"]
    rendered = subprocess.run(
        [str(helm), "template", "demo", str(CHART), "--set", "prometheusRule.enabled=true",
         "--set", "serviceMonitor.enabled=true"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    (rule,) = [doc for doc in yaml.safe_load_all(rendered.stdout) if doc and doc["kind"] == "PrometheusRule"]
    path = tmp_path_factory.mktemp("rules") / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    return path


def promtool_test(rules_file: Path, tests: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    spec = rules_file.parent / "test.yaml"
    spec.write_text(yaml.safe_dump({"rule_files": [rules_file.name], "evaluation_interval": "1m", "tests": tests}))
    return subprocess.run(
        ["promtool", "test", "rules", str(spec)], capture_output=True, text=True, cwd=rules_file.parent
    )


def test_every_rule_parses(rules_file: Path) -> None:
    checked = subprocess.run(["promtool", "check", "rules", str(rules_file)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def lag_scenario(lag_of_orders_2: int) -> dict[str, Any]:
    """Steady writes (60 versions a minute). orders-1 is always scraped 20 versions "behind" orders-0, which
    is the scrape skew of a healthy cluster; the master (orders-0) sees orders-1 one version behind at most and
    orders-2 `lag_of_orders_2` versions behind."""
    return {
        "interval": "1m",
        "input_series": [
            {"series": f'coordinated_cluster_state_version{{{SIDECAR}, pod="orders-0"}}', "values": "1000+60x30"},
            {"series": f'coordinated_cluster_state_version{{{SIDECAR}, pod="orders-1"}}', "values": "980+60x30"},
            {"series": f'coordinated_cluster_state_version{{{SIDECAR}, pod="orders-2"}}', "values": "1000+60x30"},
            {"series": f'coordinated_follower_lag_versions{{{SIDECAR}, pod="orders-0", peer="orders-1"}}', "values": "1+0x30"},
            {"series": f'coordinated_follower_lag_versions{{{SIDECAR}, pod="orders-0", peer="orders-2"}}',
             "values": f"{lag_of_orders_2}+0x30"},
        ],
    }  # fmt: skip


def test_scrape_skew_between_pods_is_not_lag(rules_file: Path) -> None:
    test = {
        **lag_scenario(0),
        "alert_rule_test": [{"eval_time": "20m", "alertname": "CoordinatedClusterNodeLagging", "exp_alerts": []}],
    }
    done = promtool_test(rules_file, [test])
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_follower_the_master_sees_behind_fires_the_lag_alert(rules_file: Path) -> None:
    alert = {
        "exp_labels": {"severity": "warning", "namespace": "shop", "cluster": "orders", "peer": "orders-2"},
        "exp_annotations": {
            "summary": "orders-2 is 50 cluster state versions behind the master",
            "description": "The node applies committed states late; the master removes it after cluster.follower_lag.timeout.",
        },
    }
    test = {
        **lag_scenario(50),
        "alert_rule_test": [
            {"eval_time": f"{LAGGING_FOR_MINUTES - 1}m", "alertname": "CoordinatedClusterNodeLagging", "exp_alerts": []},
            {"eval_time": "20m", "alertname": "CoordinatedClusterNodeLagging", "exp_alerts": [alert]},
        ],
    }  # fmt: skip
    done = promtool_test(rules_file, [test])
    assert done.returncode == 0, done.stdout + done.stderr


DASHBOARD = CHART / "dashboards" / "coordinated-cluster.json"


def panel_expr(title: str) -> str:
    """A dashboard panel's query with its variables set to "All", as Grafana sends it."""
    panel = next(p for p in json.loads(DASHBOARD.read_text())["panels"] if p["title"] == title)
    (target,) = panel["targets"]
    return str(target["expr"]).replace('=~"$namespace"', '=~".*"').replace('=~"$cluster"', '=~".*"')


def test_the_failovers_panel_counts_a_master_that_died(rules_file: Path) -> None:
    # orders-0 is master in term 1 and is killed at 5m (its series end); orders-1 wins term 2.
    series = {
        ("coordinated_is_master", "orders-0"): "1x20 stale",
        ("coordinated_current_term", "orders-0"): "1x20 stale",
        ("coordinated_is_master", "orders-1"): "0x20 1x20",
        ("coordinated_current_term", "orders-1"): "1x20 2x20",
        ("coordinated_is_master", "orders-2"): "0x40",
        ("coordinated_current_term", "orders-2"): "1x20 2x20",
    }
    test = {
        "interval": "15s",
        "input_series": [
            {"series": f'{name}{{{SIDECAR}, pod="{pod}"}}', "values": values} for (name, pod), values in series.items()
        ],
        "promql_expr_test": [
            {"expr": panel_expr("Failovers"), "eval_time": "4m", "exp_samples": [
                {"labels": '{namespace="shop", cluster="orders"}', "value": 0}]},
            {"expr": panel_expr("Failovers"), "eval_time": "8m", "exp_samples": [
                {"labels": '{namespace="shop", cluster="orders"}', "value": 1}]},
        ],
    }  # fmt: skip
    done = promtool_test(rules_file, [test])
    assert done.returncode == 0, done.stdout + done.stderr


def fires(alertname: str, series: dict[str, str], at: str, fired: bool) -> dict[str, Any]:
    """A promtool test: the alert fires at `at` (or not) on these series (name{labels} -> values)."""
    test: dict[str, Any] = {
        "interval": "1m",
        "input_series": [{"series": name, "values": values} for name, values in series.items()],
        "alert_rule_test": [{"eval_time": at, "alertname": alertname}],
    }
    if not fired:
        test["alert_rule_test"][0]["exp_alerts"] = []
    return test


def alerts_fired(rules_file: Path, test: dict[str, Any]) -> list[dict[str, str]]:
    """The labels of the alerts that fire, by asking promtool to compare with none and reading its answer."""
    done = promtool_test(rules_file, [{**test, "alert_rule_test": [{**test["alert_rule_test"][0], "exp_alerts": []}]}])
    if done.returncode == 0:
        return []
    report = (done.stdout + done.stderr).splitlines()  # promtool writes failed expectations to stderr
    return [dict(re.findall(r'(\w+)="([^"]*)"', line)) for line in report if "alertname=" in line]


GIB = 1 << 30
POD = f'{SIDECAR}, pod="orders-0"'
CLAIM = 'namespace="shop", persistentvolumeclaim="data-orders-0"'
OTHER_CLAIM = 'namespace="shop", persistentvolumeclaim="data-postgres-0"'  # another application's StatefulSet
SCRAPED = {f"up{{{POD}}}": "1+0x120"}  # orders-0 is a sidecar Prometheus scrapes


def volume(claim: str, available: str) -> dict[str, str]:
    return {
        f"kubelet_volume_stats_available_bytes{{{claim}}}": available,
        f"kubelet_volume_stats_capacity_bytes{{{claim}}}": f"{GIB}+0x120",
    }


def expiry(days_left: int) -> str:
    return f"{30 * 60 + days_left * 86400}+0x60"  # seconds after promtool's clock starts, read at 30m


# alert, case, series (name{labels} -> promtool values), when to evaluate, whether it fires, labels it must carry
CASES: list[tuple[str, str, dict[str, str], str, bool, dict[str, str]]] = [
    ("CoordinatedClusterNoMaster", "no node is master",
     {f'coordinated_is_master{{{SIDECAR}, pod="orders-{i}"}}': "0+0x10" for i in range(3)}, "5m", True,
     {"cluster": "orders"}),
    ("CoordinatedClusterNoMaster", "one node is master",
     {f'coordinated_is_master{{{SIDECAR}, pod="orders-{i}"}}': f"{int(i == 1)}+0x10" for i in range(3)}, "5m", False, {}),
    ("CoordinatedClusterQuorumAtRisk", "one of three down",
     {f'up{{{SIDECAR}, pod="orders-{i}"}}': f"{int(i != 2)}+0x10" for i in range(3)}, "5m", True, {"cluster": "orders"}),
    ("CoordinatedClusterQuorumAtRisk", "all up",
     {f'up{{{SIDECAR}, pod="orders-{i}"}}': "1+0x10" for i in range(3)}, "5m", False, {}),
    ("CoordinatedClusterPublicationFailures", "a failed publication",
     {f"coordinated_failed_publications_total{{{POD}}}": "0+0x5 1+0x10"}, "8m", True, {"pod": "orders-0"}),
    ("CoordinatedClusterPublicationFailures", "none", {f"coordinated_failed_publications_total{{{POD}}}": "3+0x15"},
     "8m", False, {}),
    ("CoordinatedClusterDataVolumeFilling", "plenty of room", {**SCRAPED, **volume(CLAIM, f"{GIB // 2}+0x120")}, "40m",
     False, {}),
    ("CoordinatedClusterDataVolumeFilling", "below the free share", {**SCRAPED, **volume(CLAIM, f"{GIB // 10}+0x120")},
     "40m", True, {"persistentvolumeclaim": "data-orders-0"}),
    # 60% free, but losing 1% of the volume a minute: full within the day.
    ("CoordinatedClusterDataVolumeFilling", "filling fast",
     {**SCRAPED, **volume(CLAIM, f"{GIB * 6 // 10}-{GIB // 100}x50")}, "40m", True,
     {"persistentvolumeclaim": "data-orders-0"}),
    ("CoordinatedClusterDataVolumeFilling", "another application's claim at 5 % free",
     {**SCRAPED, **volume(OTHER_CLAIM, f"{GIB // 20}+0x120")}, "40m", False, {}),
    ("CoordinatedClusterDataVolumeFilling", "the sidecar is down (its volume is full)",
     {f'up{{{POD}}}': "0+0x120", **volume(CLAIM, "0+0x120")}, "40m", True, {"persistentvolumeclaim": "data-orders-0"}),
    ("CoordinatedClusterArchiveFailing", "archiving", {f"coordinated_archive_failing{{{POD}}}": "0+0x60"}, "55m", False, {}),
    ("CoordinatedClusterArchiveFailing", "failing", {f"coordinated_archive_failing{{{POD}}}": "1+0x60"}, "55m", True,
     {"cluster": "orders"}),
    ("CoordinatedClusterArchiveLagging", "keeping up",
     {f"coordinated_archive_oldest_pending_age_seconds{{{POD}}}": "600+0x60"}, "55m", False, {}),
    ("CoordinatedClusterArchiveLagging", "falling behind",
     {f"coordinated_archive_oldest_pending_age_seconds{{{POD}}}": "600+120x60"}, "55m", True, {"cluster": "orders"}),
    ("CoordinatedClusterStateSizeNearLimit", "half",
     {f"coordinated_cluster_state_bytes{{{POD}}}": "100+0x60", f"coordinated_cluster_state_max_bytes{{{POD}}}": "200+0x60"},
     "55m", False, {}),
    ("CoordinatedClusterStateSizeNearLimit", "90 %",
     {f"coordinated_cluster_state_bytes{{{POD}}}": "180+0x60", f"coordinated_cluster_state_max_bytes{{{POD}}}": "200+0x60"},
     "55m", True, {"cluster": "orders"}),
    # The sidecar's own certificate: it fires with no operator metric at all.
    ("CoordinatedClusterCertificateExpiring", "60 days left",
     {f'coordinated_tls_certificate_expiry_timestamp_seconds{{{POD}, port="transport", kind="certificate"}}': expiry(60)},
     "30m", False, {}),
    ("CoordinatedClusterCertificateExpiring", "7 days left",
     {f'coordinated_tls_certificate_expiry_timestamp_seconds{{{POD}, port="transport", kind="certificate"}}': expiry(7)},
     "30m", True, {"pod": "orders-0", "port": "transport", "kind": "certificate"}),
    ("CoordinatedClusterReconcileStuck", "converging", {"coordinated_operator_stuck_reconciliations": "0+0x20"}, "15m",
     False, {}),
    ("CoordinatedClusterReconcileStuck", "stuck", {"coordinated_operator_stuck_reconciliations": "1+0x20"}, "15m", True,
     {}),
    ("CoordinatedClusterOperatorAbsent", "a leader and a standby",
     {'coordinated_operator_leader{pod="op-a"}': "1+0x20", 'coordinated_operator_leader{pod="op-b"}': "0+0x20"}, "15m",
     False, {}),
    ("CoordinatedClusterOperatorAbsent", "no operator scraped at all", {"unrelated_series": "1+0x20"}, "15m", True, {}),
    ("CoordinatedClusterOperatorAbsent", "replicas, none leading",
     {'coordinated_operator_leader{pod="op-a"}': "0+0x20", 'coordinated_operator_leader{pod="op-b"}': "0+0x20"}, "15m",
     True, {}),
]  # fmt: skip


def rendered_alerts(rules_file: Path) -> set[str]:
    groups = yaml.safe_load(rules_file.read_text())["groups"]
    return {rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule}


def test_every_rule_has_a_case_that_fires_and_one_that_does_not(rules_file: Path) -> None:
    covered = {(alert, fired) for alert, _, _, _, fired, _ in CASES}
    missing = {(alert, fired) for alert in rendered_alerts(rules_file) for fired in (True, False)} - covered
    lag = "CoordinatedClusterNodeLagging"  # its two cases are the lag tests above
    assert missing <= {(lag, True), (lag, False)}, sorted(missing)
    assert {alert for alert, _, _, _, _, _ in CASES} <= rendered_alerts(rules_file)


@pytest.mark.parametrize(
    ("alertname", "series", "at", "fired", "labels"),
    [
        pytest.param(alert, series, at, fired, labels, id=f"{alert}: {case}")
        for alert, case, series, at, fired, labels in CASES
    ],
)
def test_each_rule(
    rules_file: Path, alertname: str, series: dict[str, str], at: str, fired: bool, labels: dict[str, str]
) -> None:
    found = alerts_fired(rules_file, fires(alertname, series, at, fired))
    assert bool(found) == fired, found
    if fired:
        assert labels.items() <= found[0].items(), found


def test_the_archive_alert_fires_minutes_after_the_sidecar_reports_failing(rules_file: Path) -> None:
    """`coordinated_archive_failing` turns 1 within `s3.client.*.call_timeout` (30s) of a store that hangs; the
    alert follows after `archiveFailingFor` (values.yaml: 5m). Failing from minute 2: not yet at minute 6, firing at
    minute 8 (with 15m it fired at minute 17)."""
    series = {f'coordinated_archive_failing{{{SIDECAR}, pod="orders-0"}}': "0 0 1+0x30"}
    assert not alerts_fired(rules_file, fires("CoordinatedClusterArchiveFailing", series, "6m", False))
    found = alerts_fired(rules_file, fires("CoordinatedClusterArchiveFailing", series, "8m", True))
    assert found and found[0]["pod"] == "orders-0", found
