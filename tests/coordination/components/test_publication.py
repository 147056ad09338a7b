"""One Publication on a bench: it commits on a joint quorum of acks, fails when none is possible, and owns
its timeout until it is closed."""

from __future__ import annotations

from msgspec.structs import replace

from coordinated.coordination.context import Mode
from coordinated.coordination.messages import ApplyCommit, ApplyCommitResponse, PublishRequest, PublishResponse
from coordinated.coordination.publication import MASTER_APPLIES_LAST, PUBLISH_TIMEOUT, Publication, PublicationListener
from coordinated.coordination.quorum import joint_quorum
from coordinated.coordination.state import ClusterState, VotingConfiguration

from .context import SETTINGS, Bench
from .harness import discovery_node

A, B = discovery_node("a"), discovery_node("b")


def three_node_publication(bench: Bench) -> tuple[Publication, list[str]]:
    local = bench.ctx.local_node
    config = VotingConfiguration.of([local.id, A.id, B.id])
    previous = bench.state.replace(
        nodes={node.id: node for node in (local, A, B)},
        coordination=replace(bench.state.coordination, last_committed_config=config, last_accepted_config=config),
    )
    state = previous.replace(version=previous.version + 1, kv={"k": "v"})
    events: list[str] = []
    votes: set[str] = set()

    def accept(response: PublishResponse) -> bool:
        votes.add(response.source_id)
        return joint_quorum(config, config, votes) and "committed" not in events

    listener = PublicationListener(
        accept_ack=accept,
        publish_votes=lambda: votes,
        last_committed_config=lambda: config,
        on_committed=lambda publication: events.append("committed"),
        on_failed=lambda publication, reason: events.append(f"failed: {reason}"),
        on_completed=lambda publication: events.append("completed"),
    )
    publication = Publication(bench.ctx, listener, state, previous, [], [])
    publication.start()
    return publication, events


def ack(publication: Publication, node_id: str) -> PublishResponse:
    state: ClusterState = publication.state
    return PublishResponse(node_id, state.term, state.version, ok=True)


def test_a_quorum_of_acks_commits_and_the_commit_goes_to_the_acked_nodes() -> None:
    bench = Bench(mode=Mode.LEADER)
    publication, events = three_node_publication(bench)
    sent = bench.sent()
    assert sorted(to for to, message in sent if isinstance(message, PublishRequest)) == sorted(
        [A.transport_address, B.transport_address, bench.ctx.local_node.transport_address]
    )
    publication.on_publish_response(ack(publication, bench.ctx.local_node.id))
    assert events == []
    publication.on_publish_response(ack(publication, A.id))
    assert events == ["committed"] and publication.quorum == tuple(sorted([bench.ctx.local_node.id, A.id]))
    commits = {to for to, message in bench.sent() if isinstance(message, ApplyCommit)}
    assert commits == {A.transport_address, bench.ctx.local_node.transport_address}
    publication.on_own_commit_applied(publication.version)
    publication.on_apply_commit_response(ApplyCommitResponse(A.id, publication.state.term, publication.version, True))
    assert events == ["committed", "completed"]


def test_by_default_the_master_applies_last_after_a_quorum_applied() -> None:
    bench = Bench(mode=Mode.LEADER)
    publication, events = three_node_publication(bench)
    publication.on_publish_response(ack(publication, bench.ctx.local_node.id))
    publication.on_publish_response(ack(publication, A.id))
    publication.on_own_commit_applied(publication.version)
    assert events == ["committed"]  # the master holds its copy, but only the master applied it so far


def test_without_master_applies_last_the_publication_completes_once_the_master_committed_its_copy() -> None:
    bench = Bench(mode=Mode.LEADER, settings=SETTINGS.with_values({MASTER_APPLIES_LAST: False}))
    publication, events = three_node_publication(bench)
    publication.on_publish_response(ack(publication, A.id))
    assert events == []
    publication.on_publish_response(ack(publication, bench.ctx.local_node.id))
    assert events == ["committed"]  # and not completed: the master has not committed its own copy yet
    publication.on_own_commit_applied(publication.version)
    assert events == ["committed", "completed"]  # no follower has answered its commit


def test_a_publication_fails_once_a_quorum_is_no_longer_possible() -> None:
    bench = Bench(mode=Mode.LEADER)
    publication, events = three_node_publication(bench)
    publication.target_failed(A.id)
    assert events == []
    publication.target_failed(B.id)
    assert events == ["failed: a publish quorum is no longer possible"]


def test_an_uncommitted_publication_fails_at_its_timeout_unless_closed() -> None:
    bench = Bench(mode=Mode.LEADER)
    _, events = three_node_publication(bench)
    bench.advance_to(bench.settings[PUBLISH_TIMEOUT])
    assert events == [f"failed: not committed within cluster.publish.timeout [{bench.settings[PUBLISH_TIMEOUT]}ms]"]
    closed, closed_events = three_node_publication(bench)
    closed.close()
    bench.advance_to(3 * bench.settings[PUBLISH_TIMEOUT])
    assert closed_events == []
