"""`coordinated operator [options] [kopf run options]`: runs the Kopf operator.

Our own options are taken out first; everything else goes to `kopf run` unchanged (for example
`--standalone`, `--namespace NS`, `--all-namespaces`, `--liveness URL`, `--verbose`).
"""

from __future__ import annotations

import argparse
import os

from coordinated.operator.config import ENVIRONMENT_VARIABLE, INTERVAL_VARIABLE, OperatorConfig

DEFAULTS = OperatorConfig()
HANDLERS = "coordinated.operator.handlers"


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog="coordinated operator",
        description=__doc__.splitlines()[0],
        epilog="Any other option is passed to `kopf run`; see `kopf run --help`.",
    )
    parser.add_argument(
        "--metrics-port", type=int, default=DEFAULTS.metrics_port, help="Prometheus metrics port (0: off)"
    )
    parser.add_argument(
        "--sidecar-url",
        default=DEFAULTS.sidecar_url_template,
        help="sidecar base URL template with {scheme}, {ip}, {pod}, {service}, {namespace}, {port}",
    )
    parser.add_argument(
        "--operator-namespace",
        default=os.environ.get("POD_NAMESPACE") or None,
        help="the namespace of the operator's pods (default: $POD_NAMESPACE), admitted by every NetworkPolicy",
    )
    parser.add_argument(
        "--operator-labels",
        type=parse_labels,
        default={},
        help="labels of the operator's pods, as k=v,k=v, admitted by every cluster's NetworkPolicy",
    )
    parser.add_argument(
        "--sidecar-timeout", type=float, default=DEFAULTS.sidecar_timeout_seconds, help="seconds per sidecar request"
    )
    parser.add_argument(
        "--stuck-after",
        type=float,
        default=DEFAULTS.stuck_after_seconds,
        help="seconds unconverged before a reconciliation counts as stuck",
    )
    parser.add_argument(
        "--reconcile-interval",
        type=float,
        default=float(os.environ.get(INTERVAL_VARIABLE) or DEFAULTS.reconcile_interval_seconds),
        help=f"seconds between periodic passes over every cluster (default: ${INTERVAL_VARIABLE}, else 15)",
    )
    parser.add_argument(
        "--pod-monitors",
        action="store_true",
        help="give every cluster a PodMonitor for its sidecars (unless its spec.monitoring.podMonitor.enabled is false)",
    )
    parser.add_argument(
        "--pod-monitor-labels",
        type=parse_labels,
        default={},
        help="labels of those PodMonitors, as k=v,k=v (what Prometheus's podMonitorSelector matches)",
    )
    parser.add_argument(
        "--lease",
        default="coordinated-operator",
        help="the Lease in the operator's namespace on which replicas elect the one that reconciles",
    )
    parser.add_argument(
        "--no-leader-election",
        dest="leader_election",
        action="store_false",
        help="reconcile without a Lease (one replica only); without --operator-namespace there is no election either",
    )
    return parser.parse_known_args(argv)


def parse_labels(text: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    for pair in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"invalid label [{pair}]: expected key=value")
        labels[key] = value
    return labels


def kopf_arguments(passthrough: list[str]) -> list[str]:
    args = ["run", "--module", HANDLERS]
    # Kopf needs a scope; watching every namespace is the chart's default too.
    if not any(arg in ("-A", "--all-namespaces") or arg.startswith(("-n", "--namespace")) for arg in passthrough):
        args.append("--all-namespaces")
    return args + passthrough


def config_of(options: argparse.Namespace) -> OperatorConfig:
    return OperatorConfig(
        metrics_port=options.metrics_port,
        sidecar_url_template=options.sidecar_url,
        sidecar_timeout_seconds=options.sidecar_timeout,
        stuck_after_seconds=options.stuck_after,
        reconcile_interval_seconds=options.reconcile_interval,
        namespace=options.operator_namespace,
        pod_labels=options.operator_labels,
        lease_name=options.lease if options.leader_election and options.operator_namespace else None,
        pod_monitors=options.pod_monitors,
        pod_monitor_labels=options.pod_monitor_labels,
    )


def main(argv: list[str]) -> int:
    options, passthrough = parse_args(argv)
    # `kopf run` takes no memo: the startup handler reads the options from the environment into Kopf's memo.
    os.environ[ENVIRONMENT_VARIABLE] = config_of(options).to_environment()

    import kopf.cli  # late: importing kopf's CLI is slow and only this command needs it

    # Click exits through SystemExit even on success; turn that into our return code.
    try:
        kopf.cli.main.main(args=kopf_arguments(passthrough), prog_name="coordinated operator")
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
