"""The manifest builders: names, owner references, the sidecar's command line, bootstrap wiring, PDB rules."""

from __future__ import annotations

from typing import Any

import pytest

from coordinated.operator import manifests
from coordinated.operator.spec import INITIAL_MASTER_NODES_ANNOTATION, ClusterSpec


def resource(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "coordinated.dev/v1alpha1",
        "kind": "CoordinatedCluster",
        "metadata": {"name": "demo", "namespace": "prod", "uid": "uid-1", "generation": 2},
        "spec": spec,
    }


def build(**spec: Any) -> list[dict[str, Any]]:
    return manifests.desired_children(
        ClusterSpec.from_resource(resource(**spec)),
        replicas=3,
        initial_master_nodes=("demo-0", "demo-1", "demo-2"),
        health="green",
        voters=3,
    )


def by_kind(children: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [child for child in children if child["kind"] == kind]
    return found


def test_every_child_is_owned_by_the_cluster() -> None:
    spec = ClusterSpec.from_resource(resource())
    for child in [*build(), manifests.transport_secret(spec, "x")]:
        (owner,) = child["metadata"]["ownerReferences"]
        assert owner == {
            "apiVersion": "coordinated.dev/v1alpha1",
            "kind": "CoordinatedCluster",
            "name": "demo",
            "uid": "uid-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
        assert child["metadata"]["namespace"] == "prod"


def test_default_children() -> None:
    kinds = sorted(child["kind"] for child in build())
    assert kinds == ["ConfigMap", "PodDisruptionBudget", "Service", "Service", "ServiceAccount", "StatefulSet"]


def test_headless_service_publishes_not_ready_pods() -> None:
    services = [child for child in build() if child["kind"] == "Service"]
    headless = next(s for s in services if s["spec"].get("clusterIP") == "None")
    assert headless["metadata"]["name"] == "demo-headless"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    client = next(s for s in services if s is not headless)
    assert [port["port"] for port in client["spec"]["ports"]] == [9200]


def test_statefulset_runs_the_sidecar_with_operator_settings() -> None:
    sts = by_kind(build(settings={"cluster.publish.timeout": "10s"}), "StatefulSet")
    assert sts["spec"]["replicas"] == 3
    assert sts["spec"]["serviceName"] == "demo-headless"
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    sidecar = sts["spec"]["template"]["spec"]["containers"][0]
    args = sidecar["args"]
    assert args[:3] == ["node", "--name", "$(POD_NAME)"]
    settings = [args[i + 1] for i, arg in enumerate(args) if arg == "-E"]
    assert "cluster.name=demo" in settings
    assert "cluster.publish.timeout=10s" in settings
    assert "discovery.seed_hosts=demo-headless.prod.svc:9300" in settings
    assert "cluster.initial_master_nodes=$(COORDINATED_INITIAL_MASTER_NODES)" in settings
    assert "transport.secret_file=/etc/coordinated/transport/secret" in settings
    assert sidecar["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert sidecar["livenessProbe"]["httpGet"]["path"] == "/healthz"
    claim = sts["spec"]["volumeClaimTemplates"][0]
    assert claim["spec"]["resources"]["requests"]["storage"] == "1Gi"
    assert sts["spec"]["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain", "whenScaled": "Delete"}


def test_bootstrap_list_reaches_pods_through_the_configmap_only() -> None:
    children = build()
    configmap = by_kind(children, "ConfigMap")
    assert configmap["data"] == {"initial_master_nodes": "demo-0,demo-1,demo-2"}
    env = by_kind(children, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]["env"]
    ref = next(e for e in env if e["name"] == "COORDINATED_INITIAL_MASTER_NODES")
    assert ref["valueFrom"]["configMapKeyRef"]["name"] == configmap["metadata"]["name"]
    # After the bootstrap the list is empty, and the pod template is unchanged (no rolling restart).
    after = manifests.desired_children(
        ClusterSpec.from_resource(resource()), replicas=3, initial_master_nodes=(), health="green", voters=3
    )
    assert by_kind(after, "ConfigMap")["data"] == {"initial_master_nodes": ""}
    assert by_kind(after, "StatefulSet")["spec"]["template"] == by_kind(children, "StatefulSet")["spec"]["template"]


def test_user_containers_run_next_to_the_sidecar() -> None:
    template = {"containers": [{"name": "app", "image": "app:1", "env": [{"name": "X", "value": "1"}]}]}
    pod = by_kind(build(template=template), "StatefulSet")["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["sidecar", "app"]
    env = {e["name"]: e for e in pod["containers"][1]["env"]}
    assert env["COORDINATED_URL"]["value"] == "http://$(POD_IP):9200"
    assert env["X"]["value"] == "1"


def test_pods_have_no_api_access_and_run_as_non_root() -> None:
    children = build()
    assert by_kind(children, "ServiceAccount")["automountServiceAccountToken"] is False
    pod = by_kind(children, "StatefulSet")["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True


@pytest.mark.parametrize(
    ("health", "voters", "allowed"),
    [("green", 3, 1), ("green", 5, 1), ("green", 2, 0), ("green", 1, 0), ("yellow", 5, 0), ("red", 3, 0), (None, 3, 0)],
)
def test_managed_pdb_allows_one_disruption_only_when_green_with_three_voters(
    health: str | None, voters: int, allowed: int
) -> None:
    pdb = manifests.pod_disruption_budget(ClusterSpec.from_resource(resource()), health, voters)
    assert pdb is not None
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["spec"]["maxUnavailable"] == allowed


def test_pdb_disabled_and_custom() -> None:
    disabled = ClusterSpec.from_resource(resource(podDisruptionBudget={"mode": "Disabled"}))
    assert manifests.pod_disruption_budget(disabled, "green", 5) is None
    custom = ClusterSpec.from_resource(resource(podDisruptionBudget={"mode": "Custom", "custom": {"minAvailable": 2}}))
    pdb = manifests.pod_disruption_budget(custom, "red", 1)
    assert pdb is not None and pdb["spec"]["minAvailable"] == 2 and "maxUnavailable" not in pdb["spec"]


def test_audit_cronjob_only_when_enabled() -> None:
    assert not [c for c in build() if c["kind"] == "CronJob"]
    audit = {"enabled": True, "schedule": "@daily", "spark": {"master": "local[2]", "conf": {"a.b": "1"}}}
    cronjob = by_kind(build(audit=audit), "CronJob")
    assert cronjob["spec"]["schedule"] == "@daily"
    container = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    assert args[0] == "audit"
    urls = args[args.index("--from-cluster") + 1].split(",")
    assert urls == [f"http://demo-{i}.demo-headless.prod.svc:9200" for i in range(3)]
    assert args[args.index("--spark-master") + 1] == "local[2]"
    assert args[args.index("--conf") + 1] == "a.b=1"
    # Violations and unusable input fail the Job at once; an audit that did not complete (exit 3) runs again.
    rules = cronjob["spec"]["jobTemplate"]["spec"]["podFailurePolicy"]["rules"]
    by_action = {r["action"]: r.get("onExitCodes", {}).get("values") for r in rules}
    assert by_action["FailJob"] == [1, 2] and by_action["Count"] == [3]
    assert {r["onExitCodes"]["containerName"] for r in rules if "onExitCodes" in r} == {container["name"]}


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def test_no_selector_of_the_clusters_nodes_counts_an_audit_pod() -> None:
    """A finished audit job's pods once counted as nodes: N+1 replicas, Degraded, Ready never True again."""
    spec = ClusterSpec.from_resource(resource(audit={"enabled": True}))
    children = build(audit={"enabled": True})
    audit = by_kind(children, "CronJob")["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
    node = by_kind(children, "StatefulSet")["spec"]["template"]["metadata"]["labels"]
    observed = dict(pair.split("=", 1) for pair in manifests.node_selector_string(spec).split(","))
    selectors = {
        "the operator's pod list and status.selector": observed,
        "the disruption budget": by_kind(children, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
        **{
            f"Service {service['metadata']['name']}": service["spec"]["selector"]
            for service in children
            if service["kind"] == "Service"
        },
    }
    for what, selector in selectors.items():
        assert _matches(selector, node), what  # the nodes are selected ...
        assert not _matches(selector, audit), what  # ... and the audit's pods are not
    # The NetworkPolicy still admits the audit's pods to the client port, and them only there.
    from coordinated.operator import security

    policy = security.network_policy(spec, None)
    assert policy is not None
    assert not _matches(policy["spec"]["podSelector"]["matchLabels"], audit)
    transport, client = policy["spec"]["ingress"]
    assert any(_matches(peer["podSelector"]["matchLabels"], audit) for peer in client["from"])
    assert not any(_matches(peer["podSelector"]["matchLabels"], audit) for peer in transport["from"])


def test_spec_reads_annotations() -> None:
    body = resource()
    body["metadata"]["annotations"] = {
        INITIAL_MASTER_NODES_ANNOTATION: "demo-0,demo-1",
        "coordinated.dev/pause": "true",
    }
    spec = ClusterSpec.from_resource(body)
    assert spec.pinned_initial_master_nodes == ("demo-0", "demo-1")
    assert spec.paused
    assert (
        manifests.selector_string(spec) == "app.kubernetes.io/instance=demo,app.kubernetes.io/name=coordinated-cluster"
    )


def test_every_example_gives_the_sidecar_cpu_and_memory_requests() -> None:
    """A pod without requests is scheduled as if it needed nothing and is the first evicted under pressure."""
    import yaml
    from operator_schemas import REPO

    for example in sorted((REPO / "examples").glob("*.yaml")):
        for document in yaml.safe_load_all(example.read_text()):
            if not document or document.get("kind") != "CoordinatedCluster":
                continue
            spec = ClusterSpec.from_resource({**document, "metadata": {**document["metadata"], "namespace": "x"}})
            sidecar = manifests.statefulset(spec, spec.replicas)["spec"]["template"]["spec"]["containers"][0]
            requests = sidecar.get("resources", {}).get("requests", {})
            assert {"cpu", "memory"} <= requests.keys(), (example.name, requests)
