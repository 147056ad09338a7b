from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinated.coordination.state import (
    ClusterState,
    DiscoveryNode,
    IncompatibleDiffError,
    VotingConfiguration,
    apply_diff,
    compute_diff,
    decode_diff,
    decode_state,
    encode_diff,
    encode_state,
)


def make_state(kv: dict[str, object], version: int = 1, uuid: str = "s1") -> ClusterState:
    node = DiscoveryNode("n1", "node-1", "n1:9300")
    return ClusterState(
        cluster_name="test",
        cluster_uuid="c1",
        version=version,
        state_uuid=uuid,
        master_node="n1",
        nodes={"n1": node},
        kv=kv,
    )


def one_key_change(state: ClusterState) -> ClusterState:
    kv = dict(state.kv)
    kv["changed"] = {"v": 1}
    return state.replace(kv=kv, version=state.version + 1, state_uuid="s2", parent_uuid=state.state_uuid)


def test_diff_round_trip_rebuilds_the_new_state() -> None:
    before = make_state({"a": 1, "b": [1, 2], "gone": True})
    after = before.replace(kv={"a": 2, "b": [1, 2], "new": "x"}, version=2, state_uuid="s2", parent_uuid="s1")
    diff = decode_diff(encode_diff(compute_diff(before, after)))
    assert diff.kv.upserts == {"a": 2, "new": "x"}
    assert diff.kv.deletes == ("gone",)
    assert apply_diff(before, diff) == after


def test_diff_against_another_base_fails_cleanly() -> None:
    before = make_state({"a": 1})
    after = one_key_change(before)
    other = make_state({"a": 1}, uuid="someone-else")
    with pytest.raises(IncompatibleDiffError, match="someone-else"):
        apply_diff(other, compute_diff(before, after))


def test_one_key_diff_size_does_not_depend_on_state_size() -> None:
    small = make_state({f"key-{i}": i for i in range(10)})
    large = make_state({f"key-{i}": i for i in range(10_000)})
    small_diff = encode_diff(compute_diff(small, one_key_change(small)))
    large_diff = encode_diff(compute_diff(large, one_key_change(large)))
    assert len(small_diff) == len(large_diff)
    assert len(large_diff) * 100 < len(encode_state(large))


def test_serialization_is_deterministic_and_compact() -> None:
    first = make_state({"b": 1, "a": 2})
    second = make_state({"a": 2, "b": 1})
    assert encode_state(first) == encode_state(second)
    assert b" " not in encode_state(first).replace(b"node-1", b"")
    assert decode_state(encode_state(first)) == first


def test_quorum_is_more_than_half_and_empty_never_has_one() -> None:
    config = VotingConfiguration.of(["a", "b", "c", "d"])
    assert not config.has_quorum({"a", "b"})
    assert config.has_quorum({"a", "b", "c"})
    assert not config.has_quorum({"x", "y", "z"})
    assert not VotingConfiguration().has_quorum({"a"})


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3),
    max_leaves=5,
)
kv_maps = st.dictionaries(st.text(min_size=1, max_size=4), json_values, max_size=12)


@given(before=kv_maps, after=kv_maps)
def test_apply_of_computed_diff_is_the_target_state(before: dict[str, object], after: dict[str, object]) -> None:
    old = make_state(before)
    new = old.replace(kv=after, version=2, state_uuid="s2", parent_uuid="s1")
    assert apply_diff(old, decode_diff(encode_diff(compute_diff(old, new)))) == new
