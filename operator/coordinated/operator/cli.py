"""`coordinated operator [options] [kopf run options]`: runs the Kopf operator.

Our own options are taken out first; everything else goes to `kopf run` unchanged (for example
`--standalone`, `--namespace NS`, `--all-namespaces`, `--liveness URL`, `--verbose`).
"""

from __future__ import annotations

import argparse
import os

from coordinated.operator import handlers


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog="coordinated operator",
        description=__doc__.splitlines()[0],
        epilog="Any other option is passed to `kopf run`; see `kopf run --help`.",
    )
    parser.add_argument("--metrics-port", type=int, default=8000, help="Prometheus metrics port (0: off)")
    parser.add_argument(
        "--sidecar-url",
        default=handlers.CONFIG.sidecar_url_template,
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
    parser.add_argument("--sidecar-timeout", type=float, default=3.0, help="seconds per sidecar request")
    parser.add_argument(
        "--stuck-after", type=float, default=600.0, help="seconds unconverged before a reconciliation counts as stuck"
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
    args = ["run", "--module", handlers.__name__]
    # Kopf needs a scope; watching every namespace is the chart's default too.
    if not any(arg in ("-A", "--all-namespaces") or arg.startswith(("-n", "--namespace")) for arg in passthrough):
        args.append("--all-namespaces")
    return args + passthrough


def main(argv: list[str]) -> int:
    options, passthrough = parse_args(argv)
    handlers.CONFIG.metrics_port = options.metrics_port
    handlers.CONFIG.sidecar_url_template = options.sidecar_url
    handlers.CONFIG.sidecar_timeout_seconds = options.sidecar_timeout
    handlers.CONFIG.stuck_after_seconds = options.stuck_after
    handlers.CONFIG.namespace = options.operator_namespace
    handlers.CONFIG.pod_labels = options.operator_labels

    import kopf.cli  # late: importing kopf's CLI is slow and only this command needs it

    # Click exits through SystemExit even on success; turn that into our return code.
    try:
        kopf.cli.main.main(args=kopf_arguments(passthrough), prog_name="coordinated operator")
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
