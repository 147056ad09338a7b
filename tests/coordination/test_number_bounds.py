"""Numbers at the ends of their range, fed to the core from the wire.

Every peer message type, with its numeric fields (terms, versions, request ids, timeouts, the numbers inside a
published state or a forwarded request) set to 0, 1, just below and at the ceiling of what a node takes at
once, and at 2^63-2 and 2^63-1, is forged and delivered through the wire decoder to the nodes of a simulated
cluster, in random orders and at random times. Afterwards the cluster must still elect a master and commit a
write, and again after every node has restarted from what it persisted; no node may persist a number the wire
cannot carry (the simulator's storage checks that on every write). The transport here is unauthenticated, so
forged messages may break safety (two masters in a term, say): that is what a cluster secret or mutual TLS is
for. What this test asks is that no number can take the cluster's progress away for good.

BOUNDS_EXAMPLES sets the number of examples (default 25); BOUNDS_RANDOM=1 draws new ones.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinated.coordination import messages as m
from coordinated.coordination.client import ClientResult, Committed, ReadValue, SessionInfo, TxnOpResult, TxnResult
from coordinated.coordination.counters import CEILING, LONG_MAX, MAX_STEP
from coordinated.coordination.requests.keys import KvGet, KvPut
from coordinated.coordination.requests.sessions import SessionCreate
from coordinated.coordination.requests.snapshots import RestoreSnapshot
from coordinated.coordination.requests.transactions import Txn, TxnCompare, TxnOp
from coordinated.coordination.state import ENCODE_HOOK, KeyVersion
from coordinated.coordination.wire_versions import newest
from coordinated.simulation.cluster import SimulatedCluster, stabilisation_time
from coordinated.simulation.node_invariants import check_node_invariants

EXAMPLES = int(os.environ.get("BOUNDS_EXAMPLES", "25"))
EDGES = (0, 1, CEILING, CEILING + MAX_STEP, LONG_MAX - 1, LONG_MAX)
SECOND = 1000
MESSAGE_TYPES = {t for t in m.Message.__args__}  # type: ignore[attr-defined]
Path = tuple[str | int, ...]


def captured_messages() -> dict[type, list[m.Message]]:
    """Real messages of every type, tapped from a simulated cluster that forms, serves writes and reads through
    the master and a follower, loses and regains a follower, and loses its master."""
    cluster = SimulatedCluster(7, 3)
    seen: dict[type, list[m.Message]] = {}

    def tap(sender: str, destination: str, message: m.Message) -> None:
        found = seen.setdefault(type(message), [])
        if len(found) < 3:
            found.append(message)

    cluster.tap = tap
    cluster.stabilise()
    leader = cluster.leader()
    assert leader is not None
    follower = next(node for node in cluster.nodes if node is not leader)
    for index in (leader.index, follower.index):
        cluster.submit(index, KvPut(f"key-{index}", {"n": 1}))
        cluster.submit(index, KvGet(f"key-{index}"))
    cluster.run_for(5 * SECOND)
    cluster.restart(follower.index)
    cluster.stabilise()
    cluster.crash(leader.index)
    cluster.stabilise()
    cluster.start_node(leader.index)
    cluster.stabilise()
    return seen


def crafted_messages() -> list[m.Message]:
    """Forwarded requests and answers whose numbers the captured run does not cover."""
    requests = [
        KvPut("k", 1, if_version=3),
        Txn(compare=(TxnCompare("k", 2),), success=(TxnOp("put", "k", 5),)),
        SessionCreate(ttl_ms=10 * SECOND),
        RestoreSnapshot("r:s", 4, {"k": 1}, {"k": KeyVersion(4, 2)}, {}),
    ]
    results: list[ClientResult] = [
        Committed(3, 4),
        ReadValue("k", True, 1, 3, 4, 2, 1),
        TxnResult(True, 3, 4, (TxnOpResult("get", "k", True, 1, 4, 2),)),
        SessionInfo("s", 10 * SECOND, None, 3, 4),
    ]
    return [
        *(m.ForwardedRequest("node0-x", 5, request, 30 * SECOND) for request in requests),
        *(m.ForwardedResponse(5, result) for result in results),
    ]


def int_paths(value: Any, path: Path = ()) -> Iterator[Path]:
    """The paths to every integer in a decoded JSON value (booleans are not numbers here)."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from int_paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from int_paths(item, (*path, index))
    elif isinstance(value, int) and not isinstance(value, bool):
        yield path


def with_numbers(document: Any, replacements: dict[Path, int]) -> Any:
    if not replacements:
        return document
    copy = msgspec.json.decode(msgspec.json.encode(document))
    for path, number in replacements.items():
        target = copy
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = number
    return copy


class Templates:
    def __init__(self) -> None:
        seen = captured_messages()
        missing = MESSAGE_TYPES - set(seen)
        assert not missing, f"the captured run sent no {sorted(t.__name__ for t in missing)}"
        messages = [message for found in seen.values() for message in found] + crafted_messages()
        documents = [msgspec.to_builtins(m.Envelope("x", message), enc_hook=ENCODE_HOOK) for message in messages]
        # Those with a number (a PeersRequest has none).
        numbered = [(document, list(int_paths(document))) for document in documents]
        self.documents = [document for document, paths in numbered if paths]
        self.paths = [paths for _, paths in numbered if paths]


