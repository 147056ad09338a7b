"""An upgrade from the previous release, done as docs/operator.md ("Versions and upgrades") tells a user to do it.

`make e2e-up` builds the previous release (the revision compat/previous-release names) from a git worktree of this
clone: its image, with the harness's image builder, and its chart (e2e/lib/previous-release.sh). Here:

- the previous release's chart (with its own CRD) installs its operator, which runs two clusters on the previous
  image: `upgraded`, with the history archive and snapshots in the harness's object store, under a continuous
  writer, and `shrink`;
- `shrink` is scaled down 3 -> 1 and, right after the old operator's first exclusion, this tree's CRD and chart are
  applied (`kubectl apply --server-side`, `helm upgrade`): the operator is upgraded first, in the middle of the
  scale-down, and the new one must finish it;
- `upgraded` gets this release's image in `spec.image`: the operator rolls its pods, followers first and the master
  last, while `status.nodes` shows which pod runs which image; no acknowledged write is lost (the longest gap is a
  figure), and the cluster ends Ready with every key, its archive and its snapshots working on the new release.

Runs after test_03_uninstall.py: it installs the previous release's chart in place of this tree's, and leaves
neither installed (this tree's CRD stays, as after the uninstall test).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from e2e.conftest import OPERATOR_NAMESPACE, OPERATOR_SELECTOR, RELEASE, helm
from e2e.support import (
    IMAGE,
    PROJECT_VERSION,
    REPO,
    Cluster,
    ContinuousWriter,
    apply,
    cluster_manifest,
    every_key,
    exclusions,
    kubectl,
    remove_cluster,
    voting_config,
    wait_ready,
    wait_until,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

UPGRADED, SHRINK = "upgraded", "shrink"
CRD_NAME = "coordinatedclusters.coordinated.dev"
SECRET = "e2e-upgrade-s3-credentials"
HISTORIES, SNAPSHOTS = "upgrade-histories", "upgrade-snapshots"
KEYS = 30
SETTLE_SECONDS = 300
STATE = Path(os.environ.get("E2E_STATE") or REPO / "e2e" / ".state")
Figure = Callable[[str], None]


def documented(prefix: str) -> list[str]:
    """The command of docs/operator.md's "Versions and upgrades" that starts with `prefix`, as a user copies it,
    split into arguments; the caller names its own release, cluster and namespace in it."""
    text = (REPO / "docs" / "operator.md").read_text()
    section = text.split("\n## Versions and upgrades\n", 1)[1].split("\n## ", 1)[0]
    commands = [c.strip() for c in re.findall(r"(?:^|`)\s*((?:kubectl|helm) [^`\n]+)", section, re.MULTILINE)]
    found = [c for c in commands if c.startswith(prefix)]
    assert found, f"docs/operator.md's Versions and upgrades shows no `{prefix} ...`: {commands}"
    return shlex.split(found[0].replace(" charts/", f" {REPO}/charts/"))


def for_cluster(command: list[str], cluster: Cluster) -> list[str]:
    """A documented command about ccl/demo, for `cluster` in its namespace (the document's runs in the default one)."""
    named = [arg.replace("ccl/demo", f"ccl/{cluster.name}") for arg in command[1:]]
    return [*(cluster.name if arg == "demo" else arg for arg in named), "-n", cluster.namespace]


@dataclass(frozen=True)
class PreviousRelease:
    revision: str
    version: str
    image: str
    chart: Path  # the chart's package (helm package of the revision's charts/coordinated-cluster)


@dataclass
class Upgrade:
    """What the tests of this module share, in their order."""

    previous: PreviousRelease
    store: Path  # the object store's folder: one subfolder per bucket
    upgraded: Cluster
    shrink: Cluster
    keys: dict[str, tuple[Any, int, int]]  # written before the upgrade: value, version, create_version
    writer: ContinuousWriter
    snapshots: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def previous() -> PreviousRelease:
    found = STATE / "previous-release.env"
    if not found.is_file():
        pytest.skip("no previous release built beside this cluster (make e2e-up builds it; e2e/kind.sh does not)")
    values = dict(line.split("=", 1) for line in found.read_text().splitlines() if "=" in line)
    release = PreviousRelease(values["revision"], values["version"], values["image"], Path(values["chart"]))
    if release.version == PROJECT_VERSION:
        pytest.fail(
            f"the previous release ({release.revision[:12]}) and this tree both call themselves {release.version}: "
            "the release version must move with the release (pyproject.toml)",
            pytrace=False,
        )
    return release


def operator_pods() -> list[client.V1Pod]:
    return client.CoreV1Api().list_namespaced_pod(OPERATOR_NAMESPACE, label_selector=OPERATOR_SELECTOR).items


def installed(release: str) -> bool:
    try:
        helm("status", release, "--namespace", OPERATOR_NAMESPACE)
    except AssertionError:
        return False
    return True


def apply_this_trees_crd() -> None:
    """The documented first step of an upgrade: Helm never upgrades a chart's CRD."""
    kubectl(*documented("kubectl apply --server-side")[1:])


@pytest.fixture(scope="module")
def previous_operator(previous: PreviousRelease, namespace: str) -> Iterator[PreviousRelease]:
    """The previous release's chart, installed as its users installed it: its CRD, and its operator on the image its
    appVersion names. This tree's chart and CRD (the rest of the suite's) go first."""
    if installed(RELEASE):
        helm("uninstall", RELEASE, "--namespace", OPERATOR_NAMESPACE, "--wait", "--timeout", "5m")
    if kubectl("get", "crd", CRD_NAME, check=False).returncode == 0:
        left = kubectl("get", "ccl", "--all-namespaces", "-o", "name").stdout.split()
        assert left == [], f"CoordinatedClusters left from other tests; deleting the CRD would delete them: {left}"
        kubectl("delete", "crd", CRD_NAME, "--wait=true", timeout=180)
    helm(
        "install", RELEASE, str(previous.chart), "--namespace", OPERATOR_NAMESPACE, "--create-namespace",
        "--set", "image.pullPolicy=Never", "--wait", "--timeout", "5m",
    )  # fmt: skip
    try:
        yield previous
    finally:
        for name in (UPGRADED, SHRINK):
            remove_cluster(namespace, name)
        if installed(RELEASE):
            helm("uninstall", RELEASE, "--namespace", OPERATOR_NAMESPACE, "--wait", "--timeout", "5m")
        apply_this_trees_crd()  # whatever happened, the harness is left with this tree's CRD


@pytest.fixture(scope="module")
def object_store(namespace: str) -> Iterator[Path]:
    """The harness's object store (its folder), two empty buckets, and its credentials as a Secret."""
    state = STATE / "s3"
    if not (state / "endpoint").is_file():
        pytest.skip("no object store beside this cluster (make e2e-up runs one; e2e/kind.sh does not)")
    for bucket in (HISTORIES, SNAPSHOTS):  # a bucket is a folder of the server's posix backend
        shutil.rmtree(state / "data" / bucket, ignore_errors=True)
        (state / "data" / bucket).mkdir(parents=True)
    kubectl("-n", namespace, "delete", "secret", SECRET, "--ignore-not-found")
    kubectl("-n", namespace, "create", "secret", "generic", SECRET, f"--from-env-file={state / 'env'}")
    yield state
    kubectl("-n", namespace, "delete", "secret", SECRET, "--ignore-not-found")


def objects(store: Path, bucket: str, prefix: str = "") -> list[Path]:
    root = store / "data" / bucket / prefix
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


@pytest.fixture(scope="module")
def upgrade(previous_operator: PreviousRelease, object_store: Path, namespace: str) -> Iterator[Upgrade]:
    """Both clusters on the previous release, Ready; keys written to `upgraded`, and a writer started on it."""
    previous = previous_operator
    endpoint = (object_store / "endpoint").read_text().strip()
    archived = cluster_manifest(namespace, UPGRADED, 3)
    archived["spec"].update(
        image=previous.image,
        archive={"bucket": HISTORIES, "basePath": "e2e", "endpoint": endpoint, "credentials": {"secretName": SECRET}},
        snapshots={"schedule": "0 3 * * *", "retention": 2, "s3": {"bucket": SNAPSHOTS}},
    )
    shrinking = cluster_manifest(namespace, SHRINK, 3)
    shrinking["spec"]["image"] = previous.image
    apply(archived)
    apply(shrinking)
    upgraded, shrink = Cluster(namespace, UPGRADED), Cluster(namespace, SHRINK)
    wait_ready(UPGRADED, namespace)
    wait_ready(SHRINK, namespace)
    for i in range(KEYS):
        reply = upgraded.sidecars.request(f"pods/{UPGRADED}-{i % 3}", "PUT", f"_cluster/metadata/app/key-{i}", {"n": i})
        assert reply.status == 200, reply
    keys = every_key(upgraded, f"{UPGRADED}-0")
    writer = ContinuousWriter(upgraded.sidecars, UPGRADED, "across-the-upgrade")
    with writer:
        wait_until("a first acknowledged write", lambda: writer.ok_times, 60)
        yield Upgrade(previous, object_store, upgraded, shrink, keys, writer)


def committed_state(cluster: Cluster) -> dict[str, Any]:
    """The master's committed state through a Ready pod (a non-local read holds every acknowledged write)."""
    return cluster.sidecars.state(cluster.ready_pods()[0], local=False)


def lost_so_far(writer: ContinuousWriter, cluster: Cluster) -> list[str]:
    """The writes acknowledged so far that the committed state read after them lacks (the writer may still run:
    what it acknowledges after the read is not counted)."""
    acknowledged = dict(writer.acknowledged)
    kv = committed_state(cluster)["metadata"].get("kv") or {}
    return [key for key, n in acknowledged.items() if kv.get(key) != {"n": n}]


def node_images(cluster: Cluster) -> dict[str, str | None]:
    return {node["name"]: node.get("image") for node in cluster.status().get("nodes") or ()}


def packaged_release(cluster: Cluster, pod: str) -> str:
    """The release the sidecar's installed packages call themselves, asked in the pod itself."""
    program = "import importlib.metadata as m; print(m.version('coordinated-cluster'))"
    return kubectl("-n", cluster.namespace, "exec", pod, "-c", "sidecar", "--", "python", "-c", program).stdout.strip()


def take_snapshot(cluster: Cluster, request: str) -> str:
    """A snapshot into the bucket on request (the operator asks the master), as the procedure's first step; its
    name."""
    command = for_cluster(documented("kubectl annotate ccl/demo coordinated.dev/snapshot-request="), cluster)
    kubectl(*(re.sub(r"snapshot-request=\S+", f"snapshot-request={request}", arg) for arg in command))
    snapshots = wait_until(
        f"the snapshot {request} in the status",
        lambda: (s := cluster.status().get("snapshots") or {}).get("lastRequest") == request and s,
        timeout=180,
        interval=1,
    )
    taken: str = snapshots["lastSnapshot"]
    return taken


def test_the_previous_release_runs_clusters_with_its_chart_and_image(upgrade: Upgrade) -> None:
    previous = upgrade.previous
    (operator,) = operator_pods()
    assert operator.spec.containers[0].image == previous.image  # the chart's appVersion names its own image
    for cluster in (upgrade.upgraded, upgrade.shrink):
        pods = [f"{cluster.name}-{i}" for i in range(3)]
        assert node_images(cluster) == dict.fromkeys(pods, previous.image)
    assert {packaged_release(upgrade.upgraded, f"{UPGRADED}-{i}") for i in range(3)} == {previous.version}
    health = upgrade.upgraded.sidecars.request(f"pods/{UPGRADED}-1", "GET", "_cluster/health").body
    assert health["archive_problem"] is None, health
    taken = take_snapshot(upgrade.upgraded, "before-the-upgrade")
    upgrade.snapshots.append(taken)
    assert f"snap-{taken}.dat" in {p.name for p in objects(upgrade.store, SNAPSHOTS)}


def shrink_progress(shrink: Cluster) -> dict[str, Any]:
    """How far the scale-down went: the StatefulSet's size and the committed voting configuration."""
    statefulset = client.AppsV1Api().read_namespaced_stateful_set(shrink.name, shrink.namespace)
    state = shrink.sidecars.state(f"{shrink.name}-0", local=False)
    return {"replicas": statefulset.spec.replicas, "voters": voting_config(state), "exclusions": exclusions(state)}


def new_operator_ready() -> client.V1Pod | None:
    """An operator pod once every one is Ready, all of one release (the chart's Deployment is Recreate: never two
    releases at once; this release runs two replicas that elect a leader, the previous one a single pod)."""
    pods = operator_pods()
    if not pods or any(pod.metadata.deletion_timestamp is not None for pod in pods):
        return None
    if len({pod.spec.containers[0].image for pod in pods}) != 1:
        return None
    ready = all(any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or []) for pod in pods)
    return sorted(pods, key=lambda pod: pod.metadata.name)[0] if ready else None


