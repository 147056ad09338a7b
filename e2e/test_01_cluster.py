"""One CoordinatedCluster through its life: formed, written, its master deleted, scaled to 5, audited with
spark-submit in cluster mode (its own histories, then an archived input on 1 and on 2 executors), scaled to 3
and 1 under a continuous writer, and scaled down again while the operator's leader is killed. The tests run in file
order and share the cluster; each leaves it settled."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from e2e.conftest import OPERATOR_NAMESPACE, OPERATOR_SELECTOR
from e2e.support import (
    Cluster,
    ContinuousWriter,
    apply,
    cluster_manifest,
    exclusions,
    kubectl,
    on_reports_volume,
    run_spark_submit_audit,
    voting_config,
    wait_until,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

NAME = "e2e"
# The longest one election may take with the default settings: cluster.election.max_timeout (10s).
ONE_ELECTION_SECONDS = 10.0
SETTLE_SECONDS = 600  # a scaling step waits for a pod to start; generous for a loaded 2-core machine

Figure = Callable[[str], None]


def names(count: int) -> list[str]:
    return [f"{NAME}-{i}" for i in range(count)]


@pytest.fixture(scope="module")
def cluster(operator_release: str, namespace: str) -> Cluster:
    return Cluster(namespace, NAME)


def committed_state(cluster: Cluster) -> dict[str, Any]:
    """The master's committed state, asked through any Ready pod (a non-local read waits for the master's
    applied version, so it holds every write acknowledged before it)."""
    pod = cluster.ready_pods()[0]
    return cluster.sidecars.state(pod, local=False)


def test_a_three_node_cluster_becomes_ready(cluster: Cluster, figure: Figure) -> None:
    started = time.monotonic()
    apply(cluster_manifest(cluster.namespace, NAME, 3))
    kubectl("-n", cluster.namespace, "wait", "--for=condition=Ready", f"ccl/{NAME}", "--timeout=300s", timeout=320)
    figure(f"3-node cluster: kubectl apply to condition Ready in {time.monotonic() - started:.1f} s")

    status = cluster.status()
    assert status["master"] in names(3)
    assert status["term"] >= 1
    assert status["votingConfig"] == names(3)
    assert status["voters"] == 3
    assert status["health"] == "green"
    assert wait_until("every sidecar to name the status's master", lambda: _agreed_master(cluster), 30)

    table = kubectl("-n", cluster.namespace, "get", "ccl", NAME).stdout.splitlines()
    columns = dict(zip(table[0].split(), table[1].split(), strict=False))
    assert columns["MASTER"] == status["master"], table
    assert columns["TERM"] == str(status["term"]), table
    assert columns["VOTERS"] == "3", table
    assert columns["HEALTH"] == "green", table
    assert columns["PHASE"] == "Ready", table


def _agreed_master(cluster: Cluster) -> str | None:
    status = cluster.status()
    seen = {cluster.sidecars.master_name(pod) for pod in cluster.ready_pods()}
    return status.get("master") if seen == {status.get("master")} else None


def test_a_write_through_one_sidecar_is_readable_from_every_pod(cluster: Cluster) -> None:
    master = cluster.status()["master"]
    follower = next(pod for pod in names(3) if pod != master)  # a follower forwards the write to the master
    value = {"written_through": follower, "at": time.time()}
    written = cluster.sidecars.request(f"pods/{follower}", "PUT", "_cluster/metadata/e2e-greeting", value)
    assert written.status == 200, written
    version = written.body["version"]

    for pod in names(3):
        read = cluster.sidecars.request(f"pods/{pod}", "GET", "_cluster/metadata/e2e-greeting")
        assert read.status == 200, (pod, read)
        assert read.body["value"] == value and read.body["version"] == version, (pod, read)
        applied = cluster.sidecars.request(
            f"pods/{pod}",
            "GET",
            "_cluster/state",
            query={"local": "true", "wait_for_version": str(version), "wait_for_timeout": "30s"},
            timeout=40,
        )
        assert applied.status == 200, (pod, applied)
        assert applied.body["version"] >= version
        assert applied.body["metadata"]["kv"]["e2e-greeting"] == value, pod


def test_deleting_the_master_pod_elects_a_new_master_and_keeps_acknowledged_writes(
    cluster: Cluster, figure: Figure
) -> None:
    before = cluster.status()
    old_master, old_term = before["master"], before["term"]
    with ContinuousWriter(cluster.sidecars, NAME, "after-master-deletion") as writer:
        wait_until("a first acknowledged write", lambda: writer.ok_times, 60)
        cluster.core.delete_namespaced_pod(old_master, cluster.namespace)
        after = wait_until(
            "the status to show a master in a later term",
            lambda: (s := cluster.status()).get("master") and s.get("term", 0) > old_term and s,
            120,
        )
        wait_until("3 Ready pods again", lambda: cluster.ready_pods() == names(3), SETTLE_SECONDS)
        assert wait_until("every sidecar to name the status's master", lambda: _agreed_master(cluster), 60)
        time.sleep(2)  # some writes after the replacement pod joined
    lost = writer.lost(committed_state(cluster))
    assert not lost, f"{len(lost)} acknowledged writes lost, e.g. {lost[:5]}"
    assert len(writer.acknowledged) > 0
    figure(
        f"master pod deleted: {old_master} (term {old_term}) -> {after['master']} (term {after['term']}); "
        f"longest gap without an acknowledged write {writer.longest_gap():.2f} s; "
        f"{len(writer.acknowledged)} writes acknowledged, {writer.failures} failed, none lost"
    )


def test_scaling_up_to_five_grows_the_voting_configuration(cluster: Cluster, figure: Figure) -> None:
    started = time.monotonic()
    cluster.scale(5)
    status = wait_until("5 Ready nodes and 5 voters", lambda: cluster.settled(5), SETTLE_SECONDS, interval=1)
    assert status["votingConfig"] == names(5)
    assert voting_config(committed_state(cluster)) == set(names(5))
    assert cluster.events("SetReplicas"), "no SetReplicas event"
    figure(f"scale 3 -> 5: voting configuration of 5 after {time.monotonic() - started:.1f} s")


def test_the_audit_runs_with_spark_submit_in_cluster_mode(cluster: Cluster, figure: Figure) -> None:
    # This cluster runs without TLS and tokens (the API server's proxy reaches it): the script's opt-out.
    # test_02_security.py runs the script's secure default against a secured cluster.
    audit = run_spark_submit_audit(cluster, 5, TLS="false", AUTH="false")
    assert "https://" not in " ".join(audit.driver.spec.containers[0].args or [])
    report = audit.report
    assert report["ok"] is True, report["violations"][:5]
    assert report["nodes"] == 5
    assert report["malformed_lines"] == 0
    figure(f"audit (spark-submit, cluster mode, 1 executor): {report['events']} events, ok, {audit.elapsed:.0f} s")


ARCHIVED_EVENTS = 300_000  # enough that the audit's passes, not its fixed costs, take most of its time


def test_an_archived_input_is_audited_alike_on_one_and_on_two_executors(cluster: Cluster, figure: Figure) -> None:
    """A history on the report volume (a synthetic valid one, as `coordinated.audit.synth` writes it) audited with
    INPUT: the same report on 1 and on 2 executors, and the audit's own time on each (no timing assertion: the
    e2e node has two cores, shared with the cluster and the control plane)."""
    folder = f"/reports/{NAME}-archive"
    with on_reports_volume(cluster.namespace, writable=True) as run:
        run("rm", "-rf", folder)
        written = run("python", "-m", "coordinated.audit.synth", folder, "--events", str(ARCHIVED_EVENTS), timeout=600)
    events = int(written.split()[0])
    assert events >= ARCHIVED_EVENTS, written
    runs = {count: run_spark_submit_audit(cluster, 5, INPUT=folder, EXECUTORS=str(count)) for count in (1, 2)}
    for count, audit in runs.items():
        assert len(audit.executors) == count, f"{count} executor(s) asked for, pods seen running: {audit.executors}"
        report = audit.report
        assert report["ok"] is True, report["violations"][:5]
        assert (report["events"], report["nodes"], report["malformed_lines"]) == (events, 5, 0)
    one, two = (runs[count].report["stats"] for count in (1, 2))
    assert one["violation_counts"] == two["violation_counts"]
    assert {n: s["events"] for n, s in one["per_node"].items()} == {n: s["events"] for n, s in two["per_node"].items()}
    single, double = runs[1].audit_seconds, runs[2].audit_seconds
    figure(
        f"audit of {events:,} archived events (JSONL, spark-submit): 1 executor {single:.1f} s, "
        f"2 executors {double:.1f} s ({single / double:.2f}x; pods' start-up excluded)"
    )


def test_scaling_down_to_three_and_one_uses_exclusions_without_a_long_gap(cluster: Cluster, figure: Figure) -> None:
    seen_exclusions: set[str] = set()
    with ContinuousWriter(cluster.sidecars, NAME, "during-scale-down") as writer:
        for replicas in (3, 1):
            started = time.monotonic()
            cluster.scale(replicas)

            def settled_watching_exclusions(replicas: int = replicas) -> dict[str, Any] | None:
                seen_exclusions.update(cluster.status().get("exclusions") or ())
                return cluster.settled(replicas)

            wait_until(f"{replicas} Ready node(s)", settled_watching_exclusions, SETTLE_SECONDS, interval=0.3)
            figure(f"scale down to {replicas}: settled in {time.monotonic() - started:.1f} s")
    state = committed_state(cluster)
    assert voting_config(state) == {f"{NAME}-0"}
    assert exclusions(state) == [], "the exclusions are cleared at the end"
    excluded = {event.message for event in cluster.events("ExcludeFromVoting")}
    for pod in (f"{NAME}-4", f"{NAME}-3", f"{NAME}-2", f"{NAME}-1"):
        assert any(pod in message for message in excluded), f"no ExcludeFromVoting event names {pod}: {excluded}"
    assert cluster.events("ClearExclusions"), "no ClearExclusions event"
    assert seen_exclusions, "the status never showed an exclusion while scaling down"
    assert not writer.lost(state)
    gap = writer.longest_gap()
    figure(
        f"scale 5 -> 3 -> 1 under a continuous writer: longest gap {gap:.2f} s, "
        f"{len(writer.acknowledged)} acknowledged, {writer.failures} failed, none lost; "
        f"exclusions seen in the status: {sorted(seen_exclusions)}"
    )
    assert gap < ONE_ELECTION_SECONDS, f"the writer saw a {gap:.1f} s gap, longer than one election"


def operator_leader() -> tuple[str, list[str]]:
    """The operator pod that holds the operator's Lease (named after its Deployment), and every Ready one."""
    deployment = client.AppsV1Api().list_namespaced_deployment(OPERATOR_NAMESPACE, label_selector=OPERATOR_SELECTOR)
    lease_name = deployment.items[0].metadata.name
    lease = client.CoordinationV1Api().read_namespaced_lease(lease_name, OPERATOR_NAMESPACE)
    pods = client.CoreV1Api().list_namespaced_pod(OPERATOR_NAMESPACE, label_selector=OPERATOR_SELECTOR).items
    ready = [
        pod.metadata.name
        for pod in pods
        if pod.metadata.deletion_timestamp is None
        and any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or ()))
    ]
    holder = (lease.spec.holder_identity or "").rsplit("_", 1)[0]  # the pod's name and a suffix
    return holder, sorted(ready)


