"""What this node knows of every node's release and wire version, and what follows from it: the cluster's
version, which features are on, the version barrier on join, and the `node_versions` the master publishes.

A node learns versions from the messages that carry them, by node id: a join request (`JoinRequest.release`,
`.wire_version`), a follower check and its answer (the master's and the follower's own, and the master's
table of every node's), and from the cluster state once it carries `node_versions`. A message of release
0.1.0 carries none: that node runs the first release (`wire_versions.UNVERSIONED`).

The cluster's members are the nodes of the state and the voters of its configurations: a voter that is away
(restarting, say) still counts, with its last known version, so that an upgrade is not taken as finished
while the last node of the older release restarts, and that node can still come back on it. A member whose
version is not known here counts as the first release: a feature is on only once every member is known to
have it.

`node_versions` is a field of the state gated on feature `node_versions` (the first one that needs it): the
master publishes it once every member has that feature, and from then on in every state. Publishing it is
what moves the cluster's version for good: the store writes the state in a format the previous release refuses
to load, and a node of a release older than the cluster's lowest can no longer join (the version barrier).
Until then a node of the previous release can join, leave and come back, and an upgraded node can be rolled
back: no state of the cluster holds anything the previous release would drop.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from coordinated.coordination.state import PLACEHOLDER_PREFIX, ClusterState, DiscoveryNode
from coordinated.coordination.wire_versions import (
    FEATURES,
    INITIAL,
    NODE_VERSIONS,
    UNVERSIONED,
    Feature,
    NodeVersion,
    lowest,
    newest,
    version_key,
)

_PRUNE_SLACK = 16


def reported(release: str, wire: int) -> NodeVersion:
    """The version a message reports: what it says, or the first release's when it says nothing (wire 0)."""
    return NodeVersion(release or UNVERSIONED.release, wire) if wire > 0 else UNVERSIONED


def members(state: ClusterState) -> list[str]:
    """The nodes of the state and the voters of its configurations (bootstrap placeholders aside)."""
    ids = dict.fromkeys(state.nodes)
    for node_id in (*state.last_committed_config.node_ids, *state.last_accepted_config.node_ids):
        if not node_id.startswith(PLACEHOLDER_PREFIX):
            ids.setdefault(node_id)
    return list(ids)


def published_versions(state: ClusterState) -> Mapping[str, NodeVersion]:
    versions = state.node_versions
    return {} if versions is msgspec.UNSET else versions


@dataclass(frozen=True, slots=True)
class VersionStatus:
    """What a node reports of versions (in its status): its own, the cluster's, and every member's."""

    version: NodeVersion  # this node's release and wire version
    # The lowest among the members (the nodes and the voters), an unknown one counted as the first release's.
    cluster_version: NodeVersion
    node_versions: Mapping[str, NodeVersion | None]  # by node id; None: not known to this node
    features: Mapping[str, bool]  # each feature after the first release's: on (every member has it) or not


