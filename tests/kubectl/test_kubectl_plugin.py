"""The kubectl plugin without a cluster: its argument handling and exit codes, the recover plan and its dry-run
text, and that its HTTP goes through the port-forward backend."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from kubernetes import client as kube_client
from kubernetes.client.exceptions import ApiException

from coordinated.ctl.failures import Failed, Unreachable
from coordinated.kubectl.kube import is_sidecar_pod, ordinal_key
from coordinated.kubectl.main import main
from coordinated.kubectl.plugin import plugin, status_report
from coordinated.kubectl.recover import Facts, Progress, Step, StepFailed, job_manifest, plan, run
from coordinated.kubectl.tunnel import http_client, pod_address

OK, FAILED, BAD_INPUT, UNREACHABLE = 0, 1, 2, 3

FACTS = Facts("prod", "demo", survivor=1, lost=(0, 2), image="coordinated-cluster:0.2.0", pull_policy="Never")


def test_the_recover_plan_is_the_documented_procedure_in_order() -> None:
    steps = plan(FACTS)
    titles = [step.title for step in steps]
    assert [t.split(" ")[0] for t in titles] == [
        "pause", "keep", "stop", "make", "delete", "record", "start", "resume", "wait",
    ]  # fmt: skip
    text = "\n".join(command for step in steps for command in step.commands)
    assert "kubectl -n prod annotate ccl/demo coordinated.dev/pause=true --overwrite" in text
    assert '"whenScaled":"Retain"' in text
    assert "kubectl -n prod scale sts/demo --replicas=0" in text
    assert "wait --for=delete pod/demo-0 pod/demo-1 pod/demo-2" in text
    assert "delete pvc data-demo-0 data-demo-2 --wait=true" in text  # every voter's claim but the survivor's
    assert "data-demo-1" not in text.split("delete pvc", 1)[1].split("\n", 1)[0]
    assert "coordinated.dev/cluster-uuid=$NEW_UUID" in text
    assert "scale sts/demo --replicas=2" in text  # the survivor and the empty pod below it
    assert "wait --for=condition=Ready pod/demo-1" in text
    assert "annotate ccl/demo coordinated.dev/pause-" in text


def test_the_bootstrap_job_mounts_only_the_survivors_claim_as_the_sidecars_user() -> None:
    job = job_manifest(FACTS)
    pod = job["spec"]["template"]["spec"]
    assert job["metadata"] == {"name": "demo-unsafe-bootstrap", "namespace": "prod"}
    assert job["spec"]["backoffLimit"] == 0 and pod["restartPolicy"] == "Never"
    assert pod["volumes"] == [{"name": "data", "persistentVolumeClaim": {"claimName": "data-demo-1"}}]
    container = pod["containers"][0]
    assert container["args"] == ["node-tool", "unsafe-bootstrap", "--data-dir", "/data", "--yes"]
    assert container["image"] == "coordinated-cluster:0.2.0" and container["imagePullPolicy"] == "Never"
    assert pod["securityContext"]["runAsUser"] == 10001 and pod["securityContext"]["runAsNonRoot"] is True


def test_no_wait_leaves_out_the_last_wait() -> None:
    steps = plan(Facts("prod", "demo", 0, (1, 2), "img", wait_ready=False))
    assert steps[-1].title.startswith("resume")
    assert "delete pvc data-demo-1 data-demo-2" in "\n".join(steps[4].commands)


def test_pod_names_of_a_cluster() -> None:
    assert is_sidecar_pod("demo", "demo-0") and is_sidecar_pod("demo", "demo-nonvoter-3")
    assert not is_sidecar_pod("demo", "demo-snapshot-28001") and not is_sidecar_pod("demo", "demo2-0")
    assert sorted(["demo-nonvoter-0", "demo-10", "demo-2"], key=ordinal_key) == ["demo-2", "demo-10", "demo-nonvoter-0"]


@pytest.mark.parametrize(
    "args",
    [
        ["recover", "demo"],  # --from is required
        ["kv", "put", "demo", "key"],  # VALUE is missing
        ["status"],
        ["kv", "get", "demo", "key", "--endpoints", "http://x:9200"],  # the plugin finds the endpoints itself
        ["snapshot", "save", "demo", "s1", "--location", "/tmp"],  # the cluster's own repository only
        ["nope"],
    ],
)
def test_bad_usage_exits_2(args: list[str]) -> None:
    result = CliRunner().invoke(plugin, args)
    assert result.exit_code == BAD_INPUT, result.output


def test_a_missing_kubeconfig_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["status", "demo", "--kubeconfig", str(tmp_path / "absent")])
    assert code == BAD_INPUT
    err = capsys.readouterr().err
    assert err.startswith("Error: kubeconfig:") and err.count("\n") == 1, err


def test_an_unreachable_api_server_is_one_line_and_exit_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    code = main(["pause", "demo", "--kubeconfig", str(config)])
    err = capsys.readouterr().err
    assert code == UNREACHABLE, err
    assert "cannot reach the Kubernetes API" in err and err.count("\n") == 1 and "Traceback" not in err


def test_http_goes_through_a_port_forward_named_by_the_host() -> None:
    """A pod name is no DNS name: the request reaches the API server's port-forward (here refused) or nothing."""
    configuration = kube_client.Configuration()
    configuration.host = "https://127.0.0.1:9"
    with http_client(kube_client.ApiClient(configuration), "prod") as http, pytest.raises(httpx.ConnectError) as error:
        http.get(f"{pod_address('demo-0')}/")
    assert "port-forward to pod demo-0" in str(error.value)


