from __future__ import annotations

from itertools import pairwise

import immutables
import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinated.coordination import state as state_module
from coordinated.coordination.batch import execute_batch
from coordinated.coordination.batch_draft import BatchContext
from coordinated.coordination.requests.keys import KvDelete, KvPut
from coordinated.coordination.state import (
    ClusterState,
    Derivations,
    DiscoveryNode,
    IncompatibleDiffError,
    MapDiff,
    StateEncoder,
    VotingConfiguration,
    apply_diff,
    compose_diffs,
    compute_diff,
    decode_diff,
    decode_state,
    encode_diff,
    encode_state,
)
from coordinated.coordination.tasks import ClientTask


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


# -- persistent maps and diffs in proportion to the change -------------------------------------------------


def _batch_state(keys: int) -> ClusterState:
    """A state with `keys` keys, then one derived from it by a master's batch (one put, one delete)."""
    base = make_state({f"k{index}": index for index in range(keys)})
    master = base.nodes["n1"]
    context = BatchContext(master, 1, {"n1"}, 10, True, iter(f"u{n}" for n in range(10)).__next__)
    new_state, _ = execute_batch(base, [ClientTask(KvPut("new", 1)), ClientTask(KvDelete("k0"))], context)
    assert new_state is not None
    return new_state


def test_a_state_holds_persistent_maps_and_encodes_them_as_sorted_objects() -> None:
    state = make_state({"b": 2, "a": 1})
    assert isinstance(state.kv, immutables.Map) and isinstance(state.persistent_settings, immutables.Map)
    assert encode_state(state) == encode_state(decode_state(encode_state(state)))
    assert b'"kv":{"a":1,"b":2}' in encode_state(state)
    assert isinstance(decode_state(encode_state(state)).kv, immutables.Map)


def test_the_diff_of_a_batch_is_known_without_comparing_the_maps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Publication's diff of a batch's state comes from the batch's own changes, not from a full comparison."""
    base = make_state({f"k{index}": index for index in range(1000)})
    master = base.nodes["n1"]
    derivations = Derivations()
    new_uuid = iter(f"u{n}" for n in range(10)).__next__
    context = BatchContext(master, 1, {"n1"}, 10, True, new_uuid, derivations=derivations)
    new_state, _ = execute_batch(base, [ClientTask(KvPut("new", 1)), ClientTask(KvDelete("k0"))], context)
    assert new_state is not None

    def compare_everything(before: object, after: object) -> MapDiff:
        raise AssertionError("compared whole maps")

    monkeypatch.setattr(state_module, "diff_maps", compare_everything)
    diff = compute_diff(base, new_state, derivations)
    assert diff.kv.upserts == {"new": 1} and diff.kv.deletes == ("k0",)
    assert apply_diff(base, diff) == new_state


def test_an_applied_diff_shares_the_untouched_entries_and_chains_without_comparing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = _batch_state(100)
    second = first.replace(kv=first.kv.set("x", 9), version=first.version + 1, state_uuid="s3", parent_uuid="u1")
    derivations = Derivations()
    applied = apply_diff(first, compute_diff(first, second), derivations)
    assert applied == second
    third = apply_diff(applied, compute_diff(second, second.replace(kv={}, version=9, state_uuid="s4")), derivations)
    monkeypatch.setattr(state_module, "diff_maps", lambda before, after: pytest.fail("compared whole maps"))
    # applied -> third was recorded by apply_diff; applied was derived from first by apply_diff too.
    chained = compute_diff(first, third, derivations)
    assert apply_diff(first, chained) == third


def test_derivations_are_the_owners_and_are_forgotten_with_their_state() -> None:
    """Each node keeps its own record: another node's (or none) compares the maps; a state gone is forgotten."""
    first = _batch_state(10)
    second = first.replace(kv=first.kv.set("x", 9), version=first.version + 1, state_uuid="s3", parent_uuid="u1")
    mine, theirs = Derivations(), Derivations()
    applied = apply_diff(first, compute_diff(first, second), mine)
    assert mine.chain(first, applied) is not None and theirs.chain(first, applied) is None
    assert len(mine) == 1
    del applied
    assert len(mine) == 0  # held weakly: the entry went with the state


def test_a_composed_diff_refuses_a_gap() -> None:
    first = _batch_state(10)
    unrelated = compute_diff(make_state({}, uuid="x1"), make_state({"a": 1}, version=2, uuid="x2"))
    with pytest.raises(IncompatibleDiffError):
        compose_diffs([compute_diff(make_state({f"k{i}": i for i in range(10)}), first), unrelated])


maps = st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 3), max_size=6)


@given(st.lists(maps, min_size=2, max_size=6))
def test_composed_diffs_rebuild_the_last_state(steps: list[dict[str, object]]) -> None:
    states = [make_state(kv, version=index + 1, uuid=f"s{index}") for index, kv in enumerate(steps)]
    diffs = [compute_diff(before, after) for before, after in pairwise(states)]
    assert apply_diff(states[0], compose_diffs(diffs)) == states[-1]


def test_encoding_states_one_after_another_gives_the_bytes_of_a_fresh_encoding() -> None:
    """A StateEncoder moves plain copies of the maps from state to state; the bytes must be exactly those of
    encoding each state on its own (sorted fields and keys), whatever the order of encodings."""
    reference = msgspec.json.Encoder(order="sorted", enc_hook=state_module.ENCODE_HOOK)
    first = _batch_state(50)
    diff = compute_diff(first, first.replace(kv=first.kv.set("zz", 1).delete("k7"), version=9, state_uuid="s9"))
    derivations = Derivations()
    encoder = StateEncoder(derivations)
    second = apply_diff(first, diff, derivations)
    master = first.nodes["n1"]
    new_uuid = iter(f"v{n}" for n in range(10)).__next__
    context = BatchContext(master, 1, {"n1"}, 10, True, new_uuid, derivations=derivations)
    third, _ = execute_batch(second, [ClientTask(KvPut("a", {"b": [1]})), ClientTask(KvDelete("k9"))], context)
    assert third is not None
    unrelated = make_state({"q": 1, "p": 2})
    committed = third.replace(cluster_uuid_committed=True)
    for state in (first, second, third, committed, first, unrelated, third, second, third):
        assert encoder.encode(state) == reference.encode(state) == encode_state(state)
