"""`coordinated operator`'s options reach the startup handler (through the environment, as `kopf run` takes no
memo) exactly as given, and the chart's older interval variable still counts."""

from __future__ import annotations

from coordinated.operator import cli
from coordinated.operator.config import ENVIRONMENT_VARIABLE, INTERVAL_VARIABLE, OperatorConfig


def test_the_options_reach_the_operator_through_the_environment() -> None:
    options, passthrough = cli.parse_args(
        ["--metrics-port", "0", "--sidecar-url", "{scheme}://{pod}.{service}:{port}", "--sidecar-timeout", "1.5",
         "--stuck-after", "60", "--reconcile-interval", "4", "--operator-namespace", "ops",
         "--operator-labels", "app=op,tier=control", "--pod-monitors", "--pod-monitor-labels", "release=kp",
         "--standalone", "--verbose"]
    )  # fmt: skip
    assert passthrough == ["--standalone", "--verbose"]
    config = cli.config_of(options)
    assert OperatorConfig.from_environment({ENVIRONMENT_VARIABLE: config.to_environment()}) == OperatorConfig(
        metrics_port=0,
        sidecar_url_template="{scheme}://{pod}.{service}:{port}",
        sidecar_timeout_seconds=1.5,
        stuck_after_seconds=60.0,
        reconcile_interval_seconds=4.0,
        namespace="ops",
        pod_labels={"app": "op", "tier": "control"},
        lease_name="coordinated-operator",
        pod_monitors=True,
        pod_monitor_labels={"release": "kp"},
    )
    alone, _ = cli.parse_args(["--operator-namespace", "ops", "--no-leader-election"])
    assert cli.config_of(alone).lease_name is None
    nowhere, _ = cli.parse_args(["--operator-namespace", ""])  # no namespace: no Lease to elect on
    assert cli.config_of(nowhere).lease_name is None


def test_without_options_the_defaults_and_the_interval_variable() -> None:
    assert OperatorConfig.from_environment({}) == OperatorConfig()
    assert OperatorConfig.from_environment({INTERVAL_VARIABLE: "7"}).reconcile_interval_seconds == 7.0
