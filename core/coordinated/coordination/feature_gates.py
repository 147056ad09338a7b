"""What needs which feature: the one place that maps request types, request fields and state fields to the
feature (`wire_versions`) that brings them, and the refusal of a request that needs a feature the cluster
does not have yet.

Fields that an older node may ignore with no harm need no gate (`client.UNGATED_WIRE_ADDITIONS` names them, and
`wire_versions` still gives them a wire version). A request is refused where it arrives, before it is forwarded: a master of an older release cannot decode a
request type it does not know (it would drop the whole peer stream that carries it), and one that decodes
the request but ignores a field it does not know would do something else than asked. The master checks
again, against every node of the cluster, since the node that forwarded the request may know less.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from coordinated.coordination import client
from coordinated.coordination.client import ClientRequest, ClusterError
from coordinated.coordination.wire_versions import NODE_VERSIONS, Feature, NodeVersion, feature_named

# A request that needs a feature: (the feature, whether this request needs it). One line per request type,
# request field or transaction-op field added after the first release, e.g.
#   (BOUNDED_PREFIX_DELETE, lambda request: isinstance(request, KvDeletePrefix) and request.limit is not None),
# and for a field of a transaction op, `any(... for op in ops_of(request))`. tests/upgrades names an example
# HTTP request for each gated feature, which it sends through an upgraded node to a master of the previous
# release.
RequestGate = tuple[Feature, Callable[[ClientRequest[Any]], bool]]
REQUEST_GATES: tuple[RequestGate, ...] = ()


def test_gates(spec: str) -> tuple[RequestGate, ...]:
    """For a test hook, as `COORDINATED_TEST_CRASH_POINT` is one: the sidecar adds these gates to REQUEST_GATES when
    `COORDINATED_TEST_REQUEST_GATES=op:feature,...` is set, gating the requests of type `op` (their tag:
    `delete_prefix`, `put`, ...) on a declared feature, so that the tests of a mixed cluster of real processes
    can send a gated request before this release has one of its own."""
    gates = []
    for item in filter(None, (part.strip() for part in spec.split(","))):
        op, _, name = item.partition(":")
        feature = feature_named(name)
        if feature is None:
            raise ValueError(f"COORDINATED_TEST_REQUEST_GATES: no feature [{name}]")
        gates.append((feature, lambda request, op=op: request.__struct_config__.tag == op))
    return tuple(gates)


# A field of the cluster state that needs a feature: set (not `msgspec.UNSET`) only once the feature is on.
STATE_FIELD_GATES: Mapping[str, Feature] = {"node_versions": NODE_VERSIONS}


def required_features(request: ClientRequest[Any], gates: Iterable[RequestGate] | None = None) -> list[Feature]:
    """The features `request` needs beyond the first release's protocol (none for most); `gates`: REQUEST_GATES."""
    return [feature for feature, needs in (REQUEST_GATES if gates is None else gates) if needs(request)]


def feature_not_available(feature: Feature, lacking: Mapping[str, NodeVersion | None]) -> ClusterError:
    """The refusal of a request that needs `feature`, naming the nodes that lack it (by name; None: a node whose
    version is not known here, counted as lacking it)."""
    named = ", ".join(
        f"{name} ({version.describe() if version is not None else 'version unknown'})"
        for name, version in sorted(lacking.items())
    )
    reason = (
        f"this request needs feature {feature.describe()}, which not every node of the cluster has yet: "
        f"[{named}] lack it; it is on once every node runs release {feature.release} or later"
    )
    return ClusterError(type=client.FEATURE_NOT_AVAILABLE, reason=reason, status=400)


def undecodable_request(problem: str, node: str, version: NodeVersion) -> ClusterError:
    """The answer of a node that could not decode a forwarded request (a newer node's request type or field)."""
    reason = (
        f"node [{node}] runs release {version.describe()} and cannot decode this request ({problem}): it needs a "
        "feature that not every node of the cluster has yet"
    )
    return ClusterError(type=client.FEATURE_NOT_AVAILABLE, reason=reason, status=400)
