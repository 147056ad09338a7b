"""The Helm chart lints, renders, and validates offline with kubeconform against Kubernetes 1.29's schemas
and our CRD; the operator's own manifests and the examples are validated the same way.

The tools are built once by scripts/install-tools.sh (through the Go module proxy) and cached.
"""

from __future__ import annotations

import datetime
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from operator_schemas import (
    REPO,
    SCHEMA_LOCATION_TEMPLATE,
    builtin_schemas,
    crd_schemas,
    load_yaml_documents,
    write_schemas,
)

from coordinated.operator import certificates, manifests, monitoring, security
from coordinated.operator.sidecar_client import HTTP_PORT
from coordinated.operator.spec import ClusterSpec

CHART = REPO / "charts" / "coordinated-cluster"
CRD = REPO / "crds" / "coordinatedclusters.coordinated.dev.yaml"
KUBE_VERSION = "1.29.0"


@pytest.fixture(scope="module")
def tools(installed_tools: dict[str, Path]) -> dict[str, Path]:
    return installed_tools


@pytest.fixture(scope="module")
def schema_dir(tools: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    swagger = json.loads(tools["K8S_OPENAPI"].read_text())
    core_kinds = ("Service", "ServiceAccount", "Pod", "Secret", "ConfigMap", "PersistentVolumeClaim")
    builtin_kinds = {("v1", kind) for kind in core_kinds} | {
        ("apps/v1", "Deployment"),
        ("apps/v1", "StatefulSet"),
        ("policy/v1", "PodDisruptionBudget"),
        ("batch/v1", "CronJob"),
        ("networking.k8s.io/v1", "NetworkPolicy"),
        ("coordination.k8s.io/v1", "Lease"),
        ("scheduling.k8s.io/v1", "PriorityClass"),
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
        *{
            ("rbac.authorization.k8s.io/v1", kind)
            for kind in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
        },
    }
    schemas = builtin_schemas(swagger, builtin_kinds)
    assert len(schemas) == len(builtin_kinds), "a built-in kind is missing from the OpenAPI spec"
    monitoring = ("servicemonitors", "podmonitors", "prometheusrules")
    crd_files = [CRD, *sorted(f for kind in monitoring for f in tools["MONITORING_CRDS"].glob(f"*_{kind}.yaml"))]
    schemas |= crd_schemas(load_yaml_documents(crd_files))
    return write_schemas(tmp_path_factory.mktemp("schemas"), schemas)


def kubeconform(tools: dict[str, Path], schema_dir: Path, documents: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(tools["KUBECONFORM"]),
            "-strict",
            "-summary",
            "-schema-location",
            f"{schema_dir}/{SCHEMA_LOCATION_TEMPLATE}",
            "-",
        ],
        input=documents,
        capture_output=True,
        text=True,
    )


def helm(tools: dict[str, Path], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(tools["HELM"]), *args], capture_output=True, text=True)


def test_chart_ships_the_same_crd() -> None:
    assert (CHART / "crds" / CRD.name).read_text() == CRD.read_text()


def test_helm_lint(tools: dict[str, Path]) -> None:
    result = helm(tools, "lint", "--strict", str(CHART), "--kube-version", KUBE_VERSION)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    "values",
    [
        [],
        ["--set", "serviceMonitor.enabled=true", "--set", "watchNamespaces={team-a,team-b}"],
        ["--set", "metrics.enabled=false", "--set", "operator.logLevel=--verbose"],
    ],
    ids=["defaults", "servicemonitor-and-namespaces", "no-metrics"],
)
def test_helm_template_validates(tools: dict[str, Path], schema_dir: Path, values: list[str]) -> None:
    rendered = helm(
        tools, "template", "demo", str(CHART), "--namespace", "ops", "--include-crds",
        "--kube-version", KUBE_VERSION, *values,
    )  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    result = kubeconform(tools, schema_dir, rendered.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    kinds = {doc["kind"] for doc in yaml.safe_load_all(rendered.stdout) if doc}
    assert {"CustomResourceDefinition", "Deployment", "Pod"} <= kinds


def test_values_schema_rejects_bad_values(tools: dict[str, Path]) -> None:
    result = helm(tools, "template", "demo", str(CHART), "--kube-version", KUBE_VERSION, "--set", "metrics.port=0")
    assert result.returncode != 0
    assert "port" in result.stderr


def test_kubeconform_rejects_an_invalid_resource(tools: dict[str, Path], schema_dir: Path) -> None:
    """Guards the guard: a broken manifest must fail, or the validations above prove nothing."""
    bad_cluster = {
        "apiVersion": "coordinated.dev/v1alpha1",
        "kind": "CoordinatedCluster",
        "metadata": {"name": "bad"},
        "spec": {"replicas": 100, "storage": {"sise": "1Gi"}},
    }
    bad_service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}, "spec": {"portz": []}}
    for document in (bad_cluster, bad_service):
        result = kubeconform(tools, schema_dir, yaml.safe_dump(document))
        assert result.returncode != 0, f"accepted: {document}"