def test_a_failed_step_stops_the_run_and_prints_the_rest_to_do_by_hand(capsys: pytest.CaptureFixture[str]) -> None:
    done: list[str] = []

    def bootstrap(kube: object, progress: Progress) -> None:
        progress.new_uuid = "uuid-1"
        done.append("bootstrap")

    def failing(kube: object, progress: Progress) -> None:
        raise StepFailed("timed out after 180 s waiting for the lost claims to be deleted")

    steps = [
        Step("bootstrap", ("kubectl apply -f job.yaml",), bootstrap),
        Step("delete the lost claims", ("kubectl delete pvc data-demo-1",), failing),
        Step("record the UUID", ("kubectl annotate ccl/demo coordinated.dev/cluster-uuid=$NEW_UUID",), failing),
    ]
    with pytest.raises(Failed) as stopped:
        run(None, steps)  # type: ignore[arg-type]  # the steps here never use the API
    assert done == ["bootstrap"] and stopped.value.exit_code == FAILED
    assert stopped.value.message.startswith("recover stopped at step 2 (delete the lost claims): timed out")
    err = capsys.readouterr().err
    assert "[1/3] bootstrap" in err and "step 2 failed" in err
    to_do = err.split("to continue by hand, from this step:", 1)[1]
    assert "NEW_UUID=uuid-1" in to_do and "2. delete the lost claims" in to_do and "3. record the UUID" in to_do
    assert "kubectl delete pvc data-demo-1" in to_do and "1. bootstrap" not in to_do


def test_a_step_refused_by_rbac_keeps_exit_3() -> None:
    def forbidden(kube: object, progress: Progress) -> None:
        raise ApiException(status=403, reason="Forbidden")

    with pytest.raises(Unreachable) as stopped:
        run(None, [Step("pause the operator", ("kubectl annotate ...",), forbidden)])  # type: ignore[arg-type]
    assert stopped.value.exit_code == UNREACHABLE and "step 1: not allowed: Forbidden" in stopped.value.message


def test_the_status_report_is_the_endpoint_table_by_pod_then_phase_and_conditions() -> None:
    resource = {
        "metadata": {"name": "demo"},
        "status": {"phase": "Ready", "conditions": [{"type": "Ready", "status": "True", "reason": "Ready"}]},
    }
    rows = [
        {"endpoint": "http://demo-0:9200", "name": "demo-0", "id": "a1", "master": True, "term": 2, "version": 9,
         "voting": True, "applied_lag": 0, "health": "green", "error": None},
        {"endpoint": "http://demo-1:9200", "health": "unreachable", "error": "cannot reach http://demo-1:9200"},
    ]  # fmt: skip
    table = status_report("prod", resource, rows, "table").splitlines()
    assert table[0].split() == [
        "POD",
        "NAME",
        "ID",
        "MASTER",
        "TERM",
        "VERSION",
        "VOTING",
        "APPLIED_LAG",
        "HEALTH",
        "ERROR",
    ]
    assert table[1].split()[:3] == ["demo-0", "demo-0", "a1"] and table[2].split()[:2] == ["demo-1", "-"]
    assert "CoordinatedCluster prod/demo: phase Ready" in table
    assert table[-2].split() == ["TYPE", "STATUS", "REASON", "MESSAGE"] and table[-1].split() == [
        "Ready",
        "True",
        "Ready",
        "-",
    ]
    data = json.loads(status_report("prod", resource, rows, "json"))
    assert data["cluster"] == "demo" and data["namespace"] == "prod" and data["phase"] == "Ready"
    assert [node["pod"] for node in data["nodes"]] == ["demo-0", "demo-1"] and "endpoint" not in data["nodes"][0]


def test_no_kubeconfig_outside_a_pod_names_the_kubeconfig(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(["status", "demo"]) == BAD_INPUT
    assert capsys.readouterr().err.startswith("Error: kubeconfig:")
