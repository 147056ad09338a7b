"""`coordinated operator [options] [kopf run options]`: runs the Kopf operator.

Our own options are taken out first; everything else goes to `kopf run` unchanged (for example
`--standalone`, `--namespace NS`, `--all-namespaces`, `--liveness URL`, `--verbose`).
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

import click

from coordinated.operator.config import ENVIRONMENT_VARIABLE, INTERVAL_VARIABLE, OperatorConfig
from coordinated.programs import run_program

DEFAULTS = OperatorConfig()
HANDLERS = "coordinated.operator.handlers"
PROG = "coordinated operator"


def parse_labels(text: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    for pair in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"invalid label [{pair}]: expected key=value")
        labels[key] = value
    return labels


def _labels(ctx: click.Context, param: click.Parameter, value: str) -> dict[str, str]:
    return parse_labels(value)


def _operator_namespace() -> str | None:
    return os.environ.get("POD_NAMESPACE") or None


def _reconcile_interval() -> float:
    return float(os.environ.get(INTERVAL_VARIABLE) or DEFAULTS.reconcile_interval_seconds)


@click.command(
    "operator",
    help=__doc__.splitlines()[0] if __doc__ else None,
    epilog="Any other option is passed to `kopf run`; see `kopf run --help`.",
    context_settings={"ignore_unknown_options": True, "help_option_names": ["-h", "--help"]},
)
@click.option("--metrics-port", type=int, default=DEFAULTS.metrics_port, help="Prometheus metrics port (0: off)")
@click.option(
    "--sidecar-url",
    default=DEFAULTS.sidecar_url_template,
    help="sidecar base URL template with {scheme}, {ip}, {pod}, {service}, {namespace}, {port}",
)
@click.option(
    "--operator-namespace",
    default=_operator_namespace,
    help="the namespace of the operator's pods (default: $POD_NAMESPACE), admitted by every NetworkPolicy",
)
@click.option(
    "--operator-labels",
    default="",
    callback=_labels,
    help="labels of the operator's pods, as k=v,k=v, admitted by every cluster's NetworkPolicy",
)
@click.option(
    "--sidecar-timeout", type=float, default=DEFAULTS.sidecar_timeout_seconds, help="seconds per sidecar request"
)
@click.option(
    "--stuck-after",
    type=float,
    default=DEFAULTS.stuck_after_seconds,
    help="seconds unconverged before a reconciliation counts as stuck",
)
@click.option(
    "--reconcile-interval",
    type=float,
    default=_reconcile_interval,
    help=f"seconds between periodic passes over every cluster (default: ${INTERVAL_VARIABLE}, else 15)",
)
@click.option(
    "--pod-monitors",
    is_flag=True,
    help="give every cluster a PodMonitor for its sidecars (unless its spec.monitoring.podMonitor.enabled is false)",
)
@click.option(
    "--pod-monitor-labels",
    default="",
    callback=_labels,
    help="labels of those PodMonitors, as k=v,k=v (what Prometheus's podMonitorSelector matches)",
)
@click.option(
    "--lease",
    default="coordinated-operator",
    help="the Lease in the operator's namespace on which replicas elect the one that reconciles",
)
@click.option(
    "--no-leader-election",
    "leader_election",
    flag_value=False,
    default=True,
    help="reconcile without a Lease (one replica only); without --operator-namespace there is no election either",
)
@click.argument("passthrough", nargs=-1, type=click.UNPROCESSED, metavar="[KOPF RUN OPTIONS]...")
def operator_command(passthrough: tuple[str, ...], **options: Any) -> int:
    return run(SimpleNamespace(**options), list(passthrough))


def parse_args(argv: list[str]) -> tuple[SimpleNamespace, list[str]]:
    """Our options, and the rest of the command line for `kopf run`."""
    with operator_command.make_context(PROG, list(argv)) as ctx:
        passthrough = ctx.params.pop("passthrough")
        return SimpleNamespace(**ctx.params), list(passthrough)


def kopf_arguments(passthrough: list[str]) -> list[str]:
    args = ["run", "--module", HANDLERS]
    # Kopf needs a scope; watching every namespace is the chart's default too.
    if not any(arg in ("-A", "--all-namespaces") or arg.startswith(("-n", "--namespace")) for arg in passthrough):
        args.append("--all-namespaces")
    return args + passthrough


def config_of(options: SimpleNamespace) -> OperatorConfig:
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


def run(options: SimpleNamespace, passthrough: list[str]) -> int:
    # `kopf run` takes no memo: the startup handler reads the options from the environment into Kopf's memo.
    os.environ[ENVIRONMENT_VARIABLE] = config_of(options).to_environment()

    import kopf.cli  # late: importing kopf's CLI is slow and only this command needs it

    # Click exits through SystemExit even on success; turn that into our return code.
    try:
        kopf.cli.main.main(args=kopf_arguments(passthrough), prog_name=PROG)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)


def main(argv: list[str]) -> int:
    return run_program(operator_command, argv, PROG)