def test_examples_validate(tools: dict[str, Path], schema_dir: Path) -> None:
    examples = sorted((REPO / "examples").glob("*.yaml"))
    assert examples
    for example in examples:
        result = kubeconform(tools, schema_dir, example.read_text())
        assert result.returncode == 0, f"{example.name}: {result.stdout}{result.stderr}"


def _operator_manifests(body: dict[str, Any]) -> list[dict[str, Any]]:
    spec = ClusterSpec.from_resource(body)
    tls_source = manifests.tls_source_of(spec, cert_manager_available=False)
    built = manifests.desired_children(
        spec, replicas=3, initial_master_nodes=("a-0", "a-1", "a-2"), health="green", voters=3, tls_source=tls_source
    )
    now = datetime.datetime.now(datetime.UTC)
    ca = certificates.generate_ca("ca", now, datetime.timedelta(days=10))
    planned = security.plan_certificates(spec, ca, {}, manifests.pod_names(spec, 3), now)
    tokens = {suffix: f"{suffix}-token-0123456789" for suffix in manifests.TOKEN_ROLES}
    secured = [
        security.ca_secret(spec, ca),
        security.certificates_secret(spec, planned.data),
        security.tokens_file_secret(spec, tokens),
        *(security.token_secret(spec, suffix, token) for suffix, token in tokens.items()),
        security.network_policy(spec, security.operator_peer("ops", {"app": "op"})),
    ]
    return [*built, manifests.transport_secret(spec, "s3cret"), *(m for m in secured if m is not None)]


def test_operator_manifests_validate(tools: dict[str, Path], schema_dir: Path) -> None:
    for example in sorted((REPO / "examples").glob("*.yaml")):
        for body in load_yaml_documents([example]):
            if body.get("kind") != "CoordinatedCluster":
                continue
            body["metadata"].setdefault("namespace", "default")
            body["metadata"]["uid"] = "0000-1111"
            built = _operator_manifests(body)
            assert {"NetworkPolicy", "Secret", "StatefulSet"} <= {manifest["kind"] for manifest in built}
            documents = "---\n".join(yaml.safe_dump(manifest) for manifest in built)
            result = kubeconform(tools, schema_dir, documents)
            assert result.returncode == 0, f"{example.name}: {result.stdout}{result.stderr}"


