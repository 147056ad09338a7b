"""The peer protocol's messages. Every message is one-way; a reply is a message sent back to the sender.

They are tagged msgspec structs, so the sidecar's transport encodes and validates them without
hand-written serialization, and the simulator passes them around as they are.
"""

from __future__ import annotations

from typing import Any

import msgspec

from coordinated.coordination.client import DEFAULT_REQUEST_TIMEOUT_MS, ClientResult
from coordinated.coordination.history import NO_CLUSTER_UUID
from coordinated.coordination.requests import AnyRequest
from coordinated.coordination.state import ENCODE_HOOK, ClusterState, ClusterStateDiff, DiscoveryNode, Long
from coordinated.coordination.wire_versions import NodeVersion, Release, WireVersion


class Join(msgspec.Struct, frozen=True):
    """A vote by `voter_id` for `target_id` as master in `term`."""

    voter_id: str
    target_id: str
    term: Long
    last_accepted_term: Long
    last_accepted_version: Long


class _Message(msgspec.Struct, frozen=True, tag_field="type"):
    pass


class PeersRequest(_Message, frozen=True, tag="peers"):
    source: DiscoveryNode
    known_peers: tuple[DiscoveryNode, ...]
    cluster_name: str


class PeersResponse(_Message, frozen=True, tag="peers_response"):
    source: DiscoveryNode
    master: DiscoveryNode | None
    known_peers: tuple[DiscoveryNode, ...]
    term: Long
    cluster_uuid: str = NO_CLUSTER_UUID  # the sender's committed cluster UUID: terms of other clusters are ignored


class PreVoteRequest(_Message, frozen=True, tag="pre_vote"):
    source: DiscoveryNode
    current_term: Long
    cluster_uuid: str = NO_CLUSTER_UUID
    # The candidate's release and wire version (none from release 0.1.0): a node of a cluster whose state carries
    # the nodes' versions votes for no candidate older than all of them (node_versions.candidate_problem).
    release: Release = ""
    wire_version: WireVersion = 0


class PreVoteResponse(_Message, frozen=True, tag="pre_vote_response"):
    source: DiscoveryNode
    current_term: Long
    last_accepted_term: Long
    last_accepted_version: Long
    cluster_uuid: str = NO_CLUSTER_UUID


class StartJoinRequest(_Message, frozen=True, tag="start_join"):
    """Asks the receiver to join `candidate` in `term` (sent by the candidate itself, or by an abdicating
    master on the candidate's behalf)."""

    candidate: DiscoveryNode
    term: Long
    cluster_uuid: str = NO_CLUSTER_UUID
    # The candidate's release and wire version, as the sender knows it (none from release 0.1.0, nor when the
    # sender does not know it): see PreVoteRequest.
    release: Release = ""
    wire_version: WireVersion = 0


class JoinRequest(_Message, frozen=True, tag="join"):
    source: DiscoveryNode
    request_id: Long
    min_term: Long
    join: Join | None
    cluster_uuid: str
    cluster_uuid_committed: bool
    # The sender's last-accepted state, so that the master can send it the diffs it missed rather than the
    # full state (0, 0: unknown, e.g. from an older version; it gets the full state).
    accepted_term: Long = 0
    accepted_version: Long = 0
    # The sender's release and wire version (wire_versions; "" and 0 from release 0.1.0, which sends none).
    release: Release = ""
    wire_version: WireVersion = 0


class JoinResponse(_Message, frozen=True, tag="join_response"):
    request_id: Long
    ok: bool
    reason: str = ""


class PublishRequest(_Message, frozen=True, tag="publish"):
    """Carries either the whole state or a diff against the receiver's last-accepted state."""

    source: DiscoveryNode
    term: Long
    version: Long
    state: ClusterState | None = None
    diff: ClusterStateDiff | None = None


class PublishResponse(_Message, frozen=True, tag="publish_response"):
    source_id: str
    term: Long
    version: Long
    ok: bool
    join: Join | None = None
    need_full_state: bool = False
    reason: str = ""


class ApplyCommit(_Message, frozen=True, tag="apply_commit"):
    source_id: str
    term: Long
    version: Long


