"""The cluster requests: persistent settings and voting-configuration exclusions; each type with what the
core does with it (base.Action)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from coordinated.coordination import client
from coordinated.coordination.batch_draft import Draft, Result
from coordinated.coordination.client import ClientRequest, ClientResult, ClusterError, Committed
from coordinated.coordination.master_service import Priority
from coordinated.coordination.requests.base import Action, Master, Reply, Runs
from coordinated.coordination.settings import parse_node_name
from coordinated.coordination.state import DiscoveryNode, VotingConfigExclusion
from coordinated.coordination.validation import MAX_VOTING_CONFIG_EXCLUSIONS, settings_problem

ABSENT_PREFIX = "_absent_"  # an exclusion by name of a node that is not in the cluster (yet)
_NODE_ID = re.compile(r"[^\x00-\x1f\x7f]{1,256}")  # in full: `$` would also accept a trailing newline

# -- settings -----------------------------------------------------------------------------------------------


class UpdateSettings(ClientRequest[Committed], frozen=True, tag="settings"):
    """Dynamic settings; a value of None resets the setting to its default."""

    persistent: dict[str, str | None]


def _update_settings(request: UpdateSettings, draft: Draft) -> Result:
    merged = {**draft.settings, **request.persistent}
    draft.settings = {name: value for name, value in merged.items() if value is not None}
    return None


UPDATE_SETTINGS = Action(
    UpdateSettings,
    Runs.MASTER,
    validate=lambda request, state, settings: settings_problem(request.persistent, settings.registry),
    priority=Priority.HIGH,
    execute=_update_settings,
)


# -- voting-configuration exclusions ------------------------------------------------------------------------


class AddVotingConfigExclusions(ClientRequest[Committed], frozen=True, tag="add_exclusions"):
    node_names: tuple[str, ...] = ()
    node_ids: tuple[str, ...] = ()


def resolve_exclusions(
    request: AddVotingConfigExclusions, nodes: Mapping[str, DiscoveryNode]
) -> list[VotingConfigExclusion]:
    """The exclusions a request asks for. A node that is not in the cluster is excluded by name, with a
    placeholder id that it gets replaced with when it joins."""
    by_name = {node.name: node for node in nodes.values()}
    resolved: list[VotingConfigExclusion] = []
    for name in request.node_names:
        node = by_name.get(name)
        resolved.append(VotingConfigExclusion(node.id if node else f"{ABSENT_PREFIX}{name}", name))
    for node_id in request.node_ids:
        known = nodes.get(node_id)
        resolved.append(VotingConfigExclusion(node_id, known.name if known else ABSENT_PREFIX))
    return resolved


def exclusions_problem(
    request: AddVotingConfigExclusions,
    nodes: Mapping[str, DiscoveryNode],
    existing: tuple[VotingConfigExclusion, ...] | list[VotingConfigExclusion],
    limit: int,
) -> str | None:
    """Names or ids (not both), well formed, within `cluster.max_voting_config_exclusions`, and leaving at
    least one master-eligible node of the cluster able to vote: with none, the voting configuration could
    never move off the excluded nodes and the request would only time out."""
    if bool(request.node_names) == bool(request.node_ids):
        return "you must set [node_names] or [node_ids] but not both"
    try:
        for name in request.node_names:
            parse_node_name(name)
    except ValueError as error:
        return f"invalid parameter [node_names]: {error}"
    for node_id in request.node_ids:
        if not isinstance(node_id, str) or _NODE_ID.fullmatch(node_id) is None:
            return f"invalid parameter [node_ids]: [{node_id!r}] is not a node id"
    to_add = resolve_exclusions(request, nodes)
    existing_ids = {exclusion.node_id for exclusion in existing}
    new = {exclusion.node_id for exclusion in to_add} - existing_ids
    if len(existing_ids) + len(new) > limit:
        return (
            f"add voting config exclusions request for {[e.node_name for e in to_add]} would add "
            f"[{len(new)}] exclusions to the existing [{len(existing_ids)}] which would exceed the maximum "
            f"of [{limit}] set by [cluster.max_voting_config_exclusions]"
        )
    eligible = {node.id for node in nodes.values() if node.master_eligible}
    if eligible and eligible <= existing_ids | new:
        return (
            f"add voting config exclusions request for {[e.node_name for e in to_add]} would exclude every "
            f"master-eligible node of the cluster {sorted(node.name for node in nodes.values() if node.id in eligible)}"
            "; at least one must remain to hold the voting configuration"
        )
    return None


def add_exclusions(
    request: AddVotingConfigExclusions,
    nodes: dict[str, DiscoveryNode],
    exclusions: list[VotingConfigExclusion],
    limit: int,
) -> ClientResult | None:
    # Checked again against the state of this batch: an earlier task may have added exclusions.
    problem = exclusions_problem(request, nodes, exclusions, limit)
    if problem is not None:
        return client.bad_request(problem)
    existing = {exclusion.node_id for exclusion in exclusions}
    for exclusion in resolve_exclusions(request, nodes):
        if exclusion.node_id not in existing:
            existing.add(exclusion.node_id)
            exclusions.append(exclusion)
    return None


def _add_exclusions(request: AddVotingConfigExclusions, draft: Draft) -> Result:
    return add_exclusions(request, draft.nodes, draft.exclusions, draft.context.max_exclusions)


def _then_out_of_config(request: AddVotingConfigExclusions, reply: Reply, deadline: int, master: Master) -> None:
    """Committed, then answered once the excluded nodes have left both voting configurations."""

    def committed(result: ClientResult) -> None:
        if isinstance(result, Committed):
            master.until_out_of_config(request.node_names, request.node_ids, reply, deadline)
        else:
            reply(result)

    master.run(request, committed, deadline)


ADD_EXCLUSIONS = Action(
    AddVotingConfigExclusions,
    Runs.MASTER,
    # Checked against the exclusions the master holds, and again in its batch (an earlier task may add some).
    validate=lambda request, state, settings: exclusions_problem(
        request, state.nodes, state.coordination.voting_config_exclusions, settings[MAX_VOTING_CONFIG_EXCLUSIONS]
    ),
    priority=Priority.URGENT,
    execute=_add_exclusions,
    on_master=_then_out_of_config,
)


class ClearVotingConfigExclusions(ClientRequest[Committed], frozen=True, tag="clear_exclusions"):
    """Clear all exclusions; with wait_for_removal, only once every excluded node has left the cluster."""

    wait_for_removal: bool = True


def _clear_exclusions(request: ClearVotingConfigExclusions, draft: Draft) -> Result:
    draft.exclusions = []
    return None


def _once_removed(request: ClearVotingConfigExclusions, reply: Reply, deadline: int, master: Master) -> None:
    """With `wait_for_removal`, the task starts once no excluded node is in the cluster."""
    state = master.state
    if request.wait_for_removal and any(node_id in state.nodes for node_id in state.coordination.excluded_ids()):

        def when_removed(result: ClientResult) -> None:
            if isinstance(result, ClusterError):
                reply(result)
                return
            master.run(request, reply, deadline, source="clear-voting-config-exclusions")

        master.until_removed(when_removed, deadline)
        return
    master.run(request, reply, deadline)


CLEAR_EXCLUSIONS = Action(
    ClearVotingConfigExclusions,
    Runs.MASTER,
    priority=Priority.URGENT,
    execute=_clear_exclusions,
    on_master=_once_removed,
)

ACTIONS: tuple[Action[Any], ...] = (UPDATE_SETTINGS, ADD_EXCLUSIONS, CLEAR_EXCLUSIONS)
