"""The receiving side of a publication, as Elasticsearch's PublicationTransportHandler and the
Coordinator's handlers: rebuild the published state (from a diff when possible), check that it is for this
node and cluster, accept it, and on the commit apply it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from msgspec.structs import replace

from coordinated.coordination.context import CoreContext
from coordinated.coordination.messages import ApplyCommit, ApplyCommitResponse, Join, PublishRequest, PublishResponse
from coordinated.coordination.safety import CoordinationState, CoordinationStateRejected
from coordinated.coordination.settings import CLUSTER_NAME
from coordinated.coordination.state import ClusterState, DiscoveryNode, IncompatibleDiffError, apply_diff


@dataclass
class PublishListener:
    before_accept: Callable[[DiscoveryNode, int], object]  # (master, term): move to that term if it is newer
    on_accepted: Callable[[DiscoveryNode, ClusterState], None]
    join_for: Callable[[str, int], Join | None]  # this node's vote for (master id, term), sent with the ack
    on_committed: Callable[[ClusterState], None]  # a follower's commit: record and apply the state
    on_own_commit: Callable[[int], None]  # the master committed its own copy of this version
    on_own_commit_failed: Callable[[str], None]


class PublishHandler:
    def __init__(self, ctx: CoreContext, coordination_state: CoordinationState, listener: PublishListener) -> None:
        self.ctx = ctx
        self.coordination_state = coordination_state
        self.listener = listener

    def on_publish_request(self, request: PublishRequest) -> None:
        ctx = self.ctx
        source = request.source
        if request.state is not None:
            state = request.state
        else:
            assert request.diff is not None
            try:
                state = apply_diff(ctx.accepted, request.diff, ctx.derivations)
            except IncompatibleDiffError:
                ctx.send(
                    source.transport_address,
                    PublishResponse(ctx.local_node.id, request.term, request.version, ok=False, need_full_state=True),
                )
                return
        reject = self._validate(state)
        if reject is None:
            self.listener.before_accept(source, state.term)
            try:
                response = self.coordination_state.handle_publish_request(state)
            except CoordinationStateRejected as rejected:
                reject = str(rejected)
            except OSError as error:
                reject = f"failed to persist the accepted state: {error}"
                ctx.log("warning", reject)
        if reject is not None:
            ctx.send(
                source.transport_address,
                PublishResponse(ctx.local_node.id, request.term, request.version, ok=False, reason=reject),
            )
            return
        self.listener.on_accepted(source, state)
        ctx.send(source.transport_address, replace(response, join=self.listener.join_for(source.id, state.term)))

    def _validate(self, state: ClusterState) -> str | None:
        ctx = self.ctx
        local = ctx.accepted
        if state.cluster_name != ctx.base_settings[CLUSTER_NAME]:
            return f"cluster name [{state.cluster_name}] is not [{ctx.base_settings[CLUSTER_NAME]}]"
        if local.cluster_uuid_committed and state.cluster_uuid != local.cluster_uuid:
            return f"state belongs to cluster [{state.cluster_uuid}], this node to [{local.cluster_uuid}]"
        if ctx.local_node.id not in state.nodes:
            return "this node is not in the published state"
        if state.term < ctx.current_term:
            return f"publication term {state.term} is older than current term {ctx.current_term}"
        return None

    def on_apply_commit(self, sender: str, commit: ApplyCommit) -> None:
        ctx = self.ctx
        local_id = ctx.local_node.id
        try:
            self.coordination_state.handle_commit(commit)
        except CoordinationStateRejected as rejected:
            ctx.log("debug", f"commit of version {commit.version} rejected: {rejected}")
            ctx.send(sender, ApplyCommitResponse(local_id, commit.term, commit.version, ok=False))
            return
        except OSError as error:
            ctx.log("warning", f"failed to persist the commit: {error}")
            if commit.source_id == local_id:
                self.listener.on_own_commit_failed(f"failed to persist the commit of version {commit.version}")
                return
            ctx.send(sender, ApplyCommitResponse(local_id, commit.term, commit.version, ok=False))
            return
        if commit.source_id == local_id:
            # The master commits its own copy here; it applies when the publication completes (by default last,
            # after a quorum of nodes applied: `cluster.publish.master_applies_last`).
            self.listener.on_own_commit(commit.version)
            return
        self.listener.on_committed(ctx.accepted)
        ctx.send(sender, ApplyCommitResponse(local_id, commit.term, commit.version, ok=True))
