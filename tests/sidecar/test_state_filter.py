"""`GET /_cluster/state?filter_path=...` (Elasticsearch's response filtering): the patterns, the filtered answer,
and a node that renders only what is asked for, so that the operator's pass over every pod costs the membership
and not the keys."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from coordinated.coordination.state import ClusterState, state_to_api
from coordinated.sidecar.web import state_filter
from coordinated.tools.localcluster import LocalCluster

pytestmark = pytest.mark.timeout(120)

STATUS_FIELDS = "cluster_name,cluster_uuid,version,term,master_node,nodes,metadata.cluster_coordination"


def test_patterns_select_fields_at_any_depth() -> None:
    answer = {
        "cluster_name": "c",
        "version": 7,
        "nodes": {"n1": {"name": "a", "roles": ["master"]}, "n2": {"name": "b", "roles": []}},
        "metadata": {"cluster_coordination": {"term": 2}, "kv": {"k": 1}, "sessions": {}},
        "list": [{"name": "x", "other": 1}, {"other": 2}],
    }
    assert state_filter.apply(answer, state_filter.parse("version,metadata.cluster_coordination")) == {
        "version": 7,
        "metadata": {"cluster_coordination": {"term": 2}},
    }
    assert state_filter.apply(answer, state_filter.parse("nodes.*.name")) == {
        "nodes": {"n1": {"name": "a"}, "n2": {"name": "b"}}
    }
    assert state_filter.apply(answer, state_filter.parse("**.name")) == {
        "nodes": {"n1": {"name": "a"}, "n2": {"name": "b"}},
        "list": [{"name": "x"}],
    }
    assert state_filter.apply(answer, state_filter.parse("meta*.k*")) == {"metadata": {"kv": {"k": 1}}}
    assert state_filter.apply(answer, state_filter.parse("nothing.here")) == {}
    assert state_filter.apply(answer, state_filter.parse("version.below")) == {}  # a number has no fields


@pytest.mark.parametrize(
    ("value", "problem"), [("", "names no field"), ("-metadata.kv", "exclusions"), ("a..b", "empty")]
)
def test_unusable_patterns_say_why(value: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        state_filter.parse(value)


def test_a_state_is_rendered_without_the_maps_no_pattern_selects() -> None:
    state = ClusterState(cluster_name="c", kv={f"k{i}": i for i in range(1000)}, persistent_settings={"a": "b"})
    light = state_filter.lighten(state, state_filter.parse(STATUS_FIELDS))
    assert dict(light.kv) == {} and dict(light.persistent_settings) == {}
    patterns = state_filter.parse(STATUS_FIELDS)
    assert state_filter.apply(state_to_api(light), patterns) == state_filter.apply(state_to_api(state), patterns)
    # A pattern that may reach the keys keeps them.
    assert len(state_filter.lighten(state, state_filter.parse("metadata.*.k1")).kv) == 1000
    assert len(state_filter.lighten(state, state_filter.parse("**")).kv) == 1000


def test_a_node_answers_the_fields_asked_for(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster()
    (node,) = cluster.bootstrap(1)
    for index in range(50):
        assert node.put(f"/_cluster/metadata/key{index}", "x" * 100)[0] == 200
    status, whole = node.request("GET", "/_cluster/state?local=true")
    assert status == 200 and len(whole["metadata"]["kv"]) == 50
    status, light = node.request("GET", f"/_cluster/state?local=true&filter_path={STATUS_FIELDS}")
    assert status == 200, light
    assert light == {
        **{key: whole[key] for key in ("cluster_name", "cluster_uuid", "version", "term", "master_node", "nodes")},
        "metadata": {"cluster_coordination": whole["metadata"]["cluster_coordination"]},
    }
    status, refused = node.request("GET", "/_cluster/state?filter_path=-metadata.kv")
    assert status == 400 and refused["error"]["type"] == "illegal_argument_exception", refused
    assert "exclusions" in refused["error"]["reason"]
