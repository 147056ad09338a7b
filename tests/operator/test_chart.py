"""The Helm chart lints, renders, and validates offline with kubeconform against Kubernetes 1.29's schemas
and our CRD; the operator's own manifests and the examples are validated the same way.

The tools are built once by scripts/install-tools.sh (through the Go module proxy) and cached.
"""

from __future__ import annotations

import datetime
import json
import re
import shutil
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
    install_tools,
    load_yaml_documents,
    write_schemas,
)

from coordinated.operator import certificates, manifests, security
from coordinated.operator.spec import ClusterSpec

CHART = REPO / "charts" / "coordinated-cluster"
CRD = REPO / "crds" / "coordinatedclusters.coordinated.dev.yaml"
KUBE_VERSION = "1.29.0"

pytestmark = pytest.mark.skipif(shutil.which("go") is None, reason="building helm and kubeconform needs Go")


@pytest.fixture(scope="module")
def tools() -> dict[str, Path]:
    return install_tools()


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
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    # Secrets are read by name only: the operator cannot list a namespace's other Secrets.
    assert verbs[("", "secrets")] == {"get", "create", "patch"}
    assert verbs[("", "pods")] == {"list", "watch", "delete"}  # delete: the rolling restart
    assert verbs[("", "persistentvolumeclaims")] == {"list", "create"}  # create: the snapshot volume
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
    urls = scheduled["spec"]["template"]["arguments"][1].split(",")
    assert urls == [f"http://orders-{i}.orders-headless.ops.svc:9200" for i in range(5)]
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
        assert {mount["name"] for mount in spec["driver"]["volumeMounts"]} == {"reports", "spark-local"}


MONITORING = ["--set", "podMonitor.enabled=true", "--set", "prometheusRule.enabled=true"]
MONITORING += [
    "--set",
    "grafanaDashboard.enabled=true",
    "--set",
    "prometheusRule.runbookBaseURL=https://x/monitoring.md",
]


def _metric_names() -> set[str]:
    """Every series name the sidecar and the operator expose (counters get _total, histograms _bucket...)."""
    sources = [REPO / "sidecar" / "coordinated" / "sidecar" / "metrics.py", REPO / "operator" / "coordinated" / "operator" / "metrics.py"]  # fmt: skip
    names: set[str] = set()
    for source in sources:
        text = source.read_text()
        for kind, name in re.findall(r'(Counter|Gauge|Histogram)(?:MetricFamily)?\(\s*"([a-z_]+)"', text):
            suffixes = {"Counter": ["_total"], "Gauge": [""], "Histogram": ["_bucket", "_sum", "_count"]}[kind]
            names |= {name + suffix for suffix in suffixes}
    return names | {"up"}


def _series_in(expr: str) -> set[str]:
    words = set(re.findall(r"\b([a-z_]+)(?=\{|\[|\s*\)|\s*$|\s*==|\s*>)", expr))
    return {word for word in words if word.startswith("coordinated_") or word == "up"}


def test_monitoring_validates_against_the_prometheus_operator_crds(tools: dict[str, Path], schema_dir: Path) -> None:
    rendered = helm(
        tools, "template", "demo", str(CHART), "--namespace", "ops", "--kube-version", KUBE_VERSION, *MONITORING
    )
    assert rendered.returncode == 0, rendered.stderr
    result = kubeconform(tools, schema_dir, rendered.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    documents = {doc["kind"]: doc for doc in yaml.safe_load_all(rendered.stdout) if doc}
    assert {"PodMonitor", "PrometheusRule"} <= set(documents)
    guard = dict(documents["PodMonitor"], spec={"podMetricsEndpoints": [{"port": 9200}]})
    assert kubeconform(tools, schema_dir, yaml.safe_dump(guard)).returncode != 0, "the PodMonitor schema is not checked"


def test_sidecar_series_carry_no_pod_ip(tools: dict[str, Path]) -> None:
    rendered = helm(tools, "template", "demo", str(CHART), "--kube-version", KUBE_VERSION, *MONITORING)
    monitor = next(doc for doc in yaml.safe_load_all(rendered.stdout) if doc and doc["kind"] == "PodMonitor")
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    targets = {rule.get("targetLabel"): rule for rule in endpoint["relabelings"]}
    assert targets["instance"]["sourceLabels"] == ["__meta_kubernetes_pod_name"]
    assert targets["cluster"]["sourceLabels"] == ["__meta_kubernetes_pod_label_app_kubernetes_io_instance"]
    assert "pod_ip" not in yaml.safe_dump(endpoint)
    # The one sidecar series labelled by a peer's address is dropped at scrape time.
    (drop,) = endpoint["metricRelabelings"]
    assert drop["action"] == "drop" and re.fullmatch(drop["regex"], "coordinated_transport_sent_bytes_total")
    assert monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "node"


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
