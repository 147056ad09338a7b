"""The `kubectl-coordinated` command (`kubectl coordinated ...` once it is on PATH).

`status`, `kv ...`, `snapshot ...` and `restore` are the command-line client's own commands (coordinated.ctl)
with CLUSTER in place of the connection options: the plugin finds the pods and the token, and the calls go
through port-forwards (reach.py, tunnel.py). `recover`, `pause` and `resume` work on the Kubernetes objects.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import click

from coordinated.client import Client
from coordinated.ctl import kv as ctl_kv
from coordinated.ctl import snapshot as ctl_snapshot
from coordinated.ctl.connection import DEFAULT_TIMEOUT_S, PRESET_KEY, Connection, Preset
from coordinated.ctl.endpoint import STATUS_COLUMNS, all_rows, node_row
from coordinated.ctl.failures import BadInput, Failed, Unreachable, as_exit_codes
from coordinated.ctl.output import output_option, render
from coordinated.kubectl import recover as recovery
from coordinated.kubectl.kube import ADMIN, READER, WRITER, Kube, kube_options, kube_parameters, with_kube
from coordinated.kubectl.kube import as_exit_codes as kube_exit_codes
from coordinated.kubectl.reach import sidecars
from coordinated.operator.spec import PAUSE_ANNOTATION, ClusterSpec

# The repository the operator registers for a cluster with spec.snapshots: its snapshot volume, or its bucket.
SNAPSHOT_REPOSITORY = "snapshots"
CONNECTION_PARAMETERS = ("endpoints", "token", "cacert")
CONDITION_COLUMNS = ("type", "status", "reason", "message")
Prepare = Callable[[dict[str, Any], Preset], None]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def plugin() -> None:
    """kubectl coordinated: a CoordinatedCluster's keys, status, snapshots and recovery from kubectl.

    Exit codes: 0 ok, 1 a failed operation, 2 bad usage, 3 unreachable or not authorised, 4 unknown outcome
    (docs/cli.md, "The kubectl plugin")."""


def on_cluster(
    command: click.Command, role: str, name: str | None = None, prepare: Prepare | None = None, **fixed: Any
) -> click.Command:
    """The client's `command` with CLUSTER and kubectl's flags instead of the connection options, sent to the
    cluster's pods with the token of its `role` Secret. `fixed` sets some of the command's parameters for
    good; `prepare` runs first, over the same connection."""
    callback = command.callback
    assert callback is not None
    hidden = {*CONNECTION_PARAMETERS, *fixed}

    def run(kube: Kube, cluster: str, **kwargs: Any) -> Any:
        with sidecars(kube, cluster, role) as (resource, preset):
            if prepare is not None:
                prepare(resource, preset)
            click.get_current_context().meta[PRESET_KEY] = preset
            return callback(**kwargs, **fixed, **dict.fromkeys(CONNECTION_PARAMETERS))

    return click.Command(
        name or command.name,
        callback=with_kube(run),
        params=[click.Argument(["cluster"]), *(p for p in command.params if p.name not in hidden), *kube_parameters()],
        help=f"On CLUSTER: {command.help or ''}".replace("REPOSITORY", "the cluster's snapshot repository"),
        short_help=command.get_short_help_str(),
    )


@plugin.command()
@click.argument("cluster")
@output_option
@kube_options
def status(kube: Kube, cluster: str, output: str) -> None:
    """Each pod's node (master, term, version, voting, applied lag, health), as `coordinated endpoint status`,
    and the cluster's phase and conditions. Exits 3 if no pod answered."""
    with sidecars(kube, cluster, READER) as (resource, preset):
        connection = Connection(preset.endpoints, preset.token, False, DEFAULT_TIMEOUT_S, output, preset.http)
        with as_exit_codes():
            rows = all_rows(connection)
    click.echo(status_report(kube.namespace, resource, rows, output))