def test_an_operator_upgraded_in_the_middle_of_a_scale_down_finishes_it(upgrade: Upgrade, figure: Figure) -> None:
    shrink, previous = upgrade.shrink, upgrade.previous
    (old_operator,) = operator_pods()
    excluded_before = len(shrink.events("ExcludeFromVoting"))
    shrink.scale(1)
    wait_until(
        "the old operator's first exclusion of this scale-down",
        lambda: len(shrink.events("ExcludeFromVoting")) > excluded_before or shrink.status().get("exclusions"),
        120,
        interval=0.2,
    )

    def upgrade_the_operator() -> None:
        apply_this_trees_crd()
        command = documented("helm upgrade")
        assert command[:3] == ["helm", "upgrade", "coordinated"], command
        helm("upgrade", RELEASE, *command[3:])

    started = time.monotonic()
    with ThreadPoolExecutor(1) as pool:
        helm_upgrade = pool.submit(upgrade_the_operator)
        wait_until(
            "the old operator's pod gone",
            lambda: old_operator.metadata.name not in {pod.metadata.name for pod in operator_pods()},
            300,
            interval=0.2,
        )
        handover = shrink_progress(shrink)
        helm_upgrade.result()
    new_operator = wait_until("the new operator Ready", new_operator_ready, 300, interval=1)
    # Nothing ran the scale-down from here until the new operator started: it is the new one's to finish.
    assert handover["replicas"] > 1 or handover["exclusions"] or handover["voters"] != {f"{SHRINK}-0"}, (
        f"the old operator finished the scale-down before it was replaced: {handover}"
    )
    assert new_operator.spec.containers[0].image == IMAGE  # this chart's appVersion
    status = wait_until("the new operator to finish at 1 node", lambda: shrink.settled(1), SETTLE_SECONDS, interval=1)
    state = committed_state(shrink)
    assert voting_config(state) == {f"{SHRINK}-0"}
    assert exclusions(state) == []
    assert status["votingConfig"] == [f"{SHRINK}-0"]
    assert shrink.ready_pods() == [f"{SHRINK}-0"]
    # Upgrading the operator changed no cluster's image: that is the next step, and the user's.
    assert set(node_images(upgrade.upgraded).values()) == {previous.image}
    figure(
        f"upgrade: operator {previous.version} -> {PROJECT_VERSION} in the middle of a scale-down 3 -> 1 (handed over "
        f"at {handover['replicas']} pods, voters {sorted(handover['voters'])}): finished "
        f"{time.monotonic() - started:.0f} s after the helm upgrade began"
    )