def test_the_other_operator_replica_finishes_a_scale_down_when_the_leader_is_killed(
    cluster: Cluster, figure: Figure
) -> None:
    """The chart runs two operator replicas that elect a leader on a Lease. The leader is killed right after
    its first scale-down step; the other replica, already running, takes the Lease and finishes the scale-down
    (before it, the single operator's replacement pod had to be scheduled and started first)."""
    cluster.scale(3)
    wait_until("3 Ready nodes", lambda: cluster.settled(3), SETTLE_SECONDS, interval=1)

    def two_replicas() -> tuple[str, list[str]] | None:
        leader, ready = operator_leader()
        return (leader, ready) if len(ready) == 2 and leader in ready else None

    leader, ready = wait_until("two Ready operator replicas, one holding the Lease", two_replicas, 120, interval=1)
    (standby,) = [pod for pod in ready if pod != leader]
    excluded_before = len(cluster.events("ExcludeFromVoting"))

    cluster.scale(1)
    # Kill the leader right after its first scale-down step: the exclusion is in place, the pod still runs.
    wait_until(
        "the first exclusion of this scale-down",
        lambda: len(cluster.events("ExcludeFromVoting")) > excluded_before or cluster.status().get("exclusions"),
        120,
        interval=0.2,
    )
    client.CoreV1Api().delete_namespaced_pod(
        leader, OPERATOR_NAMESPACE, grace_period_seconds=0, propagation_policy="Background"
    )
    killed_at = time.monotonic()
    wait_until("the standby replica to take the Lease", lambda: operator_leader()[0] == standby, 120, interval=0.5)
    took_over = time.monotonic() - killed_at
    status = wait_until("the standby to finish at 1 node", lambda: cluster.settled(1), SETTLE_SECONDS, interval=1)
    state = committed_state(cluster)
    assert voting_config(state) == {f"{NAME}-0"}
    assert exclusions(state) == []
    assert status["votingConfig"] == [f"{NAME}-0"]
    assert cluster.ready_pods() == [f"{NAME}-0"]
    # The standby finished it: it held the Lease all along since the kill (the killed leader's replacement pod
    # only becomes a candidate once it runs, and a candidate never takes a Lease that is renewed).
    assert operator_leader()[0] == standby
    figure(
        f"operator leader killed mid scale-down 3 -> 1: the standby replica took the Lease {took_over:.1f} s later "
        f"and finished {time.monotonic() - killed_at:.1f} s after the kill"
    )