class ApplyCommitResponse(_Message, frozen=True, tag="apply_commit_response"):
    source_id: str
    term: Long
    version: Long
    ok: bool


class FollowerCheck(_Message, frozen=True, tag="follower_check"):
    source: DiscoveryNode
    term: Long
    request_id: Long
    # The master's release and wire version, and every node's as it knows them, while the state does not carry
    # them yet (a mixed cluster): so that every upgraded node can show them and gate requests on them. An
    # older node ignores them; release 0.1.0 sends none.
    release: Release = ""
    wire_version: WireVersion = 0
    node_versions: dict[str, NodeVersion] | None = None


class FollowerCheckResponse(_Message, frozen=True, tag="follower_check_response"):
    source_id: str
    request_id: Long
    ok: bool
    term: Long
    # So that the leader can bring a follower that missed a message up to date without waiting.
    accepted_term: Long = 0
    accepted_version: Long = 0
    applied_version: Long = 0
    # The follower's release and wire version (none from release 0.1.0).
    release: Release = ""
    wire_version: WireVersion = 0


class LeaderCheck(_Message, frozen=True, tag="leader_check"):
    source_id: str
    request_id: Long


class LeaderCheckResponse(_Message, frozen=True, tag="leader_check_response"):
    request_id: Long
    ok: bool
    reason: str = ""


class LeadershipProbe(_Message, frozen=True, tag="leadership_probe"):
    """For a linearizable read: is the sender still master in `term`?"""

    source_id: str
    term: Long
    request_id: Long


class LeadershipProbeResponse(_Message, frozen=True, tag="leadership_probe_response"):
    source_id: str
    term: Long
    request_id: Long
    ok: bool


class ForwardedRequest(_Message, frozen=True, tag="forwarded_request"):
    source_id: str
    request_id: Long
    request: AnyRequest  # decoded by its tag as any registered request type
    # The client's timeout: the master's tasks and waits for this request end by then.
    timeout_ms: Long = DEFAULT_REQUEST_TIMEOUT_MS


class ForwardedResponse(_Message, frozen=True, tag="forwarded_response"):
    request_id: Long
    result: ClientResult


Message = (
    PeersRequest
    | PeersResponse
    | PreVoteRequest
    | PreVoteResponse
    | StartJoinRequest
    | JoinRequest
    | JoinResponse
    | PublishRequest
    | PublishResponse
    | ApplyCommit
    | ApplyCommitResponse
    | FollowerCheck
    | FollowerCheckResponse
    | LeaderCheck
    | LeaderCheckResponse
    | LeadershipProbe
    | LeadershipProbeResponse
    | ForwardedRequest
    | ForwardedResponse
)


class Envelope(msgspec.Struct, frozen=True, omit_defaults=True):
    """What the transport carries: the sender's transport address and one message.

    A one-shot signed request (a POST) also carries a fresh random `request_nonce` and the transport address it
    is sent to (`receiver`), both covered by the signature: the receiver refuses a nonce it has seen within the
    signature's validity window, a request addressed to another node, and one signed before it started, so a
    captured request cannot be replayed, to the node that saw it (even after a restart) or to another. Frames
    of a stream need neither (the stream's MACs already forbid replays), and a receiver of an older version
    ignores both fields.
    """

    sender: str
    message: Message
    request_nonce: str = ""
    receiver: str = ""


_ENCODER = msgspec.json.Encoder(enc_hook=ENCODE_HOOK)  # a state's persistent maps
_DECODER = msgspec.json.Decoder(Envelope)


def encode_envelope(envelope: Envelope) -> bytes:
    return _ENCODER.encode(envelope)


def decode_envelope(data: bytes) -> Envelope:
    """Raises msgspec.ValidationError or msgspec.DecodeError with a message saying what is wrong."""
    try:
        return _DECODER.decode(data)
    except UnicodeDecodeError as error:  # msgspec raises this for a string that is not UTF-8
        raise msgspec.DecodeError(f"invalid UTF-8: {error}") from None
    except RecursionError:  # arrays or objects nested past what the decoder's stack holds
        raise msgspec.DecodeError("nested too deeply") from None


def message_type(message: Any) -> str:
    return str(type(message).__struct_config__.tag)