def test_operator_rbac_is_least_privilege(tools: dict[str, Path]) -> None:
    rendered = helm(tools, "template", "demo", str(CHART), "--namespace", "ops", "--kube-version", KUBE_VERSION)
    assert rendered.returncode == 0, rendered.stderr
    documents = [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]
    role = next(
        doc
        for doc in documents
        if doc["kind"] == "ClusterRole" and doc["metadata"]["name"] == "demo-coordinated-cluster"
    )
    verbs = {
        (group, resource): set(rule["verbs"])
        for rule in role["rules"]
        if "nonResourceURLs" not in rule
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    # Non-resource URLs: the API server's OIDC discovery (its issuer and ServiceAccount signing keys), read only.
    urls = [rule for rule in role["rules"] if "nonResourceURLs" in rule]
    assert urls == [{"nonResourceURLs": ["/.well-known/openid-configuration", "/openid/v1/jwks"], "verbs": ["get"]}]
    # Secrets are read by name only: the operator cannot list a namespace's other Secrets.
    assert verbs[("", "secrets")] == {"get", "create", "patch"}
    assert verbs[("", "pods")] == {"list", "watch", "delete"}  # delete: the rolling restart
    # create: the snapshot volume; patch: a larger storage.size grows the data claims.
    assert verbs[("", "persistentvolumeclaims")] == {"list", "create", "patch"}
    # delete: re-creating the StatefulSet with a larger claim template, orphaning its pods and claims.
    assert verbs[("apps", "statefulsets")] == {"get", "create", "patch", "delete"}
    assert verbs[("storage.k8s.io", "storageclasses")] == {"get"}  # whether a class can expand
    assert verbs[("", "nodes")] == {"get"}  # the zone each pod runs in
    assert verbs[("networking.k8s.io", "networkpolicies")] == {"create", "patch", "delete"}
    assert verbs[("cert-manager.io", "certificates")] == {"create", "patch"}
    assert not any("*" in granted or "escalate" in granted or "bind" in granted for granted in verbs.values())
    deployment = next(doc for doc in documents if doc["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    # The NetworkPolicies admit exactly the operator's pods: its labels and namespace reach the operator.
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    expected = ",".join(f"{key}={value}" for key, value in deployment["spec"]["selector"]["matchLabels"].items())
    assert f"--operator-labels={expected}" in container["args"]
    assert all(labels[key] == value for key, value in deployment["spec"]["selector"]["matchLabels"].items())
    env = {entry["name"]: entry for entry in container["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"


SPARK_OPERATOR_KINDS = "SparkApplication,ScheduledSparkApplication"


def test_spark_audit_templates_validate_and_follow_spark_jobs_k8s(tools: dict[str, Path], schema_dir: Path) -> None:
    """The audit manifests of spark-jobs/k8s/ are templated into the chart; their kinds and names match.

    The spark-operator's CRDs are not available offline, so kubeconform skips those two kinds.
    """
    rendered = helm(
        tools, "template", "demo", str(CHART), "--namespace", "ops", "--kube-version", KUBE_VERSION,
        "--set", "sparkAudit.enabled=true", "--set", "sparkAudit.runOnce=true",
        "--set", "sparkAudit.cluster.name=orders", "--set", "sparkAudit.cluster.replicas=5",
    )  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    result = subprocess.run(
        [
            str(tools["KUBECONFORM"]), "-strict", "-summary", "-skip", SPARK_OPERATOR_KINDS,
            "-schema-location", f"{schema_dir}/{SCHEMA_LOCATION_TEMPLATE}", "-",
        ],
        input=rendered.stdout, capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    documents = [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]
    scheduled = next(doc for doc in documents if doc["kind"] == "ScheduledSparkApplication")
    arguments = scheduled["spec"]["template"]["arguments"]
    urls = arguments[1].split(",")
    # The operator's defaults: TLS with its CA, and tokens; the audit trusts the CA and sends the reader token.
    assert urls == [f"https://orders-{i}.orders-headless.ops.svc:9200" for i in range(5)]
    assert arguments[arguments.index("--ca-file") + 1] == "/etc/coordinated/tls/ca.crt"
    driver = scheduled["spec"]["template"]["driver"]
    token = next(env for env in driver["env"] if env["name"] == "COORDINATED_TOKEN")
    assert token["valueFrom"]["secretKeyRef"] == {"name": "orders-reader", "key": "token"}
    (ca,) = [volume for volume in scheduled["spec"]["template"]["volumes"] if volume["name"] == "ca"]
    assert ca["secret"] == {"secretName": "orders-certs", "items": [{"key": "ca.crt", "path": "ca.crt"}]}
    executor_env = {env["name"] for env in scheduled["spec"]["template"]["executor"]["env"]}
    assert "COORDINATED_TOKEN" not in executor_env  # the driver ships it to the fetching tasks
    applications = [doc for doc in documents if doc["kind"] in ("SparkApplication", "ScheduledSparkApplication")]
    assert_runs_under_the_spark_operator(applications)
    names = {(doc["kind"], doc["metadata"]["name"]) for doc in documents}
    # The plain manifests of spark-jobs/k8s/ hold the same kinds of objects, under other names: applied by hand
    # in the release's namespace they must not collide with the chart's (helm refuses to adopt them).
    source = [doc for doc in load_yaml_documents(sorted((REPO / "spark-jobs" / "k8s").glob("*.yaml")))]
    plain = {(doc["kind"], doc["metadata"]["name"]) for doc in source if doc["kind"] != "Pod"}
    assert {kind for kind, _ in plain} <= {kind for kind, _ in names}
    assert plain.isdisjoint(names), sorted(plain & names)
    assert_runs_under_the_spark_operator([doc for doc in source if "Spark" in doc["kind"]])
    claim = next(doc for doc in documents if doc["kind"] == "PersistentVolumeClaim")
    assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    mounted = {volume["persistentVolumeClaim"]["claimName"] for volume in scheduled["spec"]["template"]["volumes"]
               if "persistentVolumeClaim" in volume}  # fmt: skip
    assert mounted == {claim["metadata"]["name"]}
    account = next(doc for doc in documents if doc["kind"] == "ServiceAccount" and "audit" in doc["metadata"]["name"])
    assert scheduled["spec"]["template"]["driver"]["serviceAccount"] == account["metadata"]["name"]


def assert_runs_under_the_spark_operator(applications: list[dict[str, Any]]) -> None:
    """The spark-operator runs spark-submit in its own container: no file of the project's image may be named."""
    assert applications
    for application in applications:
        spec = application["spec"].get("template", application["spec"])
        text = yaml.safe_dump(spec)
        assert "podTemplateFile" not in text and "/opt/coordinated" not in text, application["metadata"]["name"]
        for role in ("driver", "executor"):
            (container,) = spec[role]["template"]["spec"]["containers"]
            assert container["command"] == ["/usr/local/bin/spark-entrypoint.sh"]
            assert spec[role]["podSecurityContext"]["runAsNonRoot"] is True
        assert {mount["name"] for mount in spec["driver"]["volumeMounts"]} - {"ca"} == {"reports", "spark-local"}


def test_spark_audit_of_a_cluster_without_security(tools: dict[str, Path]) -> None:
    rendered = helm(
        tools, "template", "demo", str(CHART), "--namespace", "ops", "--kube-version", KUBE_VERSION,
        "--set", "sparkAudit.enabled=true", "--set", "sparkAudit.cluster.tls=false",
        "--set", "sparkAudit.cluster.auth=false",
    )  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    scheduled = next(doc for doc in yaml.safe_load_all(rendered.stdout) if doc and "Spark" in doc["kind"])
    template = scheduled["spec"]["template"]
    assert template["arguments"][1].startswith("http://") and "--ca-file" not in template["arguments"]
    assert "COORDINATED_TOKEN" not in yaml.safe_dump(template)
    assert all(volume["name"] != "ca" for volume in template["volumes"])


def admitted_to_the_client_port(spec: ClusterSpec, labels: dict[str, str]) -> bool:
    """Whether the operator's NetworkPolicy lets a pod with these labels, in the cluster's namespace, reach
    the sidecars' client port."""
    policy = security.network_policy(spec, operator=None)
    assert policy is not None
    (client_rule,) = [rule for rule in policy["spec"]["ingress"] if rule["ports"][0]["port"] == HTTP_PORT]
    return any(
        set(peer["podSelector"]["matchLabels"].items()) <= set(labels.items())
        for peer in client_rule["from"]
        if "namespaceSelector" not in peer
    )


def test_the_audit_pods_are_peers_the_clusters_network_policy_admits(tools: dict[str, Path]) -> None:
    """The audit's fetching tasks run on the driver and the executors: every audit pod, of the chart's
    SparkApplications and of the plain manifests, must be let in by the policy the operator writes for a
    cluster with default settings (without it, the audit times out wherever policies are enforced)."""
    rendered = helm(
        tools, "template", "demo", str(CHART), "--namespace", "ops", "--kube-version", KUBE_VERSION,
        "--set", "sparkAudit.enabled=true", "--set", "sparkAudit.runOnce=true",
        "--set", "sparkAudit.cluster.name=orders",
    )  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    charted = [doc for doc in yaml.safe_load_all(rendered.stdout) if doc and "Spark" in doc["kind"]]
    plain = [
        doc
        for doc in load_yaml_documents(sorted((REPO / "spark-jobs" / "k8s").glob("*.yaml")))
        if "Spark" in doc["kind"]
    ]
    for applications, cluster_name in ((charted, "orders"), (plain, "coordinated")):
        spec = ClusterSpec.from_resource(
            {"metadata": {"name": cluster_name, "namespace": "ops", "uid": "u"}, "spec": {}}
        )
        assert applications
        for application in applications:
            template = application["spec"].get("template", application["spec"])
            for role in ("driver", "executor"):
                labels = template[role]["labels"]
                assert admitted_to_the_client_port(spec, labels), (application["metadata"]["name"], role, labels)


MONITORING = ["--set", "podMonitor.enabled=true", "--set", "prometheusRule.enabled=true"]
MONITORING += ["--set", "serviceMonitor.enabled=true"]  # the operator's absence alert needs its scrape
MONITORING += [
    "--set",
    "grafanaDashboard.enabled=true",
    "--set",
    "prometheusRule.runbookBaseURL=https://x/monitoring.md",
]


def _metric_names() -> set[str]:
    """Every series name the sidecar and the operator expose (counters get _total, histograms _bucket...)."""
    observability = REPO / "sidecar" / "coordinated" / "sidecar" / "observability"
    sources = [observability / "metrics.py", observability / "certificates.py", REPO / "operator" / "coordinated" / "operator" / "metrics.py"]  # fmt: skip
    names: set[str] = set()
    for source in sources:
        text = source.read_text()
        for kind, name in re.findall(r'(Counter|Gauge|Histogram)(?:MetricFamily)?\(\s*"([a-z_]+)"', text):
            suffixes = {"Counter": ["_total"], "Gauge": [""], "Histogram": ["_bucket", "_sum", "_count"]}[kind]
            names |= {name + suffix for suffix in suffixes}
    # The kubelet's, for the data volumes (kube-prometheus scrapes them).
    return names | {"up", "kubelet_volume_stats_available_bytes", "kubelet_volume_stats_capacity_bytes"}


def _series_in(expr: str) -> set[str]:
    words = set(re.findall(r"\b([a-z_]+)(?=\{|\[|\s*\)|\s*$|\s*==|\s*>)", expr))
    return {word for word in words if word.startswith(("coordinated_", "kubelet_")) or word == "up"}


def test_monitoring_validates_against_the_prometheus_operator_crds(tools: dict[str, Path], schema_dir: Path) -> None:
    rendered = helm(
        tools, "template", "demo", str(CHART), "--namespace", "ops", "--kube-version", KUBE_VERSION, *MONITORING
    )
    assert rendered.returncode == 0, rendered.stderr
    result = kubeconform(tools, schema_dir, rendered.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    documents = {doc["kind"]: doc for doc in yaml.safe_load_all(rendered.stdout) if doc}
    assert "PrometheusRule" in documents and "PodMonitor" not in documents  # the operator makes them, per cluster
    deployment = documents["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert "--pod-monitors" in deployment["args"]


def operator_pod_monitor(name: str = "orders", namespace: str = "shop", **fields: Any) -> dict[str, Any]:
    """The PodMonitor the operator makes for a cluster (monitoring.py), as for TLS from its own CA by default."""
    spec = ClusterSpec.from_resource({"metadata": {"name": name, "namespace": namespace, "uid": "u"}, "spec": fields})
    tls_source = manifests.tls_source_of(spec, cert_manager_available=True) if spec.tls.enabled else None
    return monitoring.pod_monitor(spec, tls_source, {"release": "kube-prometheus"})


def test_sidecar_series_carry_no_pod_ip() -> None:
    monitor = operator_pod_monitor()
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    targets = {rule.get("targetLabel"): rule for rule in endpoint["relabelings"]}
    assert targets["instance"]["sourceLabels"] == ["__meta_kubernetes_pod_name"]
    assert targets["cluster"]["sourceLabels"] == ["__meta_kubernetes_pod_label_app_kubernetes_io_instance"]
    assert targets["job"]["replacement"] == "coordinated-sidecar"  # what the alerts select
    assert "pod_ip" not in yaml.safe_dump(endpoint)
    # No series is dropped: the sidecar labels peers by node name (see the transport tests).
    assert "metricRelabelings" not in endpoint
    assert monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "node"


def test_the_operators_pod_monitors_validate_against_the_crd(tools: dict[str, Path], schema_dir: Path) -> None:
    monitors = [
        operator_pod_monitor(),
        operator_pod_monitor("issued", tls={"issuerRef": {"name": "ca-issuer"}}),
        operator_pod_monitor("legacy", tls={"enabled": False}, auth={"enabled": False}),
    ]
    result = kubeconform(tools, schema_dir, yaml.safe_dump_all(monitors))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Valid: 3" in result.stdout, result.stdout
    broken = yaml.safe_load(yaml.safe_dump(monitors[0]))
    broken["spec"]["podMetricsEndpoints"][0]["authorization"]["credentials"] = "orders-reader"  # not a key ref
    assert kubeconform(tools, schema_dir, yaml.safe_dump(broken)).returncode != 0, "authorization is not checked"


def test_a_secured_cluster_is_scraped_over_https_with_its_ca_and_reader_token() -> None:
    orders = operator_pod_monitor(monitoring={"podMonitor": {"labels": {"team": "shop"}, "interval": "15s"}})
    # In the cluster's namespace: the Prometheus Operator reads the CA and the token only from there.
    assert orders["metadata"]["namespace"] == "shop" and orders["metadata"]["name"] == "orders-sidecars"
    assert orders["metadata"]["ownerReferences"][0]["kind"] == "CoordinatedCluster"  # deleted with the cluster
    assert {"release": "kube-prometheus", "team": "shop"}.items() <= orders["metadata"]["labels"].items()
    assert orders["spec"]["namespaceSelector"] == {"matchNames": ["shop"]}
    assert orders["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"] == "orders"
    (endpoint,) = orders["spec"]["podMetricsEndpoints"]
    assert endpoint["scheme"] == "https" and endpoint["interval"] == "15s"
    assert endpoint["tlsConfig"]["ca"] == {"secret": {"name": "orders-certs", "key": "ca.crt"}}
    assert endpoint["authorization"] == {"type": "Bearer", "credentials": {"name": "orders-reader", "key": "token"}}
    # Targets are pod IPs: the certificate is checked against a name every pod's certificate carries.
    server_name = endpoint["tlsConfig"]["serverName"]
    spec = ClusterSpec.from_resource({"metadata": {"name": "orders", "namespace": "shop", "uid": "u"}, "spec": {}})
    for pod in manifests.pod_names(spec, 3):
        assert server_name in manifests.pod_certificate_dns_names(spec, pod)
    assert server_name in manifests.wildcard_dns_names(spec)  # cert-manager's one certificate too
    issued = operator_pod_monitor("issued", tls={"issuerRef": {"name": "ca-issuer"}})["spec"]["podMetricsEndpoints"]
    assert issued[0]["tlsConfig"]["ca"]["secret"]["name"] == "issued-cert-manager-tls"
    # A cluster with security off is scraped in plain HTTP.
    (legacy,) = operator_pod_monitor("legacy", tls={"enabled": False}, auth={"enabled": False})["spec"][
        "podMetricsEndpoints"
    ]
    assert not {"scheme", "tlsConfig", "authorization"} & set(legacy)


def test_the_chart_renders_offline_without_a_kube_version(tools: dict[str, Path]) -> None:
    """GitOps pipelines render with `helm template` and no cluster: helm then assumes Kubernetes 1.20, and the
    chart's kubeVersion constraint refused to render."""
    rendered = helm(tools, "template", "demo", str(CHART), *MONITORING)
    assert rendered.returncode == 0, rendered.stderr
    assert "Deployment" in {doc["kind"] for doc in yaml.safe_load_all(rendered.stdout) if doc}


def test_alerts_have_runbooks_and_use_existing_metrics(tools: dict[str, Path]) -> None:
    rendered = helm(tools, "template", "demo", str(CHART), "--kube-version", KUBE_VERSION, *MONITORING)
    documents = [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]
    rule = next(doc for doc in documents if doc["kind"] == "PrometheusRule")
    alerts = [entry for group in rule["spec"]["groups"] for entry in group["rules"]]
    runbooks = (REPO / "docs" / "monitoring.md").read_text()
    known = _metric_names()
    assert {alert["alert"] for alert in alerts} >= {
        "CoordinatedClusterNoMaster",
        "CoordinatedClusterQuorumAtRisk",
        "CoordinatedClusterNodeLagging",
        "CoordinatedClusterPublicationFailures",
        "CoordinatedClusterReconcileStuck",
    }
    for alert in alerts:
        assert f"### {alert['alert']}" in runbooks, f"no runbook paragraph for {alert['alert']}"
        assert alert["annotations"]["runbook_url"] == f"https://x/monitoring.md#{alert['alert'].lower()}"
        used = _series_in(alert["expr"])
        assert used and used <= known, (alert["alert"], used - known)

    dashboard_map = next(
        doc for doc in documents if doc["kind"] == "ConfigMap" and "dashboard" in doc["metadata"]["name"]
    )
    dashboard = json.loads(dashboard_map["data"]["coordinated-cluster.json"])
    assert dashboard_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    titles = {panel["title"] for panel in dashboard["panels"]}
    assert {"Term", "Master", "Commit latency", "Applied version lag", "Elections won", "Failovers"} <= titles
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            used = _series_in(target["expr"])
            assert used and used <= known, (panel["title"], used - known)


def test_the_operators_non_preempting_class_validates(tools: dict[str, Path], schema_dir: Path) -> None:
    from coordinated.operator import placement

    twin = placement.nonpreempting_class(2_000_000_000)
    result = kubeconform(tools, schema_dir, yaml.safe_dump(twin))
    assert result.returncode == 0 and "Valid: 1" in result.stdout, result.stdout + result.stderr
