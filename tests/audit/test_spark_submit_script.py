"""spark-jobs/k8s/spark-submit.sh, run with stub `spark-submit` and `kubectl` on PATH that record what they got.

Secure by default, like the operator's clusters and the SparkApplication manifests: https, the reader token
on the driver from its Secret, and only `ca.crt` of the certificates Secret mounted (both through a driver pod
template written for the run); TLS=false / AUTH=false for clusters created without them.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "spark-jobs" / "k8s"
SCRIPT = K8S / "spark-submit.sh"
BASE_TEMPLATE = K8S / "pod-template.yaml"
CA_FILE = "/etc/coordinated/tls/ca.crt"

pytestmark = pytest.mark.usefixtures("processes")  # every test runs the script (bash, with stubs)

# The stubs write into $RECORD: the arguments (NUL-separated) and, while spark-submit "runs", a copy of the
# driver's pod template, which the script removes when it exits.
SPARK_SUBMIT_STUB = r"""#!/usr/bin/env bash
printf '%s\0' "$@" >"$RECORD/spark-submit.args"
for arg in "$@"; do
  case "$arg" in
    spark.kubernetes.driver.podTemplateFile=*)
      echo "${arg#*=}" >"$RECORD/driver-template.path"
      cp "${arg#*=}" "$RECORD/driver-template.yaml" ;;
  esac
done
[[ -z ${STUB_SLEEP:-} ]] || exec sleep "$STUB_SLEEP"  # a run that waits for its driver (killable)
exit "${STUB_EXIT:-0}"
"""
# kubectl: the API server's address, and the exit code of the finished driver (STUB_DRIVER_EXIT).
KUBECTL_STUB = r"""#!/usr/bin/env bash
echo "$*" >>"$RECORD/kubectl.calls"
case "$*" in
  "config view "*) echo "https://apiserver.example:6443" ;;
  *"status.phase=Pending"*) printf '%b' "${STUB_PENDING-}" ;;  # NAME<TAB>PodScheduled status<TAB>message lines
  *" delete pods "*) ;;
  *" get pods "*) printf '%s' "${STUB_DRIVER_EXIT-0}" ;;
  *) exit 1 ;;
esac
"""


@dataclass
class Submitted:
    returncode: int
    stderr: str
    args: list[str]
    record: Path

    def conf(self) -> dict[str, str]:
        """The spark-submit `--conf key=value` pairs."""
        pairs = [self.args[i + 1] for i, arg in enumerate(self.args[:-1]) if arg == "--conf"]
        return dict(pair.split("=", 1) for pair in pairs)

    def audit_args(self) -> list[str]:
        """What follows the application file: the audit's own arguments."""
        return self.args[self.args.index("local:///app/spark-jobs/audit_main.py") + 1 :]

    def option(self, name: str) -> str | None:
        audit = self.audit_args()
        return audit[audit.index(name) + 1] if name in audit else None

    def driver_template(self) -> dict[str, Any]:
        loaded: dict[str, Any] = yaml.safe_load((self.record / "driver-template.yaml").read_text())
        return loaded


def submit(tmp_path: Path, **env: str) -> Submitted:
    stubs, record = tmp_path / "bin", tmp_path / "record"
    stubs.mkdir(parents=True)
    record.mkdir()
    for name, text in (("spark-submit", SPARK_SUBMIT_STUB), ("kubectl", KUBECTL_STUB)):
        (stubs / name).write_text(text)
        (stubs / name).chmod(0o755)
    environment = {
        "PATH": f"{stubs}{os.pathsep}{os.environ['PATH']}",
        "RECORD": str(record),
        "TMPDIR": str(tmp_path),
        "NAMESPACE": "ops",
        "CLUSTER": "orders",
        **env,
    }
    done = subprocess.run(
        ["bash", str(SCRIPT), "--max-examples", "3"], env=environment, capture_output=True, text=True, timeout=60
    )
    args_file = record / "spark-submit.args"
    args = args_file.read_text().split("\0")[:-1] if args_file.exists() else []
    return Submitted(done.returncode, done.stderr, args, record)


