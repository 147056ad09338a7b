"""Wire versions: one integer per addition to what nodes say to each other (Elasticsearch's `TransportVersion`).

A node runs a release (`coordinated --version`, the package's version: "0.2.0") and speaks a wire version, an
integer that grows whenever a message, a request type, a field of a request or message, or a field of the
cluster state is added. Both are sent when a peer stream opens (`X-Coordinated-Release` and
`X-Coordinated-Wire-Version` on the stream's handshake) and when a node joins (`JoinRequest.release` and
`.wire_version`), and a master tells its followers every node's versions in its follower checks. Release 0.1.0
sent neither: a peer that sends no version runs wire version 1 (`INITIAL`), the first release's protocol.

The cluster's version is the lowest among its nodes (`node_versions`): a feature is on once every node of the
cluster speaks its wire version or a later one, and turns on by itself when the last one does. Until then a
request that needs it is refused at once (400 `feature_not_available_exception`, naming the feature and the
nodes that lack it), a message that needs it is not sent, and a state field it brings is not published.

Adding something to the wire (the procedure; docs/protocol.md, "Versions and feature gates", says the same):

1. Declare a feature here, one line at the end: `NAME = _feature(<last id + 1>, "name", "<release>", "what")`,
   with the release this tree becomes (the `version` in pyproject.toml). Ids only grow; never reuse or reorder
   one, and never remove a line: a feature of a released version stays declared.
2. Gate what needs it, where the gates live:
   - a request type, or a new field of a request or of a transaction op: one line in
     `feature_gates.REQUEST_GATES`; an older master cannot decode it, so it must never be forwarded to one;
   - a field of the cluster state: give it the default `msgspec.UNSET` (an older release leaves it out, and
     drops it if it is there), list it in `feature_gates.STATE_FIELD_GATES`, and set it only when the feature
     is on (`NodeVersions.enabled`); a state that carries it is written in the store's next format (see
     `sidecar/.../storage/state_store.py`), which an older release refuses to load instead of dropping it;
   - a new message type: send it only to peers whose wire version has the feature
     (`NodeVersions.version_of`); an older node cannot decode it.
   A new field of an existing message that older nodes may ignore (msgspec skips unknown fields, except in
   `TxnOp` and `TxnCompare`) needs no gate, but still a feature line if a newer node relies on it being there.
3. Test it in a mixed cluster: the simulator's mixed-version schedules (tests/coordination) and the
   previous-release tests (tests/upgrades), which run the release named in `compat/previous-release`.

`MINIMUM_COMPATIBLE` is the oldest wire version this release talks to: raise it (to the first wire version of
the release before the previous one, say) only together with a documented upgrade path; a peer below it is
refused at the stream's handshake, naming both versions.

This module imports only msgspec, so that every part of the project (the core, the sidecar, the audit, the
tools) can name versions without importing the rest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated

import msgspec

# How a release is written: the package's version ("0.2.0", "0.2.0rc1", "0+unknown" when not installed).
Release = Annotated[str, msgspec.Meta(max_length=64)]
WireVersion = Annotated[int, msgspec.Meta(ge=0, le=(1 << 31) - 1)]


@dataclass(frozen=True)
class Feature:
    """What a wire version brings. `id` is the wire version; `release` the first release that has it."""

    id: int
    name: str
    release: str
    description: str

    def describe(self) -> str:
        return f"[{self.name}] (wire version {self.id}, release {self.release})"


FEATURES: list[Feature] = []


def _feature(wire_id: int, name: str, release: str, description: str) -> Feature:
    if FEATURES and wire_id != FEATURES[-1].id + 1:
        raise ValueError(f"feature [{name}]: wire version {wire_id} must follow {FEATURES[-1].id}")
    if any(feature.name == name for feature in FEATURES):
        raise ValueError(f"feature [{name}] is declared twice")
    feature = Feature(wire_id, name, release, description)
    FEATURES.append(feature)
    return feature


# -- the registry: one line per feature, in wire-version order (see the procedure above) --------------------
INITIAL = _feature(1, "initial", "0.1.0", "the protocol of release 0.1.0, which sends no version")
NODE_VERSIONS = _feature(2, "node_versions", "0.2.0", "every node's release and wire version in the cluster state")
# Ungated (client.UNGATED_WIRE_ADDITIONS): a master of an older release ignores `limit` and deletes every key.
BOUNDED_PREFIX_DELETE = _feature(3, "bounded_prefix_delete", "0.2.0", "a prefix delete's `limit`, and `more`")
# ------------------------------------------------------------------------------------------------------------

CURRENT: int = FEATURES[-1].id  # the wire version this tree speaks
MINIMUM_COMPATIBLE: int = INITIAL.id  # the oldest wire version this tree talks to
UNVERSIONED_RELEASE = INITIAL.release  # the release of a peer that sends no version


def feature_named(name: str) -> Feature | None:
    return next((feature for feature in FEATURES if feature.name == name), None)


def features_above(wire_version: int) -> list[Feature]:
    """The features a node of `wire_version` lacks, oldest first."""
    return [feature for feature in FEATURES if feature.id > wire_version]


class NodeVersion(msgspec.Struct, frozen=True, array_like=True):
    """A node's release and wire version, as it reported them (`["0.2.0", 2]` on the wire and in the state)."""

    release: Release
    wire: WireVersion

    def describe(self) -> str:
        return f"{self.release} (wire version {self.wire})"

    def has(self, feature: Feature) -> bool:
        return self.wire >= feature.id


# A peer that sends no version: the first release.
UNVERSIONED = NodeVersion(UNVERSIONED_RELEASE, INITIAL.id)


def newest() -> NodeVersion:
    """This tree's wire version, with the release of its newest feature: a node's version where the shell does
    not give one (the simulator, tests); the sidecar gives its package's release."""
    return NodeVersion(FEATURES[-1].release, CURRENT)


_NUMBERS = re.compile(r"\d+")


def release_key(release: str) -> tuple[int, ...]:
    """A release as numbers to compare ("0.10.0" > "0.9.1"); the leading numbers of its dotted parts."""
    key: list[int] = []
    for part in release.split("."):
        match = _NUMBERS.match(part)
        if match is None:
            break
        key.append(int(match.group()))
    return tuple(key)


def version_key(version: NodeVersion) -> tuple[int, tuple[int, ...]]:
    """The order of node versions: by wire version, then by release (a patch release may keep the wire)."""
    return (version.wire, release_key(version.release))


def lowest(versions: list[NodeVersion] | tuple[NodeVersion, ...]) -> NodeVersion | None:
    return min(versions, key=version_key) if versions else None