@dataclass
class RolloutWatch:
    """What a rollout looked like, sampled: each pod's replacement with the master just before it, and every mix of
    images status.nodes showed."""

    cluster: Cluster
    images: tuple[str, str]  # the two images a mix is made of
    uids: dict[str, str] = field(default_factory=dict)
    master: str | None = None
    replaced: list[tuple[str, str | None]] = field(default_factory=list)  # (pod, the master just before)
    seen_on: dict[str, set[str]] = field(default_factory=dict)  # image -> the pods seen running it (for messages)
    mixed: list[dict[str, str | None]] = field(default_factory=list)
    mixed_ready: int = 0  # samples of a mix in which every pod was Ready: a cluster of both releases, serving
    samples: int = 0

    def __post_init__(self) -> None:
        self.uids = {pod.metadata.name: pod.metadata.uid for pod in self.cluster.pods()}
        self.sample()

    def sample(self) -> None:
        self.samples += 1
        done = {pod for pod, _ in self.replaced}
        for pod in self.cluster.pods():
            name = pod.metadata.name
            if name not in done and (pod.metadata.deletion_timestamp or pod.metadata.uid != self.uids.get(name)):
                self.replaced.append((name, self.master))
            self.seen_on.setdefault(pod.spec.containers[0].image, set()).add(name)
        shown = node_images(self.cluster)
        ready = self.cluster.ready_pods()
        if set(shown.values()) == set(self.images):
            self.mixed.append(shown)
            self.mixed_ready += int(sorted(shown) == ready)
        master = self.cluster.sidecars.master_name(ready[0]) if ready else None
        if master is not None:
            self.master = master