def status_report(namespace: str, resource: dict[str, Any], rows: list[dict[str, Any]], output: str) -> str:
    """The endpoint status rows by pod name, then the cluster's phase and conditions."""
    nodes = [{"pod": pod_of(row["endpoint"]), **{k: v for k, v in row.items() if k != "endpoint"}} for row in rows]
    found = resource.get("status") or {}
    name = resource["metadata"]["name"]
    data = {
        "cluster": name,
        "namespace": namespace,
        "phase": found.get("phase"),
        "conditions": found.get("conditions") or [],
        "nodes": nodes,
    }
    if output != "table":
        return render(data, output)
    return "\n\n".join(
        [
            render(nodes, output, ("pod", *STATUS_COLUMNS[1:])),
            f"CoordinatedCluster {namespace}/{name}: phase {data['phase'] or 'unknown'}",
            render(data["conditions"], output, CONDITION_COLUMNS),
        ]
    )


def pod_of(address: str) -> str:
    """`http://POD:9200` -> POD."""
    return address.split("//", 1)[1].rsplit(":", 1)[0]


@plugin.group()
def kv() -> None:
    """The keys of a cluster: `coordinated kv` with CLUSTER first (the client token)."""


for kv_command in ctl_kv.kv.commands.values():
    kv.add_command(on_cluster(kv_command, WRITER))


def register_repository(resource: dict[str, Any], preset: Preset) -> None:
    """The operator's snapshot repository, as it registers it (it does so only at its first snapshot)."""
    if not (resource.get("spec") or {}).get("snapshots"):
        name = resource["metadata"]["name"]
        raise Failed(f"CoordinatedCluster {name} has no spec.snapshots: no volume or bucket to keep snapshots in")
    # Imported here: the manifests module brings the sidecar's (aiohttp), a third of the plugin's start-up.
    from coordinated.operator import object_storage
    from coordinated.operator.manifests import SNAPSHOT_DIR

    body = object_storage.snapshot_repository_body(ClusterSpec.from_resource(resource), SNAPSHOT_DIR)
    with as_exit_codes(), Client(preset.endpoints, token=preset.token, http=preset.http) as client:
        client.put_repository(SNAPSHOT_REPOSITORY, body["type"], body["settings"])


@plugin.group()
def snapshot() -> None:
    """Snapshots in the cluster's snapshot repository (spec.snapshots; the admin token)."""


def in_repository(command: click.Command, name: str | None = None) -> click.Command:
    return on_cluster(
        command, ADMIN, name, prepare=register_repository, repository=SNAPSHOT_REPOSITORY, **without_location(command)
    )


def without_location(command: click.Command) -> dict[str, Any]:
    return {"location": None} if any(p.name == "location" for p in command.params) else {}


snapshot.add_command(in_repository(ctl_snapshot.save))
snapshot.add_command(in_repository(ctl_snapshot.list_snapshots, "list"))
snapshot.add_command(in_repository(ctl_snapshot.delete))
plugin.add_command(in_repository(ctl_snapshot.restore))


@plugin.command()
@click.argument("cluster")
@click.option("--from", "survivor", required=True, metavar="POD", help="the voter pod whose data survived")
@click.option("--dry-run", is_flag=True, help="print the steps and change nothing")
@click.option("--yes", is_flag=True, help="do not ask: writes the survivor never had are lost for good")
@click.option("--no-wait", is_flag=True, help="end once the operator is resumed, before the cluster is Ready")
@kube_options
def recover(kube: Kube, cluster: str, survivor: str, dry_run: bool, yes: bool, no_wait: bool) -> None:
    """After a quorum loss for good: make POD's node the sole voter of a new cluster, delete the other voters'
    claims, and let the operator grow the cluster back (docs/operator.md, "Recovering from quorum loss").
    Refused while the cluster has a quorum."""
    resource = kube.cluster(cluster)
    facts = recovery_facts(kube, resource, survivor, wait_ready=not no_wait)
    refuse_if_quorate(kube, resource)
    steps = recovery.plan(facts)
    click.echo(
        f"recover CoordinatedCluster {kube.namespace}/{cluster} from {survivor}, in {len(steps)} steps:", err=True
    )
    recovery.print_steps(steps)
    if dry_run:
        click.echo("dry run: nothing was changed", err=True)
        return
    question = f"run them? Every write that {survivor} did not have is lost, and the other voters' claims are deleted"
    if not yes and not click.confirm(question, err=True):
        raise Failed("not recovered: not confirmed (--yes runs without asking)")
    progress = recovery.run(kube, steps)
    click.echo(f"recovered: {kube.namespace}/{cluster} is cluster UUID [{progress.new_uuid}], grown from {survivor}")


