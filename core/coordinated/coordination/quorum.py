"""The one quorum rule of Zen2, written once (as etcd's quorum/joint.go is).

While a reconfiguration is in flight a node holds two voting configurations, the last committed and the
last accepted one. Anything that needs a quorum (an election, a commit, a read's leadership check, a
handover) needs a quorum of both, so that every quorum of the old and every quorum of the new configuration
intersect with it. When the two are the same, this is a plain majority.
"""

from __future__ import annotations

from collections.abc import Collection

from coordinated.coordination.state import VotingConfiguration


def joint_quorum(first: VotingConfiguration, second: VotingConfiguration, votes: Collection[str]) -> bool:
    """`votes` hold a majority of `first` and a majority of `second`."""
    return first.has_quorum(votes) and second.has_quorum(votes)