def set_image(cluster: Cluster, image: str) -> None:
    """The documented upgrade (and rollback) of a cluster: its spec.image."""
    command = for_cluster(documented("kubectl patch ccl/demo"), cluster)
    kubectl(*(re.sub(r"coordinated-cluster:[^\"]+", image, arg) for arg in command))


def all_on(cluster: Cluster, image: str, watch: RolloutWatch) -> dict[str, Any] | None:
    """The status once every pod runs `image`, in status.nodes and in the pods, and the cluster settled at 3."""
    watch.sample()
    status = cluster.settled(3)
    if status is None or {node.get("image") for node in status.get("nodes") or ()} != {image}:
        return None
    return status if {pod.spec.containers[0].image for pod in cluster.pods()} == {image} else None


def test_an_upgrade_rolled_back_in_its_middle_returns_the_upgraded_pod_to_the_previous_release(
    upgrade: Upgrade, figure: Figure
) -> None:
    cluster, previous = upgrade.upgraded, upgrade.previous
    pods = [f"{UPGRADED}-{i}" for i in range(3)]
    watch = RolloutWatch(cluster, (previous.image, IMAGE))
    started = time.monotonic()
    set_image(cluster, IMAGE)

    def first_pod_upgrading() -> str | None:
        """The first pod replaced, once it is back on this release's image but not Ready yet: the operator waits for
        it to rejoin before it replaces another, so the rollback comes before any other pod is touched."""
        watch.sample()
        if len(watch.replaced) != 1:
            return None
        (first, _), ready = watch.replaced[0], cluster.ready_pods()
        found = {pod.metadata.name: pod for pod in cluster.pods()}.get(first)
        upgrading = found is not None and found.metadata.uid != watch.uids[first] and first not in ready
        return first if upgrading and found.spec.containers[0].image == IMAGE else None

    first = wait_until("the first pod recreated on this release's image", first_pod_upgrading, SETTLE_SECONDS, 0.2)
    set_image(cluster, previous.image)  # the rollback, in the middle of the upgrade
    wait_until("every pod on the previous image again", lambda: all_on(cluster, previous.image, watch), 300, 0.3)
    # The rollback restarts only the pod the upgrade had moved, and at most the next one in the roll: the first may
    # rejoin, and the operator replace the next, in the moment before it sees the rollback (one pod at a time all
    # the same; that pod comes back on the previous release). The third never restarts: no full roll.
    restarted = {pod for pod, _ in watch.replaced}
    assert first in restarted and len(restarted) <= 2, (watch.replaced, watch.seen_on)
    assert {pod.metadata.name: pod.metadata.uid for pod in cluster.pods() if pod.metadata.name not in restarted} == {
        name: uid for name, uid in watch.uids.items() if name not in restarted
    }
    assert {packaged_release(cluster, pod) for pod in pods} == {previous.version}
    lost = lost_so_far(upgrade.writer, cluster)
    assert not lost, f"acknowledged writes lost: {lost[:5]}"
    figure(
        f"upgrade: {first} recreated on {PROJECT_VERSION}, rolled back to {previous.version} in the middle of the "
        f"upgrade: every pod on {previous.version} again {time.monotonic() - started:.0f} s after the upgrade began"
    )


