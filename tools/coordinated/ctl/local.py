"""`coordinated local up|down`: a local cluster of sidecar nodes on 127.0.0.1 that stays up in the
background, for trying the client commands. `up` starts the nodes (their own sessions, so they outlive the
command), waits for a master and records their PIDs; `down` stops exactly those PIDs."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from pathlib import Path

import click

from coordinated.ctl.failures import Failed
from coordinated.ctl.localstate import (
    LocalClusterRecord,
    LocalNodeRecord,
    as_json,
    local_dir,
    read_record,
    record_path,
    write_record,
)
from coordinated.ctl.output import emit, output_option
from coordinated.tools.localcluster import LocalCluster

STOP_TIMEOUT_S = 10.0

dir_option = click.option(
    "--dir",
    "directory",
    envvar="COORDINATED_LOCAL_DIR",
    help="where the nodes keep their data and logs [default: $XDG_STATE_HOME/coordinated/local]",
)


@click.group()
def local() -> None:
    """A local cluster on 127.0.0.1 for trying things out (plain HTTP, no tokens: not for production)."""


@local.command()
@click.option("--nodes", type=click.IntRange(1, 7), default=3, show_default=True, help="how many nodes")
@dir_option
@output_option
def up(nodes: int, directory: str | None, output: str) -> None:
    """Starts the nodes in the background and waits until they have a master. The other commands then use
    this cluster when no --endpoints or COORDINATED_ENDPOINTS is given."""
    workdir = local_dir(directory)
    running = read_record(workdir)
    if running is not None and any(is_node(node) for node in running.nodes):
        raise Failed(f"a local cluster is already running in {workdir}: `coordinated local down` first")
    if workdir.exists():
        shutil.rmtree(workdir)  # the data of a cluster that is down: the new one starts anew
    workdir.mkdir(parents=True)
    repository = workdir / "snapshots"
    repository.mkdir()
    cluster = LocalCluster(workdir, max_nodes=nodes)
    cluster.settings["path.repo"] = str(repository)
    try:
        started = cluster.bootstrap(nodes)
    except (RuntimeError, TimeoutError, OSError) as error:
        cluster.stop_all(graceful=False)
        raise Failed(f"the local cluster did not start ({error}); the node logs are in {workdir}") from error
    record = LocalClusterRecord(
        [LocalNodeRecord(node.name, node.pid or 0, node.url, str(node.data_dir)) for node in started]
    )
    write_record(workdir, record)
    emit(as_json(record), output, ("name", "pid", "url", "data_dir"), rows=as_json(record)["nodes"])
    click.echo(f"export COORDINATED_ENDPOINTS={','.join(record.endpoints)}", err=True)


@local.command()
@click.option("--keep-data", is_flag=True, help="keep the data and logs (the next `up` starts anew anyway)")
@dir_option
def down(keep_data: bool, directory: str | None) -> None:
    """Stops the nodes that `up` started, by PID (SIGTERM, then SIGKILL after 10 s), and removes their data."""
    workdir = local_dir(directory)
    record = read_record(workdir)
    if record is None:
        raise Failed(f"no local cluster in {workdir} ({record_path(workdir)} is missing)")
    for node in record.nodes:
        stop(node)
    if keep_data:
        record_path(workdir).unlink()
    else:
        shutil.rmtree(workdir)
    click.echo(f"stopped {len(record.nodes)} nodes", err=True)


def is_node(node: LocalNodeRecord) -> bool:
    """True while the PID is still that node (and not a reused PID): its command line names its data dir."""
    try:
        command_line = Path(f"/proc/{node.pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return node.data_dir.encode() in command_line and b"node" in command_line


def stop(node: LocalNodeRecord) -> None:
    for sig, wait_s in ((signal.SIGTERM, STOP_TIMEOUT_S), (signal.SIGKILL, 5.0)):
        if not is_node(node):
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(node.pid, sig)
        deadline = time.monotonic() + wait_s
        while is_node(node) and not exited(node.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
    if is_node(node) and not exited(node.pid):
        raise Failed(f"{node.name} (PID {node.pid}) did not stop")


def exited(pid: int) -> bool:
    """True once the process is gone or a zombie (its parent, the `up` command, has exited already)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
