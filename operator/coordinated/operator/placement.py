"""Where the pods run: the scheduling fields of each pool's pod template, and what the status says of the
voters' placement. Pure: the spec and observed facts in, manifest fragments and conditions out.

The merge, as docs/operator.md documents it: `spec.scheduling` is used as written (node selector,
tolerations, priority class, node and pod affinity), and the operator adds its defaults for what the user
did not set:

- a preferred pod anti-affinity by `kubernetes.io/hostname` (weight 100), unless `affinity.podAntiAffinity`
  is given;
- a topology spread over `topology.kubernetes.io/zone` (maxSkew 1, ScheduleAnyway), unless
  `topologySpreadConstraints` is given (`[]` turns it off); a user constraint without a labelSelector gets
  the pool's.

Both defaults are preferences, so a single-node cluster, or nodes without zone labels, still schedule every
pod. Each counts the pods of one pool: the voters spread among themselves, and so do the non-voters.

Members never preempt each other. A pod of a higher priority that the scheduler cannot place evicts pods of a
lower one to make room: during a rolling restart that raises the priority (`priorityClassName`), the first new
pod would evict the other members, still on the older, lower-priority template, and take the quorum with them.
A pod's `preemptionPolicy` comes from its PriorityClass and cannot be set on the pod, so the pods run under a
twin class the operator creates: the same value (at most 1000000000, the highest a class not named `system-*`
may have) with `preemptionPolicy: Never`. They are scheduled ahead of lower priorities and are preempted only
by higher ones, exactly as before, but never evict anything themselves.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from typing import Any

from coordinated.operator.spec import ClusterSpec
from coordinated.operator.status import Condition

VOTING_LABEL = "coordinated.dev/voting"  # "true" on voters' pods, "false" on non-voters'
HOSTNAME_LABEL = "kubernetes.io/hostname"
ZONE_LABEL = "topology.kubernetes.io/zone"
SPREAD_CONDITION = "VotersSpread"
SCHEDULED_CONDITION = "PodsScheduled"
# A pod the scheduler has not placed for this long is reported; before, it is usually waiting for its claim to
# bind (a provisioner that binds when the pod is scheduled: WaitForFirstConsumer) and is placed a moment later.
UNSCHEDULABLE_GRACE_SECONDS = 30.0
NONPREEMPTING_PREFIX = "coordinated-nonpreempting-"
HIGHEST_USER_PRIORITY = 1_000_000_000  # a PriorityClass not named system-* may not be higher


def pool_selector(cluster_labels: Mapping[str, str], voting: bool) -> dict[str, Any]:
    """The pods of one pool of the cluster (`cluster_labels`: its name and instance labels). Voters are matched
    as "not labelled non-voting", so that pods created before the voting label existed count too."""
    if voting:
        expression = {"key": VOTING_LABEL, "operator": "NotIn", "values": ["false"]}
        return {"matchLabels": dict(cluster_labels), "matchExpressions": [expression]}
    return {"matchLabels": {**cluster_labels, VOTING_LABEL: "false"}}


def nonpreempting_class(value: int) -> dict[str, Any]:
    """The PriorityClass pods of this priority run under: the same value, never preempting."""
    value = min(value, HIGHEST_USER_PRIORITY)
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {
            "name": f"{NONPREEMPTING_PREFIX}{value}" if value >= 0 else f"{NONPREEMPTING_PREFIX}minus-{-value}",
            "labels": {"app.kubernetes.io/managed-by": "coordinated-operator"},
        },
        "value": value,
        "preemptionPolicy": "Never",
        "globalDefault": False,
        "description": "The priority of a CoordinatedCluster's pods, which never preempt (so never each other).",
    }


def pod_priority_class(
    requested: str | None, found: tuple[int, str] | None
) -> tuple[str | None, dict[str, Any] | None]:
    """The PriorityClass the pods run under for `scheduling.priorityClassName`, and the twin class to create.

    `found`: the requested class's value and preemption policy (None: it does not exist, or the operator may not
    read it; then the pods name it as written, and the API server says why it refuses them)."""
    if not requested or found is None:
        return requested or None, None
    value, policy = found
    if policy == "Never":
        return requested, None
    twin = nonpreempting_class(value)
    return str(twin["metadata"]["name"]), twin


def scheduling_fields(
    spec: ClusterSpec, cluster_labels: Mapping[str, str], voting: bool, priority_class_name: str | None = None
) -> dict[str, Any]:
    """The pod spec's scheduling fields for one pool: the user's, plus the defaults above. `priority_class_name`:
    the class the pods run under (pod_priority_class), when the spec names one."""
    scheduling = spec.scheduling
    selector = pool_selector(cluster_labels, voting)
    fields: dict[str, Any] = {}
    if scheduling.node_selector:
        fields["nodeSelector"] = dict(scheduling.node_selector)
    if scheduling.tolerations:
        fields["tolerations"] = [dict(toleration) for toleration in scheduling.tolerations]
    if scheduling.priority_class_name:
        fields["priorityClassName"] = priority_class_name or scheduling.priority_class_name
    affinity = {key: value for key, value in scheduling.affinity.items() if value}
    if "podAntiAffinity" not in affinity:
        term = {"topologyKey": HOSTNAME_LABEL, "labelSelector": selector}
        affinity["podAntiAffinity"] = {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": term}]
        }
    fields["affinity"] = affinity
    if scheduling.topology_spread_constraints is None:
        spread = [{"maxSkew": 1, "topologyKey": ZONE_LABEL, "whenUnsatisfiable": "ScheduleAnyway"}]
    else:
        spread = [dict(constraint) for constraint in scheduling.topology_spread_constraints]
    if spread:
        fields["topologySpreadConstraints"] = [{"labelSelector": selector, **constraint} for constraint in spread]
    return fields


def _names(pods: list[str]) -> str:
    ordered = sorted(pods)
    return ordered[0] if len(ordered) == 1 else ", ".join(ordered[:-1]) + " and " + ordered[-1]


def voters_spread(
    voter_nodes: Mapping[str, str],
    zones: Mapping[str, str | None],
    unscheduled: Mapping[str, str] | None = None,
) -> Condition | None:
    """Whether one Kubernetes node, or one zone, could take the voters' quorum with it.

    `voter_nodes`: each scheduled voter pod's Kubernetes node; `zones`: each node's zone label (None: none);
    `unscheduled`: voter pods the scheduler has not placed (pod -> its message), reported first: the quorum rests
    on the voters that run. Two voters on one node are reported: a node's failure takes both. Zones are judged
    only where every node has one: a zone that holds more than a minority of the voters (2 of 3, 3 of 5) takes
    the quorum with it, while 5 voters over 3 zones (2, 2, 1) survive the loss of any zone. None when no voter
    is scheduled or waiting."""
    if unscheduled:
        pods = sorted(unscheduled)
        verb = "is" if len(pods) == 1 else "are"
        running = f"only {_names(list(voter_nodes))} run" if voter_nodes else "none runs"
        message = f"{_names(pods)} {verb} not scheduled ({unscheduled[pods[0]]}): {running}"
        return Condition(SPREAD_CONDITION, False, "NotScheduled", message)
    if not voter_nodes:
        return None
    count = len(voter_nodes)
    by_node: dict[str, list[str]] = defaultdict(list)
    for pod, node in voter_nodes.items():
        by_node[node].append(pod)
    shared = [f"{_names(pods)} share node {node}" for node, pods in sorted(by_node.items()) if len(pods) > 1]
    node_zones = {node: zones.get(node) for node in by_node}
    zoned = all(node_zones.values())
    problems = []
    if zoned and count > 1:
        per_zone = Counter(node_zones[node] for node in voter_nodes.values())
        tolerated = (count - 1) // 2
        for zone, held in sorted(per_zone.items(), key=lambda item: str(item[0])):
            if held > tolerated:
                problems.append(
                    f"zone {zone} holds {held} of the {count} voters: losing it loses the quorum"
                    if len(per_zone) > 1 or held < count
                    else f"all {count} voters are in zone {zone}: losing it loses the quorum"
                )
    if shared and count > 1:
        message = "; ".join(shared) + f": one Kubernetes node's failure takes more than one of the {count} voters"
        if problems:
            message += "; " + "; ".join(problems)
        return Condition(SPREAD_CONDITION, False, "SharedNode", message)
    if problems:
        return Condition(SPREAD_CONDITION, False, "SharedZone", "; ".join(problems))
    where = f"{len(by_node)} Kubernetes node(s)"
    if zoned:
        where += f" in {len(set(node_zones.values()))} zone(s)"
    else:
        where += " (no topology.kubernetes.io/zone labels, so zones are not judged)"
    return Condition(SPREAD_CONDITION, True, "Spread", f"{count} voter(s) on {where}")


def pods_scheduled(unschedulable: Mapping[str, str]) -> Condition:
    """`unschedulable`: pod -> the scheduler's message, for the pods it could not place (PodScheduled False)."""
    if not unschedulable:
        return Condition(SCHEDULED_CONDITION, True, "Scheduled", "every pod is scheduled (or none runs)")
    reasons = [f"{pod} cannot be scheduled: {message}" for pod, message in sorted(unschedulable.items())]
    return Condition(SCHEDULED_CONDITION, False, "Unschedulable", "; ".join(reasons))