def test_the_operator_rolls_the_pods_to_this_release_followers_first_and_the_master_last(
    upgrade: Upgrade, figure: Figure
) -> None:
    cluster, previous, writer = upgrade.upgraded, upgrade.previous, upgrade.writer
    pods = [f"{UPGRADED}-{i}" for i in range(3)]
    watch = RolloutWatch(cluster, (previous.image, IMAGE))
    master_before = watch.master
    assert master_before in pods, master_before
    restarts_before = {event.metadata.uid for event in cluster.events("RestartPod")}

    started = time.monotonic()
    set_image(cluster, IMAGE)
    wait_until("every pod on this release's image, settled", lambda: all_on(cluster, IMAGE, watch), 600, 0.3)
    rollout = time.monotonic() - started
    time.sleep(2)  # some writes on the upgraded cluster
    writer.__exit__(None, None, None)

    # Followers first, the master last: every replaced pod but the last was not the master just before it went.
    assert sorted(pod for pod, _ in watch.replaced) == pods, watch.replaced
    *followers, (last, master_then) = watch.replaced
    assert all(pod != master for pod, master in followers), watch.replaced
    assert last == master_then == master_before, watch.replaced
    events = [event for event in cluster.events("RestartPod") if event.metadata.uid not in restarts_before]
    assert {event.message.split("restarting ", 1)[1].split(" ", 1)[0] for event in events} == set(pods)
    assert any(f"restarting {master_before} (the master, last)" in event.message for event in events), events
    # status.nodes showed which pod ran which image in the middle of it.
    assert watch.mixed, f"status.nodes never showed both images in {watch.samples} samples"
    assert watch.mixed_ready, f"never were all 3 pods Ready with both images, in {watch.samples} samples"
    assert {packaged_release(cluster, pod) for pod in pods} == {PROJECT_VERSION}

    # No acknowledged write lost; every key written before the upgrade kept its value and versions.
    state = committed_state(cluster)
    lost = writer.lost(state)
    assert not lost, f"{len(lost)} of {len(writer.acknowledged)} acknowledged writes lost, e.g. {lost[:5]}"
    now = every_key(cluster, pods[0])
    assert {key: now.get(key) for key in upgrade.keys} == upgrade.keys
    cluster_ready = cluster.condition("Ready")
    assert cluster_ready.get("status") == "True", cluster_ready
    listed = kubectl(*for_cluster(documented("kubectl get ccl demo"), cluster)).stdout
    assert dict(line.split() for line in listed.splitlines()) == dict.fromkeys(pods, IMAGE), listed

    # The archive and the snapshots work on the new release: each node archived its history on its way out, and
    # a snapshot on request lands beside the previous release's.
    for pod in pods:
        health = cluster.sidecars.request(f"pods/{pod}", "GET", "_cluster/health").body
        assert health["archive_problem"] is None, (pod, health)
    uuid = cluster.status()["clusterUUID"]
    assert len({p.parent.name for p in objects(upgrade.store, HISTORIES, f"e2e/{uuid}")}) == 3
    taken = take_snapshot(cluster, "after-the-upgrade")
    assert taken not in upgrade.snapshots
    stored = {p.name for p in objects(upgrade.store, SNAPSHOTS)}
    assert {f"snap-{name}.dat" for name in [*upgrade.snapshots, taken]} <= stored, stored

    figure(
        f"upgrade: rolling {previous.version} -> {PROJECT_VERSION} of 3 nodes (followers first, master last) in "
        f"{rollout:.0f} s; the writer across the whole upgrade: {len(writer.acknowledged)} acknowledged writes, "
        f"{writer.failures} failed or unanswered, none lost, longest gap {writer.longest_gap():.1f} s; status.nodes "
        f"mixed in {len(watch.mixed)} of {watch.samples} samples ({watch.mixed_ready} with every pod Ready)"
    )


