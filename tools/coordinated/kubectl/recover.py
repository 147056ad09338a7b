"""`kubectl coordinated recover CLUSTER --from POD`: the quorum-loss procedure of docs/operator.md ("Recovering
from quorum loss") as one command. POD's node becomes the sole voter of a new cluster (`coordinated node-tool
unsafe-bootstrap` in a Job over its claim), the other voters' claims are deleted, and the operator grows the
cluster back from it.

The plan is a list of steps, each with the kubectl commands a person would type for it: `--dry-run` prints
them, and when a step fails the command stops there and prints the rest, to continue by hand.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import click
import tenacity
from kubernetes.client.exceptions import ApiException

from coordinated.ctl.failures import Failed
from coordinated.kubectl.kube import Kube, api_message, as_exit_codes, names_of
from coordinated.operator.spec import CLUSTER_UUID_ANNOTATION, PAUSE_ANNOTATION

T = TypeVar("T")
NEW_UUID = re.compile(r"now holds cluster UUID \[([0-9A-Za-z_-]+)\]")
# How long each wait may take, as in the documented procedure.
PAUSE_WAIT_S, STOP_WAIT_S, JOB_WAIT_S, START_WAIT_S, READY_WAIT_S = 60, 180, 180, 180, 600


class StepFailed(Exception):
    """A step that did not get done; the message says why."""


@dataclass(frozen=True)
class Facts:
    """What the plan is built from, read once before it runs."""

    namespace: str
    cluster: str
    survivor: int
    lost: tuple[int, ...]  # the ordinals whose data claims are deleted: every voter's but the survivor's
    image: str
    pull_policy: str | None = None
    wait_ready: bool = True

    @property
    def ordinals(self) -> list[int]:
        return sorted({self.survivor, *self.lost})

    @property
    def job(self) -> str:
        return f"{self.cluster}-unsafe-bootstrap"

    def claim(self, ordinal: int) -> str:
        return f"data-{self.cluster}-{ordinal}"

    def pod(self, ordinal: int) -> str:
        return f"{self.cluster}-{ordinal}"


@dataclass
class Progress:
    """What earlier steps found, for later ones."""

    new_uuid: str | None = None


@dataclass(frozen=True)
class Step:
    title: str
    commands: tuple[str, ...]  # the same step by hand
    run: Callable[[Kube, Progress], None] = field(repr=False)


def plan(facts: Facts) -> list[Step]:
    ns, ccl = facts.namespace, facts.cluster
    k = f"kubectl -n {ns}"
    steps = [
        Step(
            "pause the operator, so that it changes nothing while the cluster is down",
            (
                f"{k} annotate ccl/{ccl} {PAUSE_ANNOTATION}=true --overwrite",
                f"{k} wait --for=jsonpath='{{.status.phase}}'=Paused ccl/{ccl} --timeout={PAUSE_WAIT_S}s",
            ),
            lambda kube, _: pause(kube, facts),
        ),
        Step(
            "keep the data claims while the StatefulSet is scaled down",
            (
                f"{k} patch sts/{ccl} -p "
                """'{"spec":{"persistentVolumeClaimRetentionPolicy":{"whenScaled":"Retain"}}}'""",
            ),
            lambda kube, _: retain_claims(kube, facts),
        ),
        Step(
            "stop every voter pod",
            (
                f"{k} scale sts/{ccl} --replicas=0",
                f"{k} wait --for=delete {' '.join(f'pod/{facts.pod(i)}' for i in facts.ordinals)} "
                f"--timeout={STOP_WAIT_S}s",
            ),
            lambda kube, _: stop_pods(kube, facts),
        ),
        Step(
            f"make {facts.pod(facts.survivor)}'s node the sole voter of a new cluster (node-tool unsafe-bootstrap)",
            (
                f"{k} apply -f - <<< '{json.dumps(job_manifest(facts), separators=(',', ':'))}'",
                f"{k} wait --for=condition=complete job/{facts.job} --timeout={JOB_WAIT_S}s",
                f"NEW_UUID=$({k} logs job/{facts.job} | sed -n 's/.*now holds cluster UUID \\[\\([^]]*\\)\\].*/\\1/p')",
                f"{k} delete job/{facts.job} --wait=true",
            ),
            lambda kube, progress: unsafe_bootstrap(kube, facts, progress),
        ),
        Step(
            "delete the lost claims, so that those pods start empty, as new nodes",
            (f"{k} delete pvc {' '.join(facts.claim(i) for i in facts.lost)} --wait=true",) if facts.lost else (),
            lambda kube, _: delete_claims(kube, facts),
        ),
        Step(
            "record the new cluster UUID for the operator",
            (f"{k} annotate ccl/{ccl} {CLUSTER_UUID_ANNOTATION}=$NEW_UUID --overwrite",),
            lambda kube, progress: record_uuid(kube, facts, progress),
        ),
        Step(
            f"start the survivor {facts.pod(facts.survivor)} (and the empty pods below it)",
            (
                f"{k} scale sts/{ccl} --replicas={facts.survivor + 1}",
                f"{k} wait --for=condition=Ready pod/{facts.pod(facts.survivor)} --timeout={START_WAIT_S}s",
            ),
            lambda kube, _: start_survivor(kube, facts),
        ),
        Step(
            "resume the operator: it adds the other pods one at a time",
            (f"{k} annotate ccl/{ccl} {PAUSE_ANNOTATION}-",),
            lambda kube, _: resume(kube, facts),
        ),
    ]
    if facts.wait_ready:
        steps.append(
            Step(
                "wait for the cluster to be Ready",
                (f"{k} wait --for=condition=Ready ccl/{ccl} --timeout={READY_WAIT_S}s",),
                lambda kube, _: wait_cluster_ready(kube, facts),
            )
        )
    return steps


def job_manifest(facts: Facts) -> dict[str, Any]:
    """The documented Job: the tool once, over the survivor's claim, as the sidecar's user."""
    container: dict[str, Any] = {
        "name": "node-tool",
        "image": facts.image,
        "args": ["node-tool", "unsafe-bootstrap", "--data-dir", "/data", "--yes"],
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    }
    if facts.pull_policy:
        container["imagePullPolicy"] = facts.pull_policy
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": facts.job, "namespace": facts.namespace},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 10001,
                        "runAsGroup": 10001,
                        "fsGroup": 10001,
                    },
                    "containers": [container],
                    "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": facts.claim(facts.survivor)}}],
                }
            },
        },
    }


def wait_for(what: str, probe: Callable[[], bool], timeout: float) -> None:
    """Polls `probe` every second until it is true; StepFailed after `timeout` seconds."""
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_delay(timeout),
        wait=tenacity.wait_fixed(1),
        retry=tenacity.retry_if_result(lambda done: not done),
    )
    try:
        retrying(probe)
    except tenacity.RetryError as error:
        raise StepFailed(f"timed out after {timeout:.0f} s waiting for {what}") from error


def phase(kube: Kube, cluster: str) -> str | None:
    phase: str | None = (kube.cluster(cluster).get("status") or {}).get("phase")
    return phase


def pause(kube: Kube, facts: Facts) -> None:
    kube.patch_cluster(facts.cluster, {"metadata": {"annotations": {PAUSE_ANNOTATION: "true"}}})
    wait_for(
        "the Paused phase (is the operator running?)", lambda: phase(kube, facts.cluster) == "Paused", PAUSE_WAIT_S
    )


def retain_claims(kube: Kube, facts: Facts) -> None:
    patch = {"spec": {"persistentVolumeClaimRetentionPolicy": {"whenScaled": "Retain"}}}
    kube.apps.patch_namespaced_stateful_set(facts.cluster, facts.namespace, patch)


def scale(kube: Kube, facts: Facts, replicas: int) -> None:
    kube.apps.patch_namespaced_stateful_set_scale(facts.cluster, facts.namespace, {"spec": {"replicas": replicas}})


def voter_pods(kube: Kube, facts: Facts) -> list[str]:
    pods = kube.core.list_namespaced_pod(facts.namespace, label_selector=f"app.kubernetes.io/instance={facts.cluster}")
    return [pod for pod in names_of(pods.items) if re.fullmatch(rf"{re.escape(facts.cluster)}-\d+", pod)]


def stop_pods(kube: Kube, facts: Facts) -> None:
    scale(kube, facts, 0)
    wait_for("every voter pod to stop", lambda: not voter_pods(kube, facts), STOP_WAIT_S)


def unsafe_bootstrap(kube: Kube, facts: Facts, progress: Progress) -> None:
    delete_job(kube, facts)  # one left by an earlier attempt: the tool is safe to run again
    kube.batch.create_namespaced_job(facts.namespace, job_manifest(facts))  # type: ignore[arg-type]
    wait_for("the Job to finish", lambda: job_finished(kube, facts), JOB_WAIT_S)
    log = job_log(kube, facts)
    found = NEW_UUID.search(log)
    if not job_succeeded(kube, facts) or found is None:
        last = log.strip().splitlines()[-1] if log.strip() else "no log"
        raise StepFailed(f"the Job {facts.job} failed (nothing was changed by it): {last}")
    progress.new_uuid = found.group(1)
    click.echo(f"      the survivor now holds cluster UUID [{progress.new_uuid}]", err=True)
    delete_job(kube, facts)


def job_finished(kube: Kube, facts: Facts) -> bool:
    status = kube.batch.read_namespaced_job(facts.job, facts.namespace).status
    return status is not None and bool(status.succeeded or status.failed)


def job_succeeded(kube: Kube, facts: Facts) -> bool:
    status = kube.batch.read_namespaced_job(facts.job, facts.namespace).status
    return status is not None and bool(status.succeeded)


def job_log(kube: Kube, facts: Facts) -> str:
    pods = kube.core.list_namespaced_pod(facts.namespace, label_selector=f"job-name={facts.job}").items
    return "".join(kube.core.read_namespaced_pod_log(pod, facts.namespace) for pod in names_of(pods))


def delete_job(kube: Kube, facts: Facts) -> None:
    try:
        kube.batch.delete_namespaced_job(facts.job, facts.namespace, propagation_policy="Foreground")
    except ApiException as error:
        if error.status != 404:
            raise
        return
    wait_for(f"the Job {facts.job} to be deleted", lambda: not job_exists(kube, facts), JOB_WAIT_S)


def read_or_none(read: Callable[[str, str], T], name: str, namespace: str) -> T | None:
    """The object, or None once it does not exist."""
    try:
        return read(name, namespace)
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def job_exists(kube: Kube, facts: Facts) -> bool:
    return read_or_none(kube.batch.read_namespaced_job, facts.job, facts.namespace) is not None


def claim_names(kube: Kube, namespace: str) -> set[str]:
    return set(names_of(kube.core.list_namespaced_persistent_volume_claim(namespace).items))


def delete_claims(kube: Kube, facts: Facts) -> None:
    lost = {facts.claim(ordinal) for ordinal in facts.lost}
    for claim in sorted(lost & claim_names(kube, facts.namespace)):
        kube.core.delete_namespaced_persistent_volume_claim(claim, facts.namespace)
    wait_for("the lost claims to be deleted", lambda: not lost & claim_names(kube, facts.namespace), STOP_WAIT_S)


def record_uuid(kube: Kube, facts: Facts, progress: Progress) -> None:
    if progress.new_uuid is None:
        raise StepFailed("the new cluster UUID is unknown (the unsafe-bootstrap step did not print it)")
    kube.patch_cluster(facts.cluster, {"metadata": {"annotations": {CLUSTER_UUID_ANNOTATION: progress.new_uuid}}})


def pod_ready(kube: Kube, namespace: str, pod: str) -> bool:
    found = read_or_none(kube.core.read_namespaced_pod, pod, namespace)
    conditions = (found.status.conditions if found is not None and found.status else None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def start_survivor(kube: Kube, facts: Facts) -> None:
    scale(kube, facts, facts.survivor + 1)
    survivor = facts.pod(facts.survivor)
    wait_for(f"{survivor} to be Ready", lambda: pod_ready(kube, facts.namespace, survivor), START_WAIT_S)


def resume(kube: Kube, facts: Facts) -> None:
    kube.patch_cluster(facts.cluster, {"metadata": {"annotations": {PAUSE_ANNOTATION: None}}})


def cluster_ready(kube: Kube, cluster: str) -> bool:
    conditions = (kube.cluster(cluster).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def wait_cluster_ready(kube: Kube, facts: Facts) -> None:
    wait_for("the cluster's Ready condition", lambda: cluster_ready(kube, facts.cluster), READY_WAIT_S)


def print_steps(steps: list[Step], first: int = 1) -> None:
    for number, step in enumerate(steps, start=first):
        click.echo(f"{number}. {step.title}", err=True)
        for command in step.commands:
            click.echo(f"     {command}", err=True)


def run(kube: Kube, steps: list[Step]) -> Progress:
    """Runs the steps in order, each announced; stops at the first that fails, with the rest to do by hand."""
    progress = Progress()
    for number, step in enumerate(steps, start=1):
        click.echo(f"[{number}/{len(steps)}] {step.title}", err=True)
        try:
            with as_exit_codes(f"step {number}"):
                try:
                    step.run(kube, progress)
                except ApiException as error:
                    if error.status in (401, 403, 404) or error.status == 0:
                        raise
                    raise StepFailed(api_message(error)) from error
        except (StepFailed, click.ClickException) as error:
            reason = error.format_message() if isinstance(error, click.ClickException) else str(error)
            click.echo(f"step {number} failed: {reason}", err=True)
            click.echo("the steps before it are done; to continue by hand, from this step:", err=True)
            if progress.new_uuid is not None:
                click.echo(f"     NEW_UUID={progress.new_uuid}", err=True)
            print_steps(steps[number - 1 :], first=number)
            # The exit code of what failed (3 for a refused credential or an unreachable API server), else 1.
            failure = type(error) if isinstance(error, click.ClickException) else Failed
            raise failure(f"recover stopped at step {number} ({step.title}): {reason}") from error
    return progress
