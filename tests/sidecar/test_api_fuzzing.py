"""The client API fuzzed from its OpenAPI document (Schemathesis) against a real 3-node cluster with tokens on.

For every operation of docs/openapi.json, Schemathesis generates requests that fit the document (positive)
and requests that break it (negative), sends each to one of the nodes, round robin, with an admin token, and
checks that the answer:
- is never a 5xx;
- has a status, a content type and a body the document gives for the operation (every error has the error
  shape, since the document gives it for every error status);
- is a 4xx for a request that breaks the document.
Before the run the test writes keys; after it, every node is green and every one of those keys still holds the
value and version its write was acknowledged with.

The run is derandomized: the same requests every time. `FUZZ_API_EXAMPLES` (default 6) is the number of examples
per operation and mode; a long run is e.g. `FUZZ_API_EXAMPLES=200 .venv/bin/pytest tests/sidecar/test_api_fuzzing.py`.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from coordinated.coordination.settings import parse_time_ms
from coordinated.sidecar.web import openapi
from coordinated.tools.localcluster import FAST_SETTINGS, LocalCluster, LocalNode

pytestmark = pytest.mark.timeout(600)

EXAMPLES = int(os.environ.get("FUZZ_API_EXAMPLES", "6"))
ADMIN = "a" * 32
AUTH = {"Authorization": f"Bearer {ADMIN}"}
KEPT_KEYS = 20
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]

schema = schemathesis.openapi.from_dict(openapi.build_document())
# The harness sends the admin token itself: a generated Authorization header (missing, or broken, in negative
# cases) would be replaced by it, and the case then reported as invalid input accepted. The token checks have
# their own tests (test_sidecar_security.py).
schema.config.generation.update(modes=["positive", "negative"], with_security_parameters=False)


class FuzzedCluster:
    def __init__(self, cluster: LocalCluster, nodes: list[LocalNode]) -> None:
        self.cluster = cluster
        self.nodes = nodes
        self.next_node = itertools.cycle(nodes)
        self.acknowledged: dict[str, tuple[Any, int]] = {}  # key: (value, version) of its acknowledged write
        self.requests = 0


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzedCluster]:
    workdir = tmp_path_factory.mktemp("fuzzed")
    tokens = workdir / "tokens"
    tokens.write_text(f"admin {ADMIN}\n")
    cluster = LocalCluster(
        workdir / "cluster", settings={**FAST_SETTINGS, "http.auth.tokens_file": str(tokens)}, client_headers=AUTH
    )
    try:
        nodes = cluster.bootstrap(3)
        cluster.wait_master()
        fuzzed = FuzzedCluster(cluster, nodes)
        for index in range(KEPT_KEYS):
            key, value = f"{KEPT_PREFIX}{index:03d}", {"index": index, "text": "written before the fuzzing"}
            status, body = nodes[index % 3].put(f"/_cluster/metadata/{key}", value)
            assert status == 200, body
            fuzzed.acknowledged[key] = (value, body["version"])
        yield fuzzed
        print(f"\napi fuzzing: {fuzzed.requests} requests ({EXAMPLES} examples per operation and mode)")
    finally:
        cluster.stop_all(graceful=False)


# Parameters that make a request wait, and for how long at most when the fuzzer asks for a valid wait: a long
# wait is not a defect, only slow, and the bounded run must stay short. Invalid values are sent as generated.
WAIT_PARAMS = {"timeout": "10s", "master_timeout": "10s", "wait_for_timeout": "0s"}
WAITS_FOR_A_CHANGE = {"/_cluster/metadata/_watch", "/_cluster/health"}  # there `timeout` is how long to wait


def bound_waits(case: Any) -> None:
    query = case.query if isinstance(case.query, dict) else None
    if query is None:
        return
    for name, longest in WAIT_PARAMS.items():
        value = query.get(name)
        if isinstance(value, str) and _is_time_value(value):
            query[name] = "0s" if name == "timeout" and case.operation.path in WAITS_FOR_A_CHANGE else longest
    # A filtered state holds only the fields asked for, which the answer's schema (the whole state) does not
    # describe: filter_path has its own tests (test_state_filter.py).
    if case.operation.path == "/_cluster/state":
        query.pop("filter_path", None)
    # A stream lasts until the client closes it: streams have their own tests (test_watch_streams.py).
    if case.operation.path == "/_cluster/metadata/_watch" and query.get("stream") in ("true", ""):
        query["stream"] = "false"
    # Without a wait of its own, a watch or `wait_for_nodes` waits the default 30 s.
    if case.operation.path in WAITS_FOR_A_CHANGE and "timeout" not in query:
        query["timeout"] = "0s"
    if "wait_for_version" in query and "wait_for_timeout" not in query:
        query["wait_for_timeout"] = "0s"


KEPT_PREFIX = "kept/"


def _covers_kept_keys(prefix: object) -> bool:
    return isinstance(prefix, str) and (KEPT_PREFIX.startswith(prefix) or prefix.startswith(KEPT_PREFIX))


def spare_kept_keys(case: Any) -> None:
    """A prefix delete of the keys written before the run (`prefix=` or `all=true` deletes every key) is moved to other keys:
    the run checks that acknowledged writes are kept, which a delete the fuzzer had acknowledged would undo."""
    query = case.query if isinstance(case.query, dict) else {}
    if case.operation.path == "/_cluster/metadata" and _covers_kept_keys(query.get("prefix")):
        query["prefix"] = "fuzz/" + query["prefix"]
    elif (
        case.operation.path == "/_cluster/metadata"
        and "prefix" not in query
        and (case.method == "DELETE" or "all" in query)
    ):
        query["prefix"] = "fuzz/"  # no prefix is the empty one: with `all=true`, every key
    if case.operation.path == "/_cluster/metadata/_txn" and isinstance(case.body, dict):
        for branch in ("success", "failure"):
            ops = case.body.get(branch)
            for op in ops if isinstance(ops, list) else []:
                if isinstance(op, dict) and op.get("op") == "delete_prefix" and _covers_kept_keys(op.get("prefix")):
                    op["prefix"] = "fuzz/" + op["prefix"]


def _is_time_value(value: str) -> bool:
    try:
        parse_time_ms(value)
    except ValueError:
        return False
    return True


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
def test_every_answer_matches_the_document(case: Any, fuzzed: FuzzedCluster) -> None:
    if case.query is None and case.operation.path in WAITS_FOR_A_CHANGE:
        case.query = {}
    bound_waits(case)
    spare_kept_keys(case)
    fuzzed.requests += 1
    node = next(fuzzed.next_node)
    case.call_and_validate(base_url=node.url, headers=AUTH, timeout=60, checks=CHECKS)


def test_after_the_fuzzing_the_cluster_is_green_and_kept_every_acknowledged_write(fuzzed: FuzzedCluster) -> None:
    for node in fuzzed.nodes:
        status, health = node.get("/_cluster/health?wait_for_nodes=3&timeout=30s", timeout=40)
        assert (status, health["status"]) == (200, "green"), health
    for index, (key, (value, version)) in enumerate(sorted(fuzzed.acknowledged.items())):
        status, body = fuzzed.nodes[index % 3].get(f"/_cluster/metadata/{key}")
        assert status == 200, body
        assert (body["value"], body["version"]) == (value, version)


def test_the_node_serves_the_document_it_is_fuzzed_with(fuzzed: FuzzedCluster) -> None:
    status, served = fuzzed.nodes[0].get("/_openapi")
    assert status == 200
    assert served == openapi.build_document()
