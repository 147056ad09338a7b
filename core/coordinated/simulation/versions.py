"""Nodes of older releases in the simulator: what a node of an older wire version makes of a message, and the
checks that the gated state fields (`feature_gates.STATE_FIELD_GATES`) are never lost.

A simulated node of an older version runs this tree's code with an older version (`SimNode.version`). What that
release would not send or understand is modelled at its doors: the version fields are stripped from what it
sends (release 0.1.0 sends none), and a field gated on a feature it lacks from every message it receives, as
release 0.1.0's decoder skips the fields it does not know. Its storage refuses to start it on a state that holds such a field, as release
0.1.0's store refuses the format that holds them (`can_start`).

The checks (`GatedFieldWatch`): a master never publishes a state carrying a gated field to a node it knows lacks the
feature (it would drop it), and once a committed state of a cluster carries a gated field, every later committed
state of that cluster carries it (an older master that took over would have lost it). A node it does not know to
be older may still get one (a node restarted on the previous release, before its first follower check tells the
master so): it drops the field, and the second check proves that this costs nothing, because such a node never
leads the cluster (`node_versions.candidate_problem`).
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from coordinated.coordination import messages as m
from coordinated.coordination.feature_gates import STATE_FIELD_GATES
from coordinated.coordination.state import ClusterState, ClusterStateDiff
from coordinated.coordination.wire_versions import NODE_VERSIONS, NodeVersion

# The version fields of messages (wire_versions): what a node that lacks NODE_VERSIONS neither sends nor reads.
_VERSION_FIELDS: dict[type, dict[str, object]] = {
    m.JoinRequest: {"release": "", "wire_version": 0},
    m.FollowerCheck: {"release": "", "wire_version": 0, "node_versions": None},
    m.FollowerCheckResponse: {"release": "", "wire_version": 0},
    m.PreVoteRequest: {"release": "", "wire_version": 0},
    m.StartJoinRequest: {"release": "", "wire_version": 0},
}


def gated_fields_set(state: ClusterState | ClusterStateDiff) -> list[str]:
    """The gated fields a state or a diff carries."""
    unset = (msgspec.UNSET, None)
    return [name for name in STATE_FIELD_GATES if getattr(state, name, msgspec.UNSET) not in unset]


def as_sent_by(message: m.Message, version: NodeVersion) -> m.Message:
    """`message` as a node of `version` sends it: release 0.1.0 sends no version fields (nor the table of the
    nodes' versions in its follower checks)."""
    defaults = _VERSION_FIELDS.get(type(message))
    if defaults is not None and not version.has(NODE_VERSIONS):
        return msgspec.structs.replace(message, **defaults)
    return message


def as_decoded_by(message: m.Message, version: NodeVersion) -> m.Message:
    """`message` as a node of `version` decodes it: without the gated fields of features it lacks."""
    lacking = [name for name, feature in STATE_FIELD_GATES.items() if not version.has(feature)]
    if isinstance(message, m.PublishRequest) and lacking:
        state = message.state
        if state is not None and any(getattr(state, name) is not msgspec.UNSET for name in lacking):
            state = state.replace(**dict.fromkeys(lacking, msgspec.UNSET))
        diff = message.diff
        if diff is not None and any(getattr(diff, name) is not None for name in lacking):
            diff = msgspec.structs.replace(diff, **dict.fromkeys(lacking, None))
        return msgspec.structs.replace(message, state=state, diff=diff)
    defaults = _VERSION_FIELDS.get(type(message))
    if defaults is not None and not version.has(NODE_VERSIONS):
        return msgspec.structs.replace(message, **defaults)
    return message


def can_start(version: NodeVersion, accepted: ClusterState | None) -> str | None:
    """Why a node of `version` refuses to start on this stored state (its store's format is newer), or None."""
    if accepted is None:
        return None
    lacking = [name for name in gated_fields_set(accepted) if not version.has(STATE_FIELD_GATES[name])]
    if not lacking:
        return None
    return f"the stored state holds {lacking}, written in a format release {version.release} does not read"


class GatedFieldWatch:
    """Watches publications and applied states for a lost gated field; `violation` is called with the reason."""

    def __init__(self, violation: Callable[[str], None]) -> None:
        self.violation = violation
        # cluster uuid -> per gated field, the lowest committed version that carried it
        self._carried_since: dict[str, dict[str, int]] = {}

    def published(
        self, sender: str, target: str, actual: NodeVersion, known: NodeVersion | None, message: m.Message
    ) -> None:
        """A message from `sender` to `target`, which runs `actual` and which `sender` knows as `known` (None:
        not at all). A gated field may reach a node that lacks it only when the sender had every reason to think
        it has it (it restarted on an older release since it last said otherwise)."""
        if not isinstance(message, m.PublishRequest):
            return
        carried = gated_fields_set(message.state) if message.state is not None else []
        carried += gated_fields_set(message.diff) if message.diff is not None else []
        for name in carried:
            feature = STATE_FIELD_GATES[name]
            if not actual.has(feature) and (known is None or not known.has(feature)):
                knew = f"knows it runs {known.describe()}" if known is not None else "does not know its version"
                self.violation(
                    f"{sender} published version {message.version} with gated field [{name}] to {target}, which runs "
                    f"release {actual.describe()}, without feature [{feature.name}], and which {sender} {knew}"
                )

    def applied(self, node: str, state: ClusterState) -> None:
        """A committed state applied on a node: once a field was carried, it must stay."""
        since = self._carried_since.setdefault(state.cluster_uuid, {})
        carried = set(gated_fields_set(state))
        for name in carried:
            since[name] = min(since.get(name, state.version), state.version)
        for name, version in since.items():
            if name not in carried and state.version > version:
                self.violation(
                    f"{node} applied version {state.version} of cluster {state.cluster_uuid} without gated field "
                    f"[{name}], which committed version {version} carried: it was lost"
                )
