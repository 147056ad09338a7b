"""What the e2e tests share: kubectl, the Kubernetes API, the sidecars (through the API server's proxy, so
the same code works on the local harness and on kind), a continuous writer, and bounded waits."""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

GROUP, VERSION, PLURAL = "coordinated.dev", "v1alpha1", "coordinatedclusters"
SIDECAR_PORT = 9200
REPO = Path(__file__).resolve().parents[1]
PROJECT_VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
IMAGE = f"coordinated-cluster:{PROJECT_VERSION}"
T = TypeVar("T")


def kubectl(
    *args: str, check: bool = True, timeout: float = 120, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("kubectl")
    if binary is None:
        raise RuntimeError("kubectl is not on PATH (make e2e-up caches it; `make e2e-test` puts it on PATH)")
    done = subprocess.run([binary, *args], input=stdin, capture_output=True, text=True, timeout=timeout, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return done


def apply(document: dict[str, Any], check: bool = True) -> subprocess.CompletedProcess[str]:
    """`kubectl apply` of one object, as a user would (the API server's messages come back on stderr)."""
    done = kubectl("apply", "-f", "-", stdin=yaml.safe_dump(document), check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"kubectl apply failed: {done.stderr.strip()}")
    return done


def wait_until(what: str, probe: Callable[[], T | None], timeout: float, interval: float = 0.5) -> T:
    """Poll `probe` until it returns something other than None or False; fail naming `what` and the last value."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = probe()
        except (ApiException, HTTPError, OSError) as error:  # the API server or a pod may be restarting
            last = error
        else:
            if last is not None and last is not False:
                return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")


@dataclass
class Reply:
    status: int
    body: Any


class Sidecars:
    """HTTP to the sidecars of one namespace through the API server's pod and service proxy."""

    def __init__(self, namespace: str, api: client.ApiClient | None = None) -> None:
        self.namespace = namespace
        self.api = api or client.ApiClient()

    def request(
        self,
        target: str,
        method: str,
        path: str,
        body: Any = None,
        query: dict[str, str] | None = None,
        timeout: float = 10,
    ) -> Reply:
        """`target` is `pods/NAME` (one sidecar) or `services/NAME` (any Ready one, as an application sees it)."""
        resource = f"/api/v1/namespaces/{self.namespace}/{target}:{SIDECAR_PORT}/proxy/{path.lstrip('/')}"
        try:
            serialized = self.api.param_serialize(
                method,
                resource,
                query_params=list((query or {}).items()),
                header_params={"Content-Type": "application/json", "Accept": "application/json"},
                body=body,
                auth_settings=["BearerToken"],
            )
            response = self.api.call_api(*serialized, _request_timeout=timeout)
            response.read()
            return Reply(response.status, _json(response.data))
        except ApiException as error:  # raised for transport failures; HTTP errors come back as a status
            return Reply(error.status, _json(error.body))
        except HTTPError as error:  # the connection through the API server's proxy broke mid-answer
            return Reply(0, {"error": f"connection broken: {error}"})

    def state(self, pod: str, local: bool = True) -> dict[str, Any]:
        reply = self.request(f"pods/{pod}", "GET", "_cluster/state", query={"local": "true"} if local else None)
        assert reply.status == 200, f"GET /_cluster/state on {pod}: {reply.status} {reply.body}"
        return reply.body

    def master_name(self, pod: str) -> str | None:
        reply = self.request(f"pods/{pod}", "GET", "_cat/master", query={"format": "json"})
        if reply.status != 200 or not reply.body:
            return None
        return reply.body[0].get("node")


def _json(data: bytes | str | None) -> Any:
    if not data:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return data.decode() if isinstance(data, bytes) else data


def remove_cluster(namespace: str, name: str) -> None:
    """Deletes a test's own CoordinatedCluster and the claims that its retention policy keeps, so that the
    tests after it (the uninstall test counts what is left in the namespace) see only their own objects."""
    kubectl("-n", namespace, "delete", "ccl", name, "--ignore-not-found", "--wait=true", timeout=180)
    claims = [
        claim
        for claim in kubectl("-n", namespace, "get", "pvc", "-o", "name").stdout.split()
        if claim.split("/", 1)[-1].startswith(f"data-{name}-")
    ]
    if claims:
        kubectl("-n", namespace, "delete", *claims, "--wait=true", timeout=180)


def cluster_manifest(
    namespace: str,
    name: str,
    replicas: int,
    settings: dict[str, str] | None = None,
    secure: bool = False,
    **spec_fields: Any,
) -> dict:
    """A CoordinatedCluster running the local image (never pulled).

    Not `secure` (the lifecycle tests): TLS, tokens and the NetworkPolicy are off, because these tests reach
    the sidecars through the API server's proxy, in plain HTTP without a token. test_02_security.py runs
    clusters with the defaults (all on) and talks to them from pods, as applications do.
    """
    spec: dict[str, Any] = {"replicas": replicas, "image": IMAGE, "imagePullPolicy": "Never"}
    if not secure:
        spec.update({"tls": {"enabled": False}, "auth": {"enabled": False}, "networkPolicy": {"enabled": False}})
    if settings is not None:
        spec["settings"] = settings
    spec.update(spec_fields)
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "CoordinatedCluster",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def every_key(cluster: Cluster, pod: str) -> dict[str, tuple[Any, int, int]]:
    """Every key of the cluster with its value, version and create_version, read linearizably through `pod`."""
    state = cluster.sidecars.state(pod, local=False)
    found: dict[str, tuple[Any, int, int]] = {}
    for key in state["metadata"]["kv"]:
        reply = cluster.sidecars.request(f"pods/{pod}", "GET", f"_cluster/metadata/{key}")
        assert reply.status == 200, reply
        found[key] = (reply.body["value"], reply.body["version"], reply.body["create_version"])
    return found


def wait_ready(name: str, namespace: str) -> None:
    kubectl("-n", namespace, "wait", "--for=condition=Ready", f"ccl/{name}", "--timeout=300s", timeout=320)


def voting_config(state: dict[str, Any]) -> set[str]:
    """Node names of the committed voting configuration (the state lists ids; nodes maps ids to names)."""
    coordination = state["metadata"]["cluster_coordination"]
    names = {node_id: node["name"] for node_id, node in state["nodes"].items()}
    return {names.get(node_id, node_id) for node_id in coordination["last_committed_config"]}


def committed_ids(state: dict[str, Any]) -> set[str]:
    """The committed voting configuration by node id (a node that lost its data comes back under a new one)."""
    return set(state["metadata"]["cluster_coordination"]["last_committed_config"])


def key_versions(sidecars: Sidecars, target: str, keys: list[str]) -> dict[str, tuple[Any, int, int]]:
    """Each key's (value, version, create_version), read in transactions of 64 gets: one committed state each."""
    found: dict[str, tuple[Any, int, int]] = {}
    for start in range(0, len(keys), 64):
        batch = keys[start : start + 64]
        body = {"compare": [], "success": [{"op": "get", "key": key} for key in batch], "failure": []}
        reply = sidecars.request(target, "POST", "_cluster/metadata/_txn", body)
        for _retry in range(2):  # a read: asked again if the proxied connection broke before its answer came
            if reply.status != 0:
                break
            reply = sidecars.request(target, "POST", "_cluster/metadata/_txn", body)
        assert reply.status == 200 and reply.body["succeeded"], reply
        for result in reply.body["results"]:
            if result["found"]:
                found[result["key"]] = (result["value"], result["version"], result["create_version"])
    return found


def exclusions(state: dict[str, Any]) -> list[Any]:
    return list(state["metadata"]["cluster_coordination"]["voting_config_exclusions"])


class Cluster:
    """One CoordinatedCluster: its resource, status, pods and events."""

    def __init__(self, namespace: str, name: str) -> None:
        self.namespace, self.name = namespace, name
        self.custom = client.CustomObjectsApi()
        self.core = client.CoreV1Api()
        self.sidecars = Sidecars(namespace)

    def resource(self) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.name)

    def status(self) -> dict[str, Any]:
        return self.resource().get("status") or {}

    def condition(self, kind: str) -> dict[str, Any]:
        """The status condition of this type ({} while there is none)."""
        return next((c for c in self.status().get("conditions") or () if c["type"] == kind), {})

    def condition_with_reason(self, kind: str, reason: str) -> dict[str, Any] | None:
        """The condition once it has this reason, else None (a wait_until probe)."""
        found = self.condition(kind)
        return found if found.get("reason") == reason else None

    def pods(self) -> list[client.V1Pod]:
        selector = f"app.kubernetes.io/name=coordinated-cluster,app.kubernetes.io/instance={self.name}"
        return self.core.list_namespaced_pod(self.namespace, label_selector=selector).items

    def ready_pods(self) -> list[str]:
        ready = []
        for pod in self.pods():
            conditions = pod.status.conditions or []
            if pod.metadata.deletion_timestamp is None and any(
                c.type == "Ready" and c.status == "True" for c in conditions
            ):
                ready.append(pod.metadata.name)
        return sorted(ready)

    def events(self, reason: str | None = None) -> list[client.CoreV1Event]:
        found = self.core.list_namespaced_event(
            self.namespace, field_selector=f"involvedObject.name={self.name},involvedObject.kind=CoordinatedCluster"
        ).items
        return [event for event in found if reason is None or event.reason == reason]

    def scale(self, replicas: int) -> None:
        kubectl("-n", self.namespace, "scale", f"ccl/{self.name}", f"--replicas={replicas}")

    def settled(self, replicas: int) -> dict[str, Any] | None:
        """The status once the cluster is Ready at `replicas` with that many voters (odd sizes) and no exclusions."""
        status = self.status()
        expected_voters = replicas if replicas % 2 else replicas - 1
        done = (
            status.get("phase") == "Ready"
            and status.get("replicas") == replicas
            and status.get("readyReplicas") == replicas
            and status.get("voters") == expected_voters
            and not status.get("exclusions")
            and status.get("observedGeneration") == self.resource()["metadata"]["generation"]
        )
        return status if done else None


@dataclass
class ContinuousWriter:
    """Writes a new key through the client Service as fast as answers come, recording what was acknowledged.

    A write that fails or times out may still have been applied; only acknowledged ones must survive."""

    sidecars: Sidecars
    service: str
    prefix: str
    acknowledged: dict[str, int] = field(default_factory=dict)
    ok_times: list[float] = field(default_factory=list)
    failures: int = 0
    started: float = 0.0
    stopped: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> ContinuousWriter:
        # Its own API client: urllib3 pools are not shared across threads here.
        self.sidecars = Sidecars(self.sidecars.namespace, client.ApiClient())
        self.started = time.monotonic()
        self._thread = threading.Thread(target=self._run, name=f"writer-{self.prefix}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(timeout=30)
        self.stopped = time.monotonic()

    def _run(self) -> None:
        sequence = 0
        while not self._stop.is_set():
            key = f"{self.prefix}-{sequence}"
            try:
                reply = self.sidecars.request(
                    f"services/{self.service}", "PUT", f"_cluster/metadata/{key}", {"n": sequence}, {"timeout": "5s"}, 6
                )
            except (HTTPError, OSError):
                reply = Reply(0, None)
            if reply.status == 200:
                self.acknowledged[key] = sequence
                self.ok_times.append(time.monotonic())
            else:
                self.failures += 1
                time.sleep(0.05)
            sequence += 1

    def longest_gap(self) -> float:
        """The longest time without an acknowledged write while the writer ran."""
        times = [self.started, *self.ok_times, self.stopped]
        return max(later - earlier for earlier, later in itertools.pairwise(times))

    def lost(self, state: dict[str, Any]) -> list[str]:
        """Acknowledged keys missing from (or changed in) a committed state."""
        kv = state["metadata"].get("kv") or {}
        return [key for key, n in self.acknowledged.items() if kv.get(key) != {"n": n}]


@dataclass
class SparkSubmitAudit:
    """One run of spark-jobs/k8s/spark-submit.sh: the client's result, the driver pod and its log, the report."""

    submitted: subprocess.CompletedProcess[str]
    elapsed: float
    driver: client.V1Pod
    driver_log: str
    report: dict[str, Any]
    executors: set[str]  # the executor pods seen running

    @property
    def audit_seconds(self) -> float:
        """The audit's own time as its driver printed it: from the Spark session's start (executors already
        registered) to the report, without the pods' start-up."""
        found = re.search(r"^audited \d+ events from \d+ nodes in ([\d.]+)s$", self.driver_log, re.MULTILINE)
        assert found, self.driver_log[-2000:]
        return float(found.group(1))


class ExecutorWatch(threading.Thread):
    """Records the executor pods of `cluster`'s audits that are running, until stopped."""

    def __init__(self, namespace: str, cluster: str) -> None:
        super().__init__(daemon=True)
        self.selector = f"spark-role=executor,coordinated.dev/client={cluster}"
        self.namespace = namespace
        self.seen: set[str] = set()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(1.0):
            listed = kubectl("-n", self.namespace, "get", "pods", "-l", self.selector, "-o", "json", check=False)
            if listed.returncode == 0:
                pods = json.loads(listed.stdout)["items"]
                self.seen |= {p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Running"}

    def stop(self) -> set[str]:
        self.done.set()
        self.join(timeout=30)
        return self.seen


def run_spark_submit_audit(cluster: Cluster, replicas: int, **settings: str) -> SparkSubmitAudit:
    """spark-submit.sh in cluster mode against `cluster`, as a user runs it (rbac.yaml applied first); `settings`
    are the script's environment (TLS, AUTH, ...). Asserts that the driver succeeded, then reads the report."""
    namespace = cluster.namespace
    kubectl("-n", namespace, "apply", "-f", str(REPO / "spark-jobs" / "k8s" / "rbac.yaml"))
    driver_pod = f"coordinated-audit-{cluster.name}-driver"
    kubectl("-n", namespace, "delete", "pod", driver_pod, "--ignore-not-found", "--wait=true")
    environment = {
        **os.environ,
        # spark-submit from the dev virtualenv (pyspark) is the client; the image runs driver and executors.
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "NAMESPACE": namespace,
        "CLUSTER": cluster.name,
        "REPLICAS": str(replicas),
        "IMAGE": IMAGE,
        "EXECUTORS": "1",
        # The script's default CPU requests (a quarter core per pod) fit the e2e node's two cores.
        "SPARK_SUBMIT_EXTRA": f"--conf spark.kubernetes.driver.pod.name={driver_pod}",
        **settings,
    }
    watch = ExecutorWatch(namespace, cluster.name)
    watch.start()
    started = time.monotonic()
    try:
        submitted = subprocess.run(
            ["bash", str(REPO / "spark-jobs" / "k8s" / "spark-submit.sh")],
            env=environment,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
    finally:
        elapsed = time.monotonic() - started
        executors = watch.stop()
    driver_log = kubectl("-n", namespace, "logs", driver_pod, check=False).stdout
    assert submitted.returncode == 0, f"spark-submit failed:\n{submitted.stderr[-4000:]}\n{driver_log[-4000:]}"
    # The script found the driver's exit code (spark-submit alone exits 0 whatever the driver did).
    assert "exit code is unknown" not in submitted.stderr, submitted.stderr[-2000:]
    driver = cluster.core.read_namespaced_pod(driver_pod, namespace)
    assert driver.status.phase == "Succeeded", f"driver {driver.status.phase}:\n{driver_log[-4000:]}"
    assert "one-master-per-term" in driver_log and "VIOLATION" not in driver_log, driver_log[-4000:]
    report = read_report(namespace, f"/reports/{cluster.name}/audit-report.json")
    return SparkSubmitAudit(submitted, elapsed, driver, driver_log, report, executors)


@contextmanager
def on_reports_volume(namespace: str, *, writable: bool = False) -> Iterator[Callable[..., str]]:
    """A pod that mounts the audit's PVC, as a user would use one; yields `run(*command)`, which runs a command
    in it (kubectl exec) and returns its output. The pod is deleted afterwards."""
    name = "audit-volume-" + ("writer" if writable else "reader")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "securityContext": {"runAsNonRoot": True, "runAsUser": 185, "fsGroup": 185},
            "containers": [
                {
                    "name": "shell",
                    "image": IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sleep", "900"],
                    "volumeMounts": [{"name": "reports", "mountPath": "/reports", "readOnly": not writable}],
                }
            ],
            "volumes": [{"name": "reports", "persistentVolumeClaim": {"claimName": "coordinated-audit-reports"}}],
        },
    }
    apply(pod)

    def run(*command: str, timeout: float = 120) -> str:
        return kubectl("-n", namespace, "exec", name, "--", *command, timeout=timeout).stdout

    try:
        kubectl("-n", namespace, "wait", "--for=condition=Ready", f"pod/{name}", "--timeout=120s", timeout=130)
        yield run
    finally:
        kubectl("-n", namespace, "delete", "pod", name, "--wait=false", check=False)


def read_report(namespace: str, path: str) -> dict[str, Any]:
    """Retrieve a report from the audit's PVC the way a user would: a pod that mounts it, and kubectl exec."""
    with on_reports_volume(namespace) as run:
        loaded: dict[str, Any] = json.loads(run("cat", path))
        return loaded