def test_the_previous_operator_comes_back_with_helm_rollback_and_manages_the_upgraded_cluster(
    upgrade: Upgrade, figure: Figure
) -> None:
    cluster, previous = upgrade.upgraded, upgrade.previous
    command = documented("helm rollback")
    assert command[:3] == ["helm", "rollback", "coordinated"], command
    started = time.monotonic()
    helm("rollback", RELEASE, *command[3:])
    operator = wait_until(
        "the previous operator Ready",
        lambda: (pod := new_operator_ready()) and pod.spec.containers[0].image == previous.image and pod,
        300,
        interval=1,
    )
    # It reconciles the cluster of the newer release: a snapshot on request, and the cluster stays Ready.
    taken = take_snapshot(cluster, "after-the-operator-rollback")
    assert f"snap-{taken}.dat" in {p.name for p in objects(upgrade.store, SNAPSHOTS)}
    assert wait_until("the cluster settled at 3", lambda: cluster.settled(3), SETTLE_SECONDS, interval=1)
    assert set(node_images(cluster).values()) == {IMAGE}
    figure(
        f"upgrade: helm rollback to the {previous.version} operator ({operator.metadata.name}), which snapshots the "
        f"{PROJECT_VERSION} cluster: {time.monotonic() - started:.0f} s"
    )
