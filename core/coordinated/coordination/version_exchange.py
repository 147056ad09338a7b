"""The exchange of node versions in the protocol's messages, and what the master does with them: the version
barrier on join, the refresh of `node_versions` when it learns a version, the versions in its follower checks,
and the answer to a message this node cannot decode (a newer node's). What the versions mean is
`node_versions`; what the numbers are, `wire_versions`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from coordinated.coordination import messages as m
from coordinated.coordination.context import CoreContext, Mode
from coordinated.coordination.feature_gates import undecodable_request
from coordinated.coordination.master_service import Priority, Task
from coordinated.coordination.master_tasks import MasterTasks
from coordinated.coordination.node_versions import reported
from coordinated.coordination.state import DiscoveryNode
from coordinated.coordination.tasks import RefreshNodeVersions

FORWARDED_REQUEST = str(m.ForwardedRequest.__struct_config__.tag)
_LOGGED_AT_MOST = 1024  # (sender, kind) pairs remembered as logged


class VersionExchange:
    def __init__(self, ctx: CoreContext, master_tasks: MasterTasks, remove_node: Callable[[str, str], None]) -> None:
        self.ctx = ctx
        self.versions = ctx.versions
        self.master_tasks = master_tasks
        self.remove_node = remove_node  # (node id, reason): the master takes it out of the cluster
        self._undecodable_logged: set[tuple[str, str]] = set()

    def answer_fields(self, check: m.FollowerCheck, ok: bool) -> dict[str, Any]:
        """The version fields of this node's answer to a follower check; if it answers ok, it learns the master's
        version and its table of every node's first."""
        if ok:
            state = self.ctx.accepted
            self.versions.learn(check.source.id, reported(check.release, check.wire_version), state)
            if check.node_versions is not None:
                self.versions.learn_table(check.node_versions, state)
        return {"release": self.versions.version.release, "wire_version": self.versions.version.wire}

    def on_follower_answer(self, node_id: str, response: m.FollowerCheckResponse) -> bool:
        """Learn a follower's version from its answer; whether the master removed it for it: a node that
        restarted on a release older than every node of the cluster (the version barrier it would meet if it
        joined now) may not stay, since it would drop what its release does not know."""
        version = reported(response.release, response.wire_version)
        if not self.versions.learn(node_id, version, self.ctx.accepted):
            return False
        node = self.ctx.accepted.nodes.get(node_id)
        problem = self.versions.join_problem(node, version, self.ctx.accepted) if node is not None else None
        if problem is not None:
            self.remove_node(node_id, problem)
            return True
        self.refresh()
        return False

    def refresh(self) -> None:
        """As master: publish the nodes' versions anew if what this node knows changes them (once every member
        has the feature, this is what turns it on)."""
        state = self.ctx.accepted
        if self.ctx.mode() is not Mode.LEADER or self.master_tasks.is_pending(RefreshNodeVersions):
            return
        if self.versions.to_publish(state) != state.node_versions:
            self.master_tasks.submit(
                Task("refresh-node-versions", Priority.URGENT, RefreshNodeVersions(), lambda _: None)
            )

    def start_join(self, candidate: DiscoveryNode, term: int) -> m.StartJoinRequest:
        """The request to join `candidate` in `term`, with the candidate's version when this node knows it."""
        version = self.versions.version_of(candidate.id, self.ctx.accepted)
        release, wire = (version.release, version.wire) if version is not None else ("", 0)
        return m.StartJoinRequest(candidate, term, self.ctx.committed_uuid(), release, wire)

    def refuses(self, request: m.StartJoinRequest) -> bool:
        """Whether this node will not join (vote for) the candidate of a start-join, for its release."""
        version = reported(request.release, request.wire_version)
        problem = self.versions.candidate_problem(request.candidate, version, self.ctx.accepted)
        if problem is not None:
            self.ctx.log("warning", f"ignoring start-join for term {request.term}: {problem}")
        return problem is not None

    def on_undecodable(self, sender: str, kind: str, request_id: int | None, problem: str) -> None:
        """A message this node could not decode: a forwarded request gets a refusal its sender understands; the
        rest is dropped. Logged once per sender and kind, never per message."""
        answered = kind == FORWARDED_REQUEST and request_id is not None
        if answered:
            assert request_id is not None
            refusal = undecodable_request(problem, self.ctx.local_node.name, self.versions.version)
            self.ctx.send(sender, m.ForwardedResponse(request_id, refusal))
        if (sender, kind) in self._undecodable_logged:
            return
        if len(self._undecodable_logged) < _LOGGED_AT_MOST:
            self._undecodable_logged.add((sender, kind))
        self.ctx.log(
            "warning",
            f"cannot decode a [{kind}] from {sender} ({problem}): a message of a newer release that this one "
            f"({self.versions.version.describe()}) does not know, or a damaged one; "
            f"{'refused it' if answered else 'dropped it'} (logged once per sender and kind)",
        )