def recovery_facts(kube: Kube, resource: dict[str, Any], survivor: str, wait_ready: bool) -> recovery.Facts:
    cluster = resource["metadata"]["name"]
    with kube_exit_codes(f"the claims of {kube.namespace}/{cluster}"):
        claims = recovery.claim_names(kube, kube.namespace)
    ordinals = sorted(int(m.group(1)) for c in claims if (m := re.fullmatch(rf"data-{re.escape(cluster)}-(\d+)", c)))
    found = re.fullmatch(rf"{re.escape(cluster)}-(\d+)", survivor)
    if found is None or int(found.group(1)) not in ordinals:
        pods = ", ".join(f"{cluster}-{ordinal}" for ordinal in ordinals) or "none"
        raise BadInput(f"--from {survivor}: not one of {cluster}'s voters with a data claim (they are: {pods})")
    with kube_exit_codes(f"StatefulSet {kube.namespace}/{cluster}"):
        statefulset = kube.apps.read_namespaced_stateful_set(cluster, kube.namespace)
    pod_spec = statefulset.spec.template.spec if statefulset.spec else None
    if pod_spec is None or not pod_spec.containers or not pod_spec.containers[0].image:
        raise Failed(f"StatefulSet {kube.namespace}/{cluster} has no sidecar image")
    container = pod_spec.containers[0]
    assert container.image is not None
    ordinal = int(found.group(1))
    lost = tuple(other for other in ordinals if other != ordinal)
    return recovery.Facts(
        kube.namespace, cluster, ordinal, lost, container.image, container.image_pull_policy, wait_ready
    )


def refuse_if_quorate(kube: Kube, resource: dict[str, Any]) -> None:
    """Refuses while the operator sees a quorum, or while any pod answers with a master."""
    cluster = resource["metadata"]["name"]
    conditions = (resource.get("status") or {}).get("conditions") or []
    quorate = next((c for c in conditions if c.get("type") == "Quorate"), None)
    if quorate is not None and quorate.get("status") == "True":
        raise Failed(
            f"CoordinatedCluster {kube.namespace}/{cluster} has a quorum ({quorate.get('message') or 'a master'}): "
            "recover is only for a quorum lost for good"
        )
    try:
        with sidecars(kube, cluster, READER) as (_, preset):
            connection = Connection(preset.endpoints, preset.token, False, 5.0, "table", preset.http)
            masters = {node_row(connection, address).get("master_node") for address in preset.endpoints}
    except Unreachable:
        return  # no pod runs, or none can be asked: none has a master to lose
    named = sorted(str(master) for master in masters if master)
    if named:
        raise Failed(
            f"CoordinatedCluster {kube.namespace}/{cluster} has a master ({', '.join(named)}): "
            "recover is only for a quorum lost for good"
        )


def set_pause(kube: Kube, cluster: str, paused: bool) -> None:
    kube.cluster(cluster)
    kube.patch_cluster(cluster, {"metadata": {"annotations": {PAUSE_ANNOTATION: "true" if paused else None}}})


@plugin.command()
@click.argument("cluster")
@kube_options
def pause(kube: Kube, cluster: str) -> None:
    """Stop the operator from changing CLUSTER (the coordinated.dev/pause annotation); its status stays current."""
    set_pause(kube, cluster, True)
    click.echo(f"paused {kube.namespace}/{cluster}: the operator changes nothing until `resume`")


@plugin.command()
@click.argument("cluster")
@kube_options
def resume(kube: Kube, cluster: str) -> None:
    """Let the operator manage CLUSTER again (removes the pause annotation)."""
    set_pause(kube, cluster, False)
    click.echo(f"resumed {kube.namespace}/{cluster}")
