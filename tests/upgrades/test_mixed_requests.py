"""A cluster in the middle of an upgrade, with real processes of the previous release and of this one: every request
type of the client API through a node of each release while the master runs the other; snapshots taken by one
release and restored by the other; a node rolled back before the cluster's version moved rejoins; a request that
needs a feature some node lacks is refused at once by the upgraded node, naming the feature; and every node shows
each node's version.

One cluster goes through the phases in turn (the master on the previous release, then on this one), so the
tests of this module share it and run in this order; each one brings the cluster to the phase it needs."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mixed import Mixed

from coordinated.coordination import feature_gates
from coordinated.coordination.wire_versions import ACCESS_CONTROL, CURRENT, NODE_VERSIONS
from coordinated.release import installed_release
from coordinated.tools.localcluster import FAST_SETTINGS, LocalNode
from coordinated.tools.previous_release import PreviousRelease

pytestmark = pytest.mark.timeout(600)
NEW = {"number": installed_release(), "wire_version": CURRENT}
# For each feature a request gate of `feature_gates.REQUEST_GATES` names: a request that needs it (method, path,
# body), sent through an upgraded node while the master runs the previous release. The nodes of this module also
# gate prefix deletes on `node_versions` (COORDINATED_TEST_REQUEST_GATES), so that there is one before this
# release has a gate of its own.
GATED_EXAMPLES: dict[str, tuple[str, str, Any]] = {}
TEST_HOOK_EXAMPLE = (NODE_VERSIONS.name, ("DELETE", "/_cluster/metadata?prefix=gated/", None))


def test_every_request_gate_has_an_example_here() -> None:
    gated = {feature.name for feature, _ in feature_gates.REQUEST_GATES}
    assert gated <= set(GATED_EXAMPLES), f"add a request of {sorted(gated - set(GATED_EXAMPLES))} to GATED_EXAMPLES"


@pytest.fixture(scope="module")
def mixed(previous_release: PreviousRelease, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mixed]:
    """Three nodes of the previous release; the tests upgrade and roll back nodes as their phase needs. Nodes of
    this release treat prefix deletes as gated on `node_versions` (a test hook: see feature_gates)."""
    work = tmp_path_factory.mktemp("mixed")
    (work / "repo").mkdir()
    patch = pytest.MonkeyPatch()
    patch.setenv("COORDINATED_TEST_REQUEST_GATES", f"delete_prefix:{NODE_VERSIONS.name}")
    cluster = Mixed(work / "cluster", previous_release, {**FAST_SETTINGS, "path.repo": str(work / "repo")})
    cluster.repo = work / "repo"  # type: ignore[attr-defined]
    try:
        cluster.bootstrap_old(3)
        yield cluster
    finally:
        cluster.stop_all()
        patch.undo()


def master_old_with_a_new_follower(mixed: Mixed) -> tuple[LocalNode, LocalNode, LocalNode]:
    """(the master, of the previous release; a follower of this one; a follower of the previous one)."""
    while True:
        master = mixed.master()
        if mixed.runs_old(master):
            break
        mixed.roll_back(master)  # the cluster has not moved: a node of this release can be rolled back
        mixed.wait_joined(3)
    followers = [node for node in mixed.nodes() if node is not master]
    new = [node for node in followers if not mixed.runs_old(node)]
    if not new:
        mixed.upgrade(followers[0])
        new = [followers[0]]
    mixed.wait_joined(3)
    old = next(node for node in followers if node not in new)
    if not mixed.runs_old(old):
        mixed.roll_back(old)
    master = mixed.wait_joined(3)
    assert mixed.runs_old(master), "the master changed"
    return master, new[0], old


def master_new_with_an_old_follower(mixed: Mixed) -> tuple[LocalNode, LocalNode]:
    """(the master, of this release; a follower of the previous one)."""
    nodes = mixed.nodes()
    old = nodes[-1]
    for node in nodes[:-1]:
        if mixed.runs_old(node):
            mixed.upgrade(node)
            mixed.wait_joined(3)
    if not mixed.runs_old(old):
        mixed.roll_back(old)
        mixed.wait_joined(3)
    master = mixed.master()
    while mixed.runs_old(master):  # the old node leads: a restart (on its release) moves the mastership
        mixed.restart(master, mixed.old_python)
        master = mixed.wait_joined(3)
    return master, old


def call(
    node: LocalNode, method: str, path: str, body: Any = None, ok: tuple[int, ...] = (200,), retry: bool = False
) -> Any:
    """One request, answered with a status of `ok`; with `retry`, an idempotent one is sent again while the
    cluster has no master (as a reconfiguration's new term briefly leaves it)."""
    deadline = time.monotonic() + 30
    while True:
        status, answer = node.request(method, path, body, timeout=30)
        if not (retry and status == 503 and time.monotonic() < deadline):
            break
        time.sleep(0.2)
    assert status in ok, (node.name, method, path, status, answer)
    return answer


def add_exclusion_past_the_previous_releases_stall(node: LocalNode, name: str) -> None:
    """An exclusion through `node` while the master runs the previous release, which looks at its voting
    configuration again only after a publication. When the one voter left gave it no vote in its term (it stood
    in the same term at the bootstrap, as it often does) and applied the exclusion's state after the others, the
    exclusion waits for the next publication: a write is one. This release looks again when that voter applies
    (tests/coordination/test_scenarios.py has the case)."""
    deadline = time.monotonic() + 90
    while True:
        path = f"/_cluster/voting_config_exclusions?node_names={name}&timeout=10s"
        status, answer = node.request("POST", path, timeout=30)
        if status == 200:
            return
        assert status == 503 and time.monotonic() < deadline, (node.name, path, status, answer)
        call(node, "PUT", "/_cluster/metadata/a-publication", 1, retry=True)
        time.sleep(0.2)


def every_request_type(
    node: LocalNode, others: list[LocalNode], tag: str, repo: Path, master_runs_previous_release: bool
) -> None:
    """Each request type of the client API through `node`, checked as a cluster of one release answers it;
    `others`: the master, then the other follower."""
    k = f"/_cluster/metadata/{tag}"
    put = call(node, "PUT", f"{k}/a", {"v": 1})
    version = put["version"]
    assert call(node, "GET", f"{k}/a") == {
        "key": f"{tag}/a",
        "value": {"v": 1},
        "version": version,
        "create_version": version,
    }
    assert call(node, "GET", f"{k}/a?local=true")["value"] == {"v": 1}
    assert call(node, "PUT", f"{k}/a?if_version={version}", 2)["version"] > version
    assert (
        call(node, "PUT", f"{k}/a?if_version={version}", 3, ok=(409,))["error"]["type"]
        == "version_conflict_engine_exception"
    )
    assert call(node, "PUT", f"{k}/a?op_type=create", 4, ok=(409,))["status"] == 409
    assert call(node, "PUT", f"{k}/b?op_type=create", 5)["key"] == f"{tag}/b"
    assert call(node, "PUT", f"{k}/c?prev_value=true", 6)["prev"] is None
    assert call(node, "DELETE", f"{k}/c")["key"] == f"{tag}/c"
    call(node, "DELETE", f"{k}/c")  # a delete of a missing key changes nothing, and says so with 200
    call(node, "GET", f"{k}/c", ok=(404,))
    txn = {
        "compare": [{"key": f"{tag}/a", "value": 2}],
        "success": [
            {"op": "put", "key": f"{tag}/t", "value": 7},
            {"op": "get", "key": f"{tag}/a"},
            {"op": "delete", "key": f"{tag}/b"},
        ],
        "failure": [],
    }
    answer = call(node, "POST", "/_cluster/metadata/_txn", txn)
    assert answer["succeeded"] is True and [r["op"] for r in answer["results"]] == ["put", "get", "delete"]
    listed = call(node, "GET", f"/_cluster/metadata?prefix={tag}/&limit=1")
    assert [entry["key"] for entry in listed["keys"]] == [f"{tag}/a"] and listed["more"] is True
    rest = call(node, "GET", f"/_cluster/metadata?prefix={tag}/&after={listed['next']}&keys_only=true")
    assert [entry["key"] for entry in rest["keys"]] == [f"{tag}/t"]
    assert call(node, "GET", f"/_cluster/metadata?prefix={tag}/&count_only=true&local=true")["count"] == 2
    watched = call(node, "GET", f"/_cluster/metadata/_watch?prefix={tag}/&after_version={version}&timeout=1s")
    assert f"{tag}/t" in {event["key"] for event in watched["events"]}
    stream_url = f"{node.url}/_cluster/metadata/_watch?stream=true&prefix={tag}/"
    with httpx.stream("GET", stream_url, timeout=10) as stream:  # from now on
        assert stream.status_code == 200
        call(node, "PUT", f"{k}/s", "streamed")
        line = next(line for line in stream.iter_lines() if '"put"' in line)
        assert '"streamed"' in line and f'"{tag}/s"' in line
    # Sessions and an ephemeral key.
    session = call(node, "POST", "/_sessions", {"ttl": "30s"}, ok=(201,))
    call(node, "PUT", f"/_sessions/{session['id']}/_keepalive")
    assert session["id"] in {entry["id"] for entry in call(node, "GET", "/_sessions")["sessions"]}
    call(node, "PUT", f"{k}/e?session={session['id']}", 8)
    call(node, "DELETE", f"/_sessions/{session['id']}")
    call(node, "GET", f"{k}/e", ok=(404,))  # ended with its session
    bound = call(node, "POST", "/_sessions", {"node": others[0].name}, ok=(201,))
    call(node, "DELETE", f"/_sessions/{bound['id']}")
    # Dynamic settings, set and reset.
    call(node, "PUT", "/_cluster/settings", {"persistent": {"cluster.metadata.max_value_size": "2mb"}})
    assert (
        call(node, "GET", "/_cluster/state")["metadata"]["persistent_settings"]["cluster.metadata.max_value_size"]
        == "2mb"
    )
    assert "persistent" in call(node, "GET", "/_cluster/settings")  # this node's applied settings
    call(node, "PUT", "/_cluster/settings", {"persistent": {"cluster.metadata.max_value_size": None}})
    # Reads of the cluster.
    assert call(node, "GET", "/_cluster/state")["master_node"] is not None
    assert call(node, "GET", "/_cluster/health")["number_of_nodes"] == 3
    assert call(node, "GET", "/_cat/master?format=json")[0]["id"]
    assert call(node, "GET", "/")["name"] == node.name
    status, history = node.get("/_history?after_seq=0")
    assert status == 200 and '"type"' in str(history)
    assert node.get("/readyz")[0] == 200 and node.get("/healthz")[0] == 200
    assert node.get("/metrics")[0] == 200
    # A snapshot repository: registered, listed, removed.
    call(node, "PUT", f"/_snapshot/r-{tag}", {"type": "fs", "settings": {"location": str(repo / tag)}})
    assert f"r-{tag}" in call(node, "GET", "/_snapshot")
    call(node, "DELETE", f"/_snapshot/r-{tag}")
    # Voting configuration exclusions, added and cleared (last: the reconfiguration may start a new term, during
    # which the cluster has no master for a moment).
    if master_runs_previous_release:
        add_exclusion_past_the_previous_releases_stall(node, others[-1].name)
    else:
        call(node, "POST", f"/_cluster/voting_config_exclusions?node_names={others[-1].name}&timeout=30s", retry=True)
    call(node, "DELETE", "/_cluster/voting_config_exclusions?wait_for_removal=false", retry=True)
    assert (
        call(node, "GET", "/_cluster/state", retry=True)["metadata"]["cluster_coordination"]["voting_config_exclusions"]
        == []
    )


def restore_through(taker: LocalNode, restorer: LocalNode, tag: str, repo: Path) -> None:
    """A snapshot taken through one node (it writes the file) and restored through another (it reads it)."""
    key = f"/_cluster/metadata/{tag}/snap"
    call(taker, "PUT", f"/_snapshot/s-{tag}", {"type": "fs", "settings": {"location": str(repo / f"s-{tag}")}})
    call(taker, "PUT", key, "in the snapshot")
    call(taker, "PUT", f"/_snapshot/s-{tag}/one?wait_for_completion=true")
    call(taker, "PUT", key, "after the snapshot")
    listed = call(restorer, "GET", f"/_snapshot/s-{tag}/_all")
    assert [entry["snapshot"] for entry in listed["snapshots"]] == ["one"] and listed["snapshots"][0][
        "state"
    ] == "SUCCESS"
    call(restorer, "POST", f"/_snapshot/s-{tag}/one/_restore")
    assert call(restorer, "GET", key)["value"] == "in the snapshot"
    call(restorer, "DELETE", f"/_snapshot/s-{tag}/one")
    call(restorer, "DELETE", f"/_snapshot/s-{tag}")


def test_through_an_upgraded_node_while_the_master_runs_the_previous_release(mixed: Mixed) -> None:
    master, new, old = master_old_with_a_new_follower(mixed)
    every_request_type(new, [master, old], "a", mixed.repo, master_runs_previous_release=True)  # type: ignore[attr-defined]


def test_a_snapshot_of_the_previous_release_is_restored_through_this_one_and_the_other_way(mixed: Mixed) -> None:
    _, new, old = master_old_with_a_new_follower(mixed)
    restore_through(old, new, "from-old", mixed.repo)  # type: ignore[attr-defined]
    restore_through(new, old, "from-new", mixed.repo)  # type: ignore[attr-defined]


def test_a_request_that_needs_a_feature_the_master_lacks_is_refused_at_once_naming_it(mixed: Mixed) -> None:
    master, new, old = master_old_with_a_new_follower(mixed)
    started = time.monotonic()
    status, body = new.request("DELETE", "/_cluster/metadata?prefix=gated/", timeout=30)
    elapsed = time.monotonic() - started
    assert status == 400 and body["error"]["type"] == "feature_not_available_exception", body
    reason = body["error"]["reason"]
    assert (
        f"feature [{NODE_VERSIONS.name}] (wire version {NODE_VERSIONS.id}, release {NODE_VERSIONS.release})" in reason
    )
    # The master said which release it runs (none: 0.1.0); the other node of the previous release never spoke to
    # this one, and the master of that release does not pass the nodes' versions on.
    assert f"{master.name} (0.1.0 (wire version 1))" in reason and f"{old.name} (version unknown)" in reason
    # Refused where it arrived, from the node's own knowledge (the simulator shows it is answered in the same step,
    # without a message): never forwarded to a master that cannot decode it, which would close the stream.
    assert master.log_path is not None and "undecodable" not in master.log_path.read_text()
    print(f"refused in {elapsed:.3f}s")


def test_access_control_is_refused_through_an_upgraded_node_while_the_master_lacks_it_naming_it(mixed: Mixed) -> None:
    """Changes of roles, role mappings and quotas, and a session's prefix, need [access_control]: refused where
    they arrive, with the feature and the nodes that lack it named (reads show the built-in roles and no quota);
    a session without a prefix works as before."""
    master, new, _ = master_old_with_a_new_follower(mixed)
    role = {"keys": [{"prefixes": ["app/"], "privileges": ["read"]}]}
    for method, path, body in (
        ("PUT", "/_security/role/app", role),
        ("DELETE", "/_security/role_mapping/app", None),
        ("PUT", "/_quota/app", {"prefix": "app/", "max_keys": 10}),
        ("POST", "/_sessions", {"ttl": "10s", "prefix": "app/"}),
    ):
        status, answer = new.request(method, path, body, timeout=30)
        assert status == 400 and answer["error"]["type"] == "feature_not_available_exception", (path, answer)
        reason = answer["error"]["reason"]
        assert f"feature [{ACCESS_CONTROL.name}]" in reason and f"{master.name} (0.1.0" in reason, reason
    status, answer = new.request("POST", "/_sessions", {"ttl": "10s"}, timeout=30)
    assert status == 201, answer
    call(new, "DELETE", f"/_sessions/{answer['id']}")


def test_every_node_shows_every_nodes_version_and_the_clusters(mixed: Mixed) -> None:
    master, new, _ = master_old_with_a_new_follower(mixed)
    deadline = time.monotonic() + 10
    while True:
        health = mixed.health(new)
        versions = health["node_versions"]
        if all(versions.get(node.name) for node in (master, new)) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert versions[new.name] == NEW and versions[master.name] == {"number": "0.1.0", "wire_version": 1}
    assert health["cluster_version"] == {"number": "0.1.0", "wire_version": 1}
    assert not any(health["features"].values()) and NODE_VERSIONS.name in health["features"]
    assert call(new, "GET", "/")["version"] == {**NEW, "minimum_wire_compatibility_version": 1}
    rows = {row["name"]: row for row in call(new, "GET", "/_cat/nodes?format=json")}
    assert rows[master.name]["master"] == "*" and rows[master.name]["version"] == "0.1.0"
    assert rows[new.name]["version"] == installed_release() and rows[new.name]["wire_version"] == CURRENT


def test_a_node_rolled_back_before_the_cluster_moved_rejoins(mixed: Mixed) -> None:
    master, new, _ = master_old_with_a_new_follower(mixed)
    call(master, "PUT", "/_cluster/metadata/rollback/before", 1)
    mixed.roll_back(new)
    master = mixed.wait_joined(3)
    assert call(new, "GET", "/_cluster/metadata/rollback/before")["value"] == 1
    call(new, "PUT", "/_cluster/metadata/rollback/after", 2)
    assert call(master, "GET", "/_cluster/metadata/rollback/after")["value"] == 2
    assert all(mixed.runs_old(node) for node in mixed.nodes())


def test_through_a_node_of_the_previous_release_while_the_master_runs_this_one(mixed: Mixed) -> None:
    master, old = master_new_with_an_old_follower(mixed)
    every_request_type(
        old,
        [master, next(n for n in mixed.nodes() if n not in (master, old))],
        "b",
        mixed.repo,  # type: ignore[attr-defined]
        master_runs_previous_release=False,
    )
    # The cluster has not moved: a node of the previous release is still among its nodes.
    assert not any(mixed.health(master)["features"].values())
    # The prefix delete that the gate refused before is refused by this master too, naming the old node.
    status, body = master.request("DELETE", "/_cluster/metadata?prefix=gated/", timeout=30)
    assert status == 400 and f"{old.name} (0.1.0 (wire version 1))" in body["error"]["reason"]


def test_once_the_last_node_is_upgraded_the_gated_request_works_by_itself(mixed: Mixed) -> None:
    master, old = master_new_with_an_old_follower(mixed)
    mixed.upgrade(old)
    master = mixed.wait_joined(3)
    mixed.wait_moved(master)
    for node in mixed.nodes():
        assert call(node, "DELETE", "/_cluster/metadata?prefix=gated/")["deleted"] == 0
