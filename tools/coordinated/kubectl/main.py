"""The entry point of `kubectl-coordinated`: kubectl runs it as `kubectl coordinated ...`."""

from __future__ import annotations

import sys

import click

from coordinated.cli import run_command
from coordinated.ctl.failures import ExitCode


def main(argv: list[str] | None = None) -> int:
    try:
        from coordinated.kubectl.kube import as_exit_codes
        from coordinated.kubectl.plugin import plugin
    except ModuleNotFoundError as missing:  # the plugin's extra is not installed
        click.echo(
            f"Error: kubectl-coordinated needs {missing.name}: pip install 'coordinated-cluster[kubectl]'", err=True
        )
        return ExitCode.BAD_INPUT
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        # The API calls outside a command's own handling (none should be) still end as one line, not a trace.
        with as_exit_codes("the Kubernetes API"):
            return run_command(plugin, args, "kubectl coordinated")
    except click.ClickException as error:
        error.show()
        return error.exit_code


if __name__ == "__main__":
    sys.exit(main())