class NodeVersions:
    def __init__(self, local: DiscoveryNode, version: NodeVersion | None = None) -> None:
        self.local = local
        self.version = version if version is not None else newest()  # this node's
        # node id -> as it was last reported to this node, and the version of the state this node held then: a
        # state newer than that which carries the node's version supersedes it (a follower learned an old version
        # from its master's table; the cluster moved since, and that node was upgraded meanwhile).
        self.known: dict[str, tuple[NodeVersion, int]] = {}

    def learn(self, node_id: str, version: NodeVersion, state: ClusterState) -> bool:
        """Record what a node reported while this node held `state`; whether it changed what this node knew."""
        if node_id == self.local.id or self.version_of(node_id, state) == version:
            return False
        self.known[node_id] = (version, state.version)
        return True

    def learn_table(self, table: Mapping[str, NodeVersion], state: ClusterState) -> bool:
        """A master's table of its nodes' versions (in its follower checks)."""
        changed = False
        for node_id, version in table.items():
            changed = self.learn(node_id, version, state) or changed
        return changed

    def prune(self, state: ClusterState) -> None:
        """Forget nodes long gone, keeping the members and a few others (joining nodes, say)."""
        if len(self.known) <= 2 * len(state.nodes) + _PRUNE_SLACK:
            return
        keep = set(members(state))
        for node_id in [node_id for node_id in self.known if node_id not in keep]:
            del self.known[node_id]

    # -- reading ---------------------------------------------------------------------------------------------

    def version_of(self, node_id: str, state: ClusterState) -> NodeVersion | None:
        """What this node knows of a node's version: reported to it, or published; None if neither."""
        if node_id == self.local.id:
            return self.version
        published = published_versions(state).get(node_id)
        known = self.known.get(node_id)
        if known is None or (published is not None and known[1] < state.version):
            return published
        return known[0]

    def cluster(self, state: ClusterState) -> dict[str, NodeVersion | None]:
        """Every member's version (None: not known here), by node id."""
        return {node_id: self.version_of(node_id, state) for node_id in members(state)}

    def cluster_version(self, state: ClusterState) -> NodeVersion:
        """The lowest version among the members, an unknown one counted as the first release's."""
        versions = [version or UNVERSIONED for version in self.cluster(state).values()]
        return lowest(versions) or self.version

    def enabled(self, feature: Feature, state: ClusterState) -> bool:
        """Whether every member is known to have `feature`."""
        if not self.version.has(feature):
            return False
        return all(version is not None and version.has(feature) for version in self.cluster(state).values())

    def lacking(self, feature: Feature, state: ClusterState) -> dict[str, NodeVersion | None]:
        """The members that lack `feature` (or whose version is not known here), by node name."""
        return {
            _name(node_id, state): version
            for node_id, version in self.cluster(state).items()
            if version is None or not version.has(feature)
        }

    def status(self, state: ClusterState) -> VersionStatus:
        features = {feature.name: self.enabled(feature, state) for feature in FEATURES if feature.id > INITIAL.id}
        return VersionStatus(self.version, self.cluster_version(state), self.cluster(state), features)

    def check_fields(self, state: ClusterState) -> dict[str, Any]:
        """A master's follower check: its version, and every node's while the state does not carry them yet."""
        table = self.table(state) if state.node_versions is msgspec.UNSET else None
        return {"release": self.version.release, "wire_version": self.version.wire, "node_versions": table}

    def table(self, state: ClusterState) -> dict[str, NodeVersion]:
        """Every node's known version, for the master's follower checks."""
        return {node_id: version for node_id in state.nodes if (version := self.version_of(node_id, state)) is not None}

    # -- the master's ----------------------------------------------------------------------------------------

    def to_publish(self, state: ClusterState) -> dict[str, NodeVersion] | msgspec.UnsetType:
        """`node_versions` for a state the master builds (its nodes and configurations final): every member's
        (the nodes and the voters, so that a voter that is away keeps its place in the cluster's version), once
        the feature is on, and always once the state it builds on carries them; UNSET before."""
        if state.node_versions is msgspec.UNSET and not self.enabled(NODE_VERSIONS, state):
            return msgspec.UNSET
        versions = {}
        for node_id in members(state):
            version = self.version_of(node_id, state)
            if version is not None:
                versions[node_id] = version
        return versions

    def candidate_problem(self, candidate: DiscoveryNode, version: NodeVersion, state: ClusterState) -> str | None:
        """Why this node votes (or pre-votes) for no such candidate: once its state carries the nodes' versions,
        a candidate older than every one of them could only win with the votes of nodes that hold that state,
        and, as master, would publish states without what its release does not know. A quorum of the voters
        accepted that state before it was committed, so such a candidate never gets an election quorum."""
        floor = lowest(list(published_versions(state).values()))
        if floor is None or version_key(version) >= version_key(floor):
            return None
        return (
            f"not voting for {candidate.name}, which runs release {version.describe()}: every node of this cluster "
            f"runs {floor.release} or later"
        )

    def join_problem(self, node: DiscoveryNode, version: NodeVersion, state: ClusterState) -> str | None:
        """The version barrier: once the state carries `node_versions`, a node older than the lowest version in
        it may not join (it would take the cluster's version back down). A voter that was away keeps its own
        entry there, so it can come back on the version it left with."""
        floor = lowest(list(published_versions(state).values()))
        if floor is None or version_key(version) >= version_key(floor):
            return None
        return (
            f"node [{node.name}] runs release {version.describe()}, but every node of this cluster runs "
            f"{floor.release} or later (the lowest, wire version {floor.wire}): a node may not join a cluster whose "
            f"nodes are all newer, since it would take the cluster back to an older release; run {floor.release} "
            "or later on it"
        )


def _name(node_id: str, state: ClusterState) -> str:
    node = state.nodes.get(node_id)
    return node.name if node is not None else node_id


def describe_versions(versions: Iterable[tuple[str, NodeVersion | None]]) -> str:
    return ", ".join(f"{name}: {version.describe() if version else 'unknown'}" for name, version in versions)


def version_to_api(version: NodeVersion, **extra: int) -> dict[str, Any]:
    """A node's version as the HTTP API shows it (Elasticsearch's `version.number`)."""
    return {"number": version.release, "wire_version": version.wire, **extra}


def versions_to_api(status: VersionStatus, state: ClusterState) -> dict[str, Any]:
    """The versions in `GET /_cluster/health`: the cluster's, every member's by name (null: not known to this
    node), and which features are on."""
    return {
        "cluster_version": version_to_api(status.cluster_version),
        "node_versions": {
            _name(node_id, state): version_to_api(version) if version is not None else None
            for node_id, version in status.node_versions.items()
        },
        "features": dict(status.features),
    }
