"""Quorum loss for good, and the way back: a three-node cluster with keys loses the volumes of two of its
three nodes (claims and pods deleted), cannot elect a master, and comes back from the survivor with every
key by the procedure of docs/operator.md ("Recovering from quorum loss"), run verbatim from the document.
One cluster, `recovery`, created and removed here with its claims."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable

import pytest

from e2e.support import REPO, Cluster, apply, cluster_manifest, kubectl, remove_cluster, voting_config, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]

NAME = "recovery"
KEYS = {f"key-{i:02d}": {"n": i, "pad": "x" * i} for i in range(30)}
Figure = Callable[[str], None]


def documented_procedure() -> str:
    """The shell block of docs/operator.md's quorum-loss procedure, exactly as a user copies it."""
    text = (REPO / "docs" / "operator.md").read_text()
    section = text.split("## Recovering from quorum loss", 1)[1]
    match = re.search(r"```sh\n(.*?)```", section, re.S)
    assert match is not None, "the procedure's shell block is missing from docs/operator.md"
    return match.group(1)


def run_procedure(namespace: str) -> str:
    script = documented_procedure()
    first, rest = script.split("\n", 1)
    # The document's first line names its example (`demo` in `default`); everything after it runs as written.
    assert first.startswith("NS=default CCL=demo SURVIVOR=0"), first
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", f'NS={namespace} CCL={NAME} SURVIVOR=0 LOST="1 2"\n{rest}'],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env=dict(os.environ),
    )
    assert done.returncode == 0, f"the documented procedure failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def uid_of(cluster: Cluster, kind: str, name: str) -> str | None:
    found = kubectl("-n", cluster.namespace, "get", kind, name, "-o", "jsonpath={.metadata.uid}", check=False)
    return found.stdout.strip() or None if found.returncode == 0 else None


def claim_uid(cluster: Cluster, ordinal: int) -> str | None:
    return uid_of(cluster, "pvc", f"data-{NAME}-{ordinal}")


def test_unsafe_bootstrap_after_losing_two_of_three_claims(
    operator_release: str, namespace: str, figure: Figure
) -> None:
    try:
        lose_two_claims_and_recover(Cluster(namespace, NAME), figure)
    finally:  # the uninstall test counts what is left in the namespace
        remove_cluster(namespace, NAME)
        kubectl("-n", namespace, "delete", "job", f"{NAME}-unsafe-bootstrap", "--ignore-not-found", "--wait=true")


def lose_two_claims_and_recover(cluster: Cluster, figure: Figure) -> None:
    namespace = cluster.namespace
    apply(cluster_manifest(namespace, NAME, 3))
    wait_until("the cluster to settle at 3", lambda: cluster.settled(3), 420, interval=2)
    for key, value in KEYS.items():
        written = cluster.sidecars.request(f"services/{NAME}", "PUT", f"_cluster/metadata/{key}", value)
        assert written.status == 200, written
    old_uuid = cluster.status()["clusterUUID"]
    # The survivor holds every acknowledged key (a follower may apply a moment after the master answered).
    wait_until(
        "the survivor to have applied every key",
        lambda: KEYS.items() <= cluster.sidecars.state(f"{NAME}-0")["metadata"]["kv"].items() or None,
        60,
    )

    started = time.monotonic()
    lost = {ordinal: claim_uid(cluster, ordinal) for ordinal in (1, 2)}
    # Two volumes lost for good: their claims (and data: reclaimPolicy Delete) go, and so do their pods.
    kubectl("-n", namespace, "delete", "pvc", f"data-{NAME}-1", f"data-{NAME}-2", "--wait=false")
    lost_pods = {name: uid_of(cluster, "pod", name) for name in (f"{NAME}-1", f"{NAME}-2")}
    kubectl("-n", namespace, "delete", "pod", *lost_pods, "--wait=false")
    # Gone once the name is free or holds a new pod: the StatefulSet recreates it at once. (Not `kubectl delete
    # --wait`: its watch once hung for 180 s after both pods had been replaced, on a loaded machine.)
    wait_until(
        "the lost pods to be deleted",
        lambda: all(uid_of(cluster, "pod", name) != uid for name, uid in lost_pods.items()) or None,
        180,
        interval=1,
    )
    wait_until(
        "the StatefulSet to give the lost pods new, empty claims",
        lambda: all(claim_uid(cluster, o) not in (None, uid) for o, uid in lost.items()) or None,
        180,
        interval=1,
    )
    # The survivor alone is not a majority of the voting configuration: no master, however long one waits.
    wait_until("the NoMaster phase", lambda: cluster.status().get("phase") == "NoMaster" or None, 180, interval=1)
    figure(f"unsafe-bootstrap: 2 of 3 claims deleted to NoMaster: {time.monotonic() - started:.0f} s")
    # The operator says why, naming the lost members, and points to the procedure below.
    # 300 s: the new pods must start and answer as new nodes before the operator can name them; on a loaded
    # machine that once took longer than 120 s.
    quorate = wait_until(
        "the QuorumLost reason", lambda: cluster.condition_with_reason("Quorate", "QuorumLost"), 300, interval=1
    )
    assert "2 of the 3 voters lost their data" in quorate["message"], quorate
    assert f"{NAME}-1" in quorate["message"] and f"{NAME}-2" in quorate["message"]
    assert "unsafe-bootstrap" in quorate["message"] and "Recovering from quorum loss" in quorate["message"]
    assert cluster.events("QuorumLost"), "no QuorumLost Event"

    recovery = time.monotonic()
    output = run_procedure(namespace)
    figure(f"unsafe-bootstrap: the documented procedure, to Ready: {time.monotonic() - recovery:.0f} s")
    wait_until("the cluster to settle at 3 again", lambda: cluster.settled(3), 600, interval=2)
    figure(f"unsafe-bootstrap: claims lost to 3 voters again: {time.monotonic() - started:.0f} s")

    status = cluster.status()
    new_uuid = status["clusterUUID"]
    assert new_uuid != old_uuid and new_uuid in output  # the UUID the tool printed is the one recorded
    pods = [f"{NAME}-{i}" for i in range(3)]
    for pod in pods:
        state = cluster.sidecars.state(pod)
        assert state["cluster_uuid"] == new_uuid, (pod, state["cluster_uuid"])
        assert voting_config(state) == set(pods), (pod, voting_config(state))
        kv = state["metadata"]["kv"]
        assert {key: kv.get(key) for key in KEYS} == KEYS, f"{pod} lost keys"
    settings = cluster.sidecars.request(f"services/{NAME}", "GET", "_cluster/settings")
    assert settings.status == 200 and "unsafe-bootstrap" in str(settings.body), settings
    written = cluster.sidecars.request(f"services/{NAME}", "PUT", "_cluster/metadata/after", {"ok": True})
    assert written.status == 200, written  # and it takes writes again
