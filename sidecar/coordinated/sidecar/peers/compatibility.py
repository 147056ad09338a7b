"""The transport's version handshake: each stream's handshake carries the sender's release and wire version
(`X-Coordinated-Release`, `X-Coordinated-Wire-Version`; release 0.1.0 sends neither, and is taken for wire
version 1). A sender below this node's `MINIMUM_COMPATIBLE` is refused at the handshake (400), naming both
versions, and both nodes show the refusal in their health (see `receiver`). A frame this node cannot decode
(a newer node's message type, or a request type or field it does not know) never closes the stream that
carries it (see `framing.read_undecodable`). A peer of an older version that has no stream endpoint is sent
POSTs instead (see `sender`).
"""

from __future__ import annotations

from collections.abc import Mapping

from coordinated.coordination.wire_versions import MINIMUM_COMPATIBLE, UNVERSIONED, NodeVersion

RELEASE_HEADER = "X-Coordinated-Release"
WIRE_VERSION_HEADER = "X-Coordinated-Wire-Version"


def version_headers(version: NodeVersion) -> dict[str, str]:
    return {RELEASE_HEADER: version.release, WIRE_VERSION_HEADER: str(version.wire)}


def peer_version(headers: Mapping[str, str]) -> NodeVersion | str:
    """The version a stream's handshake says the peer runs (none: release 0.1.0's), or why it cannot be read."""
    wire, release = headers.get(WIRE_VERSION_HEADER), headers.get(RELEASE_HEADER, "")
    if wire is None:
        return UNVERSIONED
    if not wire.isascii() or not wire.isdigit() or len(wire) > 9 or len(release) > 64:
        return f"the {WIRE_VERSION_HEADER} header [{wire[:20]}] is not a wire version"
    return NodeVersion(release or UNVERSIONED.release, int(wire))


def too_old_problem(peer: NodeVersion, own: NodeVersion, minimum: int = MINIMUM_COMPATIBLE) -> str | None:
    """Why a peer of this version is refused at the handshake (naming both versions), if it is."""
    if peer.wire >= minimum:
        return None
    return (
        f"the peer runs release {peer.describe()}, below wire version {minimum}, the oldest that this node "
        f"(release {own.describe()}) talks to: upgrade the peer"
    )