TEMPLATES: Templates | None = None


def templates() -> Templates:
    global TEMPLATES
    if TEMPLATES is None:
        TEMPLATES = Templates()
    return TEMPLATES


@st.composite
def forgeries(draw: st.DrawFn) -> tuple[int, int, str, bytes]:
    """(delay in ms, target node, sender address, the encoded envelope)."""
    found = templates()
    which = draw(st.integers(0, len(found.documents) - 1))
    paths = found.paths[which]
    chosen = draw(st.lists(st.sampled_from(paths), min_size=1, max_size=min(4, len(paths)), unique=True))
    replacements = {path: draw(st.sampled_from(EDGES)) for path in chosen}
    sender = draw(st.sampled_from(["node0:9300", "node1:9300", "node2:9300", "intruder:9300"]))
    document = with_numbers(found.documents[which], replacements)
    document["sender"] = sender
    return draw(st.integers(0, 20 * SECOND)), draw(st.integers(0, 2)), sender, msgspec.json.encode(document)


def elects_and_commits(cluster: SimulatedCluster, what: str) -> None:
    """A master is elected and a write through it commits, within a few stabilisation times."""
    budget = 4 * stabilisation_time(cluster.nodes[0].settings)
    answers: list[ClientResult] = []
    for attempt in range(5):
        assert cluster.run_until(lambda: cluster.leader() is not None, budget), f"no master {what}"
        leader = cluster.leader()
        assert leader is not None
        answered = len(answers)
        cluster.submit(leader.index, KvPut("after", attempt), on_done=answers.append, timeout=30 * SECOND)
        assert cluster.run_until(lambda n=answered: len(answers) > n, budget), f"the write never completed {what}"
        if isinstance(answers[-1], Committed):
            return
    raise AssertionError(f"no write committed {what}: last answer {answers[-1]}")


def run_forged(seed: int, forged: list[tuple[int, int, str, bytes]]) -> tuple[int, int]:
    """Deliver the forgeries to a formed cluster; (how many were refused by the decoder, delivered)."""
    cluster = SimulatedCluster(seed, 3, check_safety=False)
    cluster.stabilise()
    refused = delivered = 0

    def deliver(target: int, sender: str, data: bytes) -> None:
        nonlocal refused, delivered
        if cluster.deliver_from_wire(cluster.nodes[target], sender, data) is None:
            delivered += 1
        else:
            refused += 1

    start = cluster.now
    for delay, target, sender, data in forged:
        cluster.schedule(start + delay, lambda t=target, s=sender, d=data: deliver(t, s, d))
    cluster.run_for(21 * SECOND)
    elects_and_commits(cluster, "after the forged messages")
    for node in cluster.nodes:
        check_node_invariants(node.running())
    for node in cluster.nodes:
        cluster.restart(node.index)
    elects_and_commits(cluster, "after every node restarted")
    return refused, delivered


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=not os.environ.get("BOUNDS_RANDOM"),
    suppress_health_check=list(HealthCheck),
)
@given(seed=st.integers(0, 2**32 - 1), forged=st.lists(forgeries(), min_size=1, max_size=8))
def test_no_number_from_the_wire_stops_the_cluster_for_good(
    seed: int, forged: list[tuple[int, int, str, bytes]]
) -> None:
    run_forged(seed, forged)


@pytest.mark.parametrize("term", [LONG_MAX, LONG_MAX - 1, CEILING + MAX_STEP, CEILING + MAX_STEP + 1])
def test_one_start_join_with_a_huge_term_to_every_node(term: int) -> None:
    """The issue's example and its neighbours: one StartJoin per node, from nobody in particular."""
    start_join = msgspec.json.encode(
        {"sender": "intruder:9300", "message": {"type": "start_join", "candidate": document_node(), "term": term}}
    )
    refused, delivered = run_forged(3, [(SECOND * i, i, "intruder:9300", start_join) for i in range(3)])
    assert (refused, delivered) == (0, 3)  # all decode: it is the core that must not take them


def document_node() -> dict[str, Any]:
    return {"id": "intruder", "name": "intruder", "transport_address": "intruder:9300", "roles": ["master"]}


def test_a_term_past_the_ceiling_moves_the_cluster_one_step_and_it_goes_on() -> None:
    """A term the nodes may take (up to the ceiling and a step) is taken, and the cluster elects past it; a
    new node far behind it still catches up, in steps."""
    cluster = SimulatedCluster(5, 3, check_safety=False)
    cluster.stabilise()
    term = CEILING + MAX_STEP
    # From a candidate of this release: a cluster that carries its nodes' versions votes for no older one.
    own = newest()
    message = {"type": "start_join", "candidate": document_node(), "term": term, "release": own.release}
    message["wire_version"] = own.wire
    start_join = msgspec.json.encode({"sender": "intruder:9300", "message": message})
    for node in cluster.nodes:
        assert cluster.deliver_from_wire(node, "intruder:9300", start_join) is None
    elects_and_commits(cluster, "after a term at the ceiling")
    leader = cluster.leader()
    assert leader is not None and leader.running().current_term > term
    newcomer = cluster.add_node()
    elects_and_commits(cluster, "with a new node")
    assert cluster.run_until(lambda: newcomer.running().current_term == leader.running().current_term, 60 * SECOND)