def added_by_the_script(template: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """What the driver's template has beyond the shipped one: Secret volumes, their mounts, env from Secrets."""
    (container,) = template["spec"]["containers"]
    volumes = [volume for volume in template["spec"]["volumes"] if "secret" in volume]
    names = {volume["name"] for volume in volumes}
    return {
        "volumes": volumes,
        "mounts": [mount for mount in container["volumeMounts"] if mount["name"] in names],
        "env": [env for env in container["env"] if "secretKeyRef" in env.get("valueFrom", {})],
    }


TOKEN_ENV = {
    "name": "COORDINATED_TOKEN",
    "valueFrom": {"secretKeyRef": {"name": "orders-reader", "key": "token", "optional": True}},
}
CA_VOLUME = {
    "name": "ca",
    "secret": {"secretName": "orders-certs", "optional": True, "items": [{"key": "ca.crt", "path": "ca.crt"}]},
}
CA_MOUNT = {"name": "ca", "mountPath": str(Path(CA_FILE).parent), "readOnly": True}


def test_by_default_the_audit_uses_https_the_clusters_ca_only_and_the_reader_token(tmp_path: Path) -> None:
    submitted = submit(tmp_path, REPLICAS="3")
    assert submitted.returncode == 0, submitted.stderr
    assert submitted.args[submitted.args.index("--master") + 1] == "k8s://https://apiserver.example:6443"
    urls = submitted.option("--from-cluster")
    assert urls == ",".join(f"https://orders-{i}.orders-headless.ops.svc:9200" for i in range(3))
    assert submitted.option("--ca-file") == CA_FILE
    assert submitted.audit_args()[-2:] == ["--max-examples", "3"]  # the caller's arguments still come last
    conf = submitted.conf()
    # Never spark.kubernetes.*.secrets.*: that mounts every key of a Secret, the pods' private keys included.
    assert not [key for key in conf if ".secrets." in key]
    # The NetworkPolicy's default client peer.
    assert conf["spark.kubernetes.driver.label.coordinated.dev/client"] == "orders"
    assert conf["spark.kubernetes.executor.label.coordinated.dev/client"] == "orders"

    # The driver gets the reader token and only the CA's certificate; it ships both to the fetching tasks.
    template = submitted.driver_template()
    added = added_by_the_script(template)
    assert added == {"volumes": [CA_VOLUME], "mounts": [CA_MOUNT], "env": [TOKEN_ENV]}
    # Otherwise the driver's template is the shipped one; the executors use that one as it is.
    template["spec"]["volumes"].remove(CA_VOLUME)
    template["spec"]["containers"][0]["volumeMounts"].remove(CA_MOUNT)
    template["spec"]["containers"][0]["env"].remove(TOKEN_ENV)
    assert template == yaml.safe_load(BASE_TEMPLATE.read_text())
    assert conf["spark.kubernetes.executor.podTemplateFile"] == str(BASE_TEMPLATE)
    # The generated template lived for the run only.
    assert conf["spark.kubernetes.driver.podTemplateFile"] != str(BASE_TEMPLATE)
    assert not Path(conf["spark.kubernetes.driver.podTemplateFile"]).exists()


def test_the_opt_out_is_plain_http_without_token_or_ca(tmp_path: Path) -> None:
    submitted = submit(tmp_path, TLS="false", AUTH="false", REPLICAS="2", APISERVER="https://given:6443")
    assert submitted.returncode == 0, submitted.stderr
    assert submitted.option("--from-cluster") == ",".join(
        f"http://orders-{i}.orders-headless.ops.svc:9200" for i in range(2)
    )
    assert submitted.option("--ca-file") is None
    assert not [key for key in submitted.conf() if "secretKeyRef" in key or ".secrets." in key]
    assert submitted.conf()["spark.kubernetes.driver.podTemplateFile"] == str(BASE_TEMPLATE)
    assert added_by_the_script(submitted.driver_template()) == {"volumes": [], "mounts": [], "env": []}
    # APISERVER given: kubectl is not asked for it.
    calls = tmp_path / "record" / "kubectl.calls"
    assert "config view" not in (calls.read_text() if calls.exists() else "")


def test_tls_and_tokens_are_chosen_separately_and_the_ca_secret_can_be_named(tmp_path: Path) -> None:
    # A cluster with cert-manager certificates (NAME-cert-manager-tls) and tokens off.
    submitted = submit(tmp_path / "tls", AUTH="false", CA_SECRET="orders-cert-manager-tls", REPLICAS="1")
    assert submitted.returncode == 0, submitted.stderr
    assert submitted.option("--from-cluster") == "https://orders-0.orders-headless.ops.svc:9200"
    assert submitted.option("--ca-file") == CA_FILE
    added = added_by_the_script(submitted.driver_template())
    assert added["env"] == [] and [volume["secret"]["secretName"] for volume in added["volumes"]] == [
        "orders-cert-manager-tls"
    ]
    # Tokens without TLS, from a Secret of another name.
    submitted = submit(tmp_path / "auth", TLS="false", TOKEN_SECRET="audit-token", REPLICAS="1")
    assert submitted.returncode == 0, submitted.stderr
    assert submitted.option("--from-cluster") == "http://orders-0.orders-headless.ops.svc:9200"
    assert submitted.option("--ca-file") is None
    added = added_by_the_script(submitted.driver_template())
    assert added["volumes"] == [] and added["mounts"] == []
    assert [env["valueFrom"]["secretKeyRef"]["name"] for env in added["env"]] == ["audit-token"]


def test_the_exit_code_is_the_drivers_and_the_template_is_removed(tmp_path: Path) -> None:
    # spark-submit exits 0 in cluster mode whatever the driver did: the audit's code comes from the driver pod.
    submitted = submit(tmp_path, STUB_DRIVER_EXIT="1")
    assert submitted.returncode == 1, submitted.stderr
    run = submitted.conf()["spark.kubernetes.driver.label.coordinated.dev/audit-run"]
    asked = (tmp_path / "record" / "kubectl.calls").read_text().splitlines()[-1]
    assert asked.startswith(f"-n ops get pods -l coordinated.dev/audit-run={run},spark-role=driver ")
    path = Path((tmp_path / "record" / "driver-template.path").read_text().strip())
    assert path.parent == tmp_path and not path.exists()


def test_a_failed_submission_keeps_its_exit_code(tmp_path: Path) -> None:
    submitted = submit(tmp_path, STUB_EXIT="3", STUB_DRIVER_EXIT="0")
    assert submitted.returncode == 3
    assert " get pods " not in (tmp_path / "record" / "kubectl.calls").read_text()


def test_an_unknown_driver_exit_code_is_said_not_hidden(tmp_path: Path) -> None:
    # E.g. spark.kubernetes.submission.waitAppCompletion=false: the driver has not finished.
    submitted = submit(tmp_path, STUB_DRIVER_EXIT="")
    assert submitted.returncode == 0
    assert "the driver's exit code is unknown" in submitted.stderr


@pytest.mark.parametrize("setting", ["TLS", "AUTH"])
def test_a_setting_other_than_true_or_false_is_refused(tmp_path: Path, setting: str) -> None:
    submitted = submit(tmp_path, **{setting: "off"})
    assert submitted.returncode == 2
    assert f"{setting} must be true or false, not 'off'" in submitted.stderr
    assert submitted.args == []  # spark-submit never ran


def test_input_files_are_audited_directly_on_as_many_executors_as_asked(tmp_path: Path) -> None:
    # Archived histories on a volume that driver and executors mount: no sidecar is asked, so neither the
    # reader token nor the CA is mounted, whatever TLS and AUTH say.
    submitted = submit(tmp_path, INPUT="/reports/archive/a,/reports/archive/b", EXECUTORS="3", TLS="true")
    assert submitted.returncode == 0, submitted.stderr
    audit = submitted.audit_args()
    assert audit[:2] == ["/reports/archive/a", "/reports/archive/b"]
    assert submitted.option("--from-cluster") is None and submitted.option("--ca-file") is None
    assert submitted.option("--report-dir") == "/reports/orders"
    assert audit[-2:] == ["--max-examples", "3"]
    conf = submitted.conf()
    assert conf["spark.executor.instances"] == "3"
    assert conf["spark.kubernetes.driver.podTemplateFile"] == str(BASE_TEMPLATE)


def test_the_default_is_two_executors_and_a_bad_count_is_refused_before_submitting(tmp_path: Path) -> None:
    assert submit(tmp_path / "default").conf()["spark.executor.instances"] == "2"
    for count in ("0", "two", "-1", "1.5", "100000"):
        submitted = submit(tmp_path / f"bad{count}", EXECUTORS=count)
        assert submitted.returncode == 2
        assert f"EXECUTORS must be a whole number from 1 to 9999, not '{count}'" in submitted.stderr
        assert submitted.args == []  # spark-submit never ran


def test_the_history_archive_in_object_storage(tmp_path: Path) -> None:
    done = submit(
        tmp_path,
        INPUT="s3://histories/prod",
        S3_ENDPOINT="http://objects.storage:9000",
        S3_CREDENTIALS_SECRET="s3-keys",
        CLUSTER="orders",
    )
    assert done.returncode == 0, done.stderr
    assert done.audit_args()[0] == "s3://histories/prod"
    assert done.option("--s3-endpoint") == "http://objects.storage:9000"
    conf = done.conf()
    for role in ("driver", "executor"):
        for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            assert conf[f"spark.kubernetes.{role}.secretKeyRef.{key}"] == f"s3-keys:{key}"
    assert "--from-cluster" not in done.args


def test_pods_ask_for_a_quarter_core_by_default_and_the_run_labels_every_pod(tmp_path: Path) -> None:
    """Spark's default, a whole core per pod, left the default run's executors Pending for ever on 2 CPUs."""
    conf = submit(tmp_path / "default").conf()
    assert conf["spark.kubernetes.driver.request.cores"] == "250m"
    assert conf["spark.kubernetes.executor.request.cores"] == "250m"
    run = conf["spark.kubernetes.driver.label.coordinated.dev/audit-run"]
    assert conf["spark.kubernetes.executor.label.coordinated.dev/audit-run"] == run
    conf = submit(tmp_path / "given", DRIVER_REQUEST_CORES="1", EXECUTOR_REQUEST_CORES="500m").conf()
    assert (conf["spark.kubernetes.driver.request.cores"], conf["spark.kubernetes.executor.request.cores"]) == (
        "1",
        "500m",
    )


def test_a_pod_that_cannot_be_scheduled_is_reported_and_the_run_stopped(tmp_path: Path) -> None:
    reason = "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available"
    submitted = submit(
        tmp_path,
        STUB_SLEEP="60",  # spark-submit would wait for the driver for ever
        STUB_PENDING=f"orders-exec-1\\tFalse\\t{reason}\\norders-driver\\tTrue\\t\\n",
        PENDING_TIMEOUT="1",
        PENDING_POLL_SECONDS="1",
    )
    assert submitted.returncode == 3, submitted.stderr
    assert f"pod orders-exec-1 cannot be scheduled: {reason}" in submitted.stderr
    assert "giving up: pod orders-exec-1 could not be scheduled for 1 s" in submitted.stderr
    assert "orders-driver" not in submitted.stderr  # scheduled, only not running yet: not a problem
    run = submitted.conf()["spark.kubernetes.driver.label.coordinated.dev/audit-run"]
    calls = (tmp_path / "record" / "kubectl.calls").read_text()
    assert f"-n ops delete pods -l coordinated.dev/audit-run={run} --wait=false" in calls
    assert not Path(submitted.conf()["spark.kubernetes.driver.podTemplateFile"]).exists()


def test_a_missing_spark_submit_is_named_with_the_way_to_get_it(tmp_path: Path) -> None:
    submitted = submit(tmp_path, SPARK_SUBMIT=str(tmp_path / "nowhere" / "spark-submit"))
    assert submitted.returncode == 2
    assert "spark-submit not found" in submitted.stderr and "make install" in submitted.stderr
    assert submitted.args == []


def test_the_repositorys_venv_is_the_fallback_with_its_own_python(tmp_path: Path) -> None:
    """Without spark-submit on PATH, the script takes the repository's .venv/bin/spark-submit (pyspark's), which
    finds its SPARK_HOME with the `python3` on PATH: unless that is the .venv's, it failed with rc 127 ("Could not
    find valid SPARK_HOME")."""
    repo = tmp_path / "repo"
    (repo / "spark-jobs").mkdir(parents=True)
    subprocess.run(["cp", "-r", str(K8S), str(repo / "spark-jobs" / "k8s")], check=True)
    venv = repo / ".venv" / "bin"
    venv.mkdir(parents=True)
    # pyspark's script in short: it runs `python3` from PATH (find-spark-home), then submits.
    (venv / "spark-submit").write_text(
        '#!/usr/bin/env bash\ncommand -v python3 >"$RECORD/python3"\n' + SPARK_SUBMIT_STUB.split("\n", 1)[1]
    )
    (venv / "python3").write_text("#!/bin/sh\nexit 0\n")
    for script in ("spark-submit", "python3"):
        (venv / script).chmod(0o755)
    stubs, record = tmp_path / "bin", tmp_path / "record"
    stubs.mkdir()
    record.mkdir()
    (stubs / "kubectl").write_text(KUBECTL_STUB)
    (stubs / "kubectl").chmod(0o755)
    without_spark = os.pathsep.join(
        [str(stubs), *(d for d in os.environ["PATH"].split(os.pathsep) if not (Path(d) / "spark-submit").exists())]
    )
    environment = {"PATH": without_spark, "RECORD": str(record), "TMPDIR": str(tmp_path), "CLUSTER": "orders"}
    done = subprocess.run(
        ["bash", str(repo / "spark-jobs" / "k8s" / "spark-submit.sh")],
        env=environment, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (record / "python3").read_text().strip() == str(venv / "python3")
