"""The exchange of node versions in the protocol's messages, and what the master does with them: the version
barrier on join, the refresh of `node_versions` when it learns a version, the versions in its follower checks,
and the answer to a message this node cannot decode (a newer node's). What the versions mean is
`node_versions`; what the numbers are, `wire_versions`.
"""

from __future__ import annotations

from typing import Any

from coordinated.coordination import messages as m
from coordinated.coordination.context import CoreContext, Mode
from coordinated.coordination.feature_gates import undecodable_request
from coordinated.coordination.master_service import Priority, Task
from coordinated.coordination.master_tasks import MasterTasks
from coordinated.coordination.node_versions import reported
from coordinated.coordination.tasks import RefreshNodeVersions

FORWARDED_REQUEST = str(m.ForwardedRequest.__struct_config__.tag)
_LOGGED_AT_MOST = 1024  # (sender, kind) pairs remembered as logged


class VersionExchange:
    def __init__(self, ctx: CoreContext, master_tasks: MasterTasks) -> None:
        self.ctx = ctx
        self.versions = ctx.versions
        self.master_tasks = master_tasks
        self._undecodable_logged: set[tuple[str, str]] = set()

    def answer_fields(self, check: m.FollowerCheck, ok: bool) -> dict[str, Any]:
        """The version fields of this node's answer to a follower check; if it answers ok, it learns the master's
        version and its table of every node's first."""
        if ok:
            self.versions.learn(check.source.id, reported(check.release, check.wire_version))
            if check.node_versions is not None:
                self.versions.learn_table(check.node_versions)
        return {"release": self.versions.version.release, "wire_version": self.versions.version.wire}

    def on_follower_answer(self, node_id: str, response: m.FollowerCheckResponse) -> None:
        if self.versions.learn(node_id, reported(response.release, response.wire_version)):
            self.refresh()

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
            f"cannot decode a [{kind}] from {sender} ({problem}): a node of a newer release sent something this one "
            f"({self.versions.version.describe()}) does not know; {'refused it' if answered else 'dropped it'} "
            "(logged once per sender and kind)",
        )
