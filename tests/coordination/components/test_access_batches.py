"""Access control where the master builds each batch: requests authorized against the roles and mappings of the
state the batch builds (so a write that races a revocation is decided in the order they commit), the last writer
of each key, sessions' owners, the changes of roles, mappings and quotas, and quotas held exactly, task after
task."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinated.coordination.authorization import Authorizer
from coordinated.coordination.batch import execute_batch
from coordinated.coordination.batch_draft import BatchContext, StateSizes
from coordinated.coordination.batch_keys import entry_size
from coordinated.coordination.batch_writes import DEFERRED
from coordinated.coordination.client import ClusterError, Committed, Principal, SessionInfo, TxnResult
from coordinated.coordination.quotas import QuotaUsage, Usage, WriteRates, quota_index, usage_of_state
from coordinated.coordination.requests import action_of
from coordinated.coordination.requests.keys import KvDelete, KvDeletePrefix, KvPut
from coordinated.coordination.requests.security import (
    DeleteQuota,
    DeleteRoleMapping,
    PutQuota,
    PutRole,
    PutRoleMapping,
)
from coordinated.coordination.requests.sessions import SessionCreate, SessionEnd
from coordinated.coordination.requests.transactions import Txn, TxnOp
from coordinated.coordination.security import KeyGrant, Quota, RoleDescriptor, RoleMapping, SecurityMetadata
from coordinated.coordination.state import ClusterState, CoordinationMetadata, DiscoveryNode, VotingConfiguration
from coordinated.coordination.tasks import ClientTask

MASTER = DiscoveryNode("m", "m", "m:9300")
ADMIN = Principal("ops", "file", ("admin",))
APP_A = Principal("app-a", "file")
APP_B = Principal("app-b", "kubernetes")
ROLE_A = RoleDescriptor((KeyGrant(("app/a/",), ("read", "write", "session")),))
SECURITY = SecurityMetadata(
    roles={"app-a": ROLE_A},
    role_mappings={"app-a": RoleMapping(("app-a",), ("app-a",)), "ops": RoleMapping(("admin",), ("ops-2",))},
)


def base(kv: dict[str, object] | None = None, security: SecurityMetadata | None = SECURITY) -> ClusterState:
    config = VotingConfiguration.of(["m"])
    state = ClusterState(
        cluster_name="t",
        cluster_uuid="c",
        version=1,
        state_uuid="s1",
        master_node="m",
        nodes={"m": MASTER},
        coordination=CoordinationMetadata(term=1, last_committed_config=config, last_accepted_config=config),
        kv=kv or {},
    )
    return state if security is None else state.replace(security=security)


_UUIDS = itertools.count()


def uuids() -> Iterator[str]:
    """Unique across batches: a state's indexes (the quota usage) know states by their uuid."""
    return (f"u{next(_UUIDS)}" for _ in itertools.repeat(None))


def context(access: bool = True, now: int = 0, rates: WriteRates | None = None) -> BatchContext:
    usage = QuotaUsage()
    return BatchContext(
        MASTER,
        1,
        {"m"},
        10,
        True,
        uuids().__next__,
        sizes=StateSizes(),
        access_control=access,
        authorizer=Authorizer(),
        quota_usage=lambda state: usage.at(state).usage,
        write_rates=rates or WriteRates(),
        now=now,
    )


def run(state: ClusterState, *tasks: ClientTask, **kwargs: object) -> tuple[ClusterState, list[object]]:
    new_state, results = execute_batch(state, list(tasks), context(**kwargs))  # type: ignore[arg-type]
    return (new_state or state), results


def task(request: object, principal: Principal | None = APP_A) -> ClientTask:
    return ClientTask(request, principal)  # type: ignore[arg-type]


def refused(result: object, status: int, *words: str) -> ClusterError:
    assert isinstance(result, ClusterError), result
    assert result.status == status, result
    for word in words:
        assert word in result.reason, (word, result.reason)
    return result


# -- turning it on ------------------------------------------------------------------------------------------


def test_access_control_turns_on_with_the_first_batch_once_every_node_has_it_and_not_before() -> None:
    off = base(security=None)
    state, results = run(off, task(KvPut("app/a/x", 1), None), access=False)
    assert state.security_metadata() is None and dict(state.kv_writers) == {}
    state, results = run(off, task(PutRole("r", ROLE_A), ADMIN), access=False)
    refused(results[0], 400, "not every node")
    assert state.security_metadata() is None
    on, _ = run(off, task(KvPut("k", 1), ADMIN), access=True)
    assert on.security_metadata() == SecurityMetadata() and dict(on.kv_writers) == {"k": "ops"}


# -- authorization in the batch ---------------------------------------------------------------------------


def test_a_write_is_authorized_against_the_roles_of_the_state_the_batch_builds() -> None:
    revoke = task(DeleteRoleMapping("app-a"), ADMIN)
    state, results = run(base(), task(KvPut("app/a/1", 1)), revoke, task(KvPut("app/a/2", 2)))
    assert results[0] is None and isinstance(results[1], Committed)
    refused(results[2], 403, "principal [app-a]", "[write] on key [app/a/2]")
    assert "app/a/1" in state.kv and "app/a/2" not in state.kv
    # And the other way round: a grant earlier in the batch lets a later write through.
    grant = task(PutRoleMapping("b", RoleMapping(("app-a",), ("app-b",))), ADMIN)
    state, results = run(base(), task(KvPut("app/a/3", 3), APP_B), grant, task(KvPut("app/a/4", 4), APP_B))
    refused(results[0], 403)
    assert results[2] is None and state.kv_writers["app/a/4"] == "app-b"


def test_every_op_and_compare_of_a_transaction_both_branches_is_authorized() -> None:
    allowed = Txn(success=(TxnOp("put", "app/a/x", 1),), failure=(TxnOp("get", "app/a/y"),))
    _, results = run(base(), task(allowed))
    assert isinstance(results[0], TxnResult)
    for bad in (
        Txn(success=(TxnOp("put", "app/a/x", 1),), failure=(TxnOp("delete", "app/b/y"),)),
        Txn(compare=(), success=(TxnOp("get", "app/b/x"),)),
        Txn(success=(TxnOp("delete_prefix", prefix="app/"),)),
    ):
        state, results = run(base(), task(bad))
        refused(results[0], 403, "principal [app-a]")
        assert dict(state.kv) == {}


def test_a_session_belongs_to_the_principal_that_created_it() -> None:
    state, results = run(base(), task(SessionCreate(ttl_ms=10_000, prefix="app/a/")))
    created = results[0]
    assert isinstance(created, SessionInfo)
    session = state.sessions[created.id]
    assert session.owner == "app-a" and session.prefix == "app/a/"
    other = Principal("app-a2", "file", ("app-a",))  # the same role, another principal
    for request in (KvPut("app/a/lock", 1, session=created.id), SessionEnd(created.id)):
        _, results = run(state, task(request, other))
        refused(results[0], 403, f"session [{created.id}]")
    # Its owner may use it and end it (in two batches: ending it deletes the key the put wrote, and a batch
    # writes a key once).
    locked, results = run(state, task(KvPut("app/a/lock", 1, session=created.id)))
    assert results == [None]
    _, results = run(locked, task(SessionEnd(created.id)))
    assert results == [None]
    _, results = run(state, task(SessionEnd(created.id), ADMIN))  # an admin may end any
    assert results == [None]
    # A session for keys its creator may not use is refused.
    _, results = run(base(), task(SessionCreate(ttl_ms=10_000, prefix="app/")))
    refused(results[0], 403, "[session] on the keys under prefix [app/]")


def test_each_key_records_the_principal_that_last_wrote_it_and_a_refused_write_leaves_it() -> None:
    quota = task(PutQuota("q", Quota("app/a/", max_keys=1)), ADMIN)
    state, _ = run(base(), task(KvPut("app/a/x", 1)), task(KvPut("free", 1), ADMIN), quota)
    assert dict(state.kv_writers) == {"app/a/x": "app-a", "free": "ops"}
    state, results = run(state, task(KvPut("app/a/x", 2), ADMIN), task(KvPut("app/a/y", 2)))
    refused(results[1], 429, "quota [q]")
    assert dict(state.kv_writers) == {"app/a/x": "ops", "free": "ops"}
    state, _ = run(state, task(KvDelete("app/a/x"), ADMIN))
    assert dict(state.kv_writers) == {"free": "ops"}


# -- changes of roles, mappings and quotas ----------------------------------------------------------------


def test_no_change_of_mappings_leaves_the_cluster_without_an_admin_unless_the_tokens_file_has_one() -> None:
    state, results = run(base(), task(DeleteRoleMapping("ops"), ADMIN))
    refused(results[0], 400, "no admin")
    state, results = run(base(), task(PutRoleMapping("ops", RoleMapping(("reader",), ("ops-2",))), ADMIN))
    refused(results[0], 400, "no admin")
    state, results = run(base(), task(DeleteRoleMapping("ops", file_admins=True), ADMIN))
    assert results == [Committed(1, 2)]
    # Two mappings to admin deleted concurrently: the second one is refused.
    two = SECURITY.role_mappings | {"ops2": RoleMapping(("admin",), ("ops-3",))}
    state = base(security=SecurityMetadata(SECURITY.roles, two))
    state, results = run(state, task(DeleteRoleMapping("ops"), ADMIN), task(DeleteRoleMapping("ops2"), ADMIN))
    assert isinstance(results[0], Committed)
    refused(results[1], 400, "no admin")
    assert "ops2" in state.security_metadata().role_mappings  # type: ignore[union-attr]


def test_bad_roles_mappings_and_quotas_are_refused_naming_the_field() -> None:
    cases = [
        (PutRole("r", RoleDescriptor((KeyGrant(("a/",), ("reed",)),))), "[keys[0].privileges[0]]: unknown privilege"),
        (PutRole("r", RoleDescriptor((KeyGrant(("_a",), ("read",)),))), "[keys[0].prefixes[0]]: invalid prefix"),
        (PutRole("r", RoleDescriptor(cluster=("root",))), "[cluster[0]]: unknown privilege [root]"),
        (PutRole("admin", RoleDescriptor()), "built in"),
        (PutRole("bad name", RoleDescriptor()), "invalid role name"),
        (PutRoleMapping("m", RoleMapping(("r",), ("a*b",))), "[principals[0]]"),
        (PutRoleMapping("m", RoleMapping((), ("a",))), "[roles]"),
        (PutQuota("q", Quota("a/")), "[max_keys]: a quota sets at least one limit"),
        (PutQuota("q", Quota("a\x00", max_keys=1)), "[prefix]: invalid prefix"),
    ]
    for request, words in cases:
        problem = action_of(request).validate(request, base(), None)  # type: ignore[arg-type]
        assert problem is not None and words in problem, (request, problem)


def test_a_quota_below_current_usage_is_refused_unless_forced_and_then_stops_only_growth() -> None:
    state, _ = run(base(), task(KvPut("app/a/x", 1)), task(KvPut("app/a/y", 1)))
    _, results = run(state, task(PutQuota("q", Quota("app/a/", max_keys=1)), ADMIN))
    refused(results[0], 400, "[max_keys] of quota [q] is [1], below what prefix [app/a/] uses now ([2])")
    state, results = run(state, task(PutQuota("q", Quota("app/a/", max_keys=1), force=True), ADMIN))
    assert isinstance(results[0], Committed) and results[0].created is True
    state, results = run(state, task(KvPut("app/a/z", 1)), task(KvPut("app/a/x", 2)), task(KvDelete("app/a/y")))
    refused(results[0], 429, "[max_keys] is [1]")
    assert results[1:] == [None, None]  # an overwrite does not grow the count, a delete shrinks it
    _, results = run(state, task(KvPut("app/a/z", 1)))
    refused(results[0], 429)  # at the limit now: 1 of 1
    state, results = run(state, task(DeleteQuota("q"), ADMIN), task(KvPut("app/a/z", 1)))
    assert results[1] is None


# -- quotas, exactly --------------------------------------------------------------------------------------


def test_keys_bytes_and_sessions_are_held_exactly_whatever_the_batch() -> None:
    quota = Quota("app/a/", max_keys=5, max_bytes=200, max_sessions=2)
    state = base(security=SecurityMetadata(SECURITY.roles, SECURITY.role_mappings, {"q": quota}))
    writes = [task(KvPut(f"app/a/{n}", n)) for n in range(20)]
    state, results = run(state, *writes)
    assert sum(result is None for result in results) == 5 and len(state.kv) == 5
    big = task(KvPut("app/a/0", "x" * 190))
    state, results = run(state, big)
    refused(results[0], 429, "[max_bytes] is [200]")
    sessions = [task(SessionCreate(ttl_ms=10_000, prefix="app/a/")) for _ in range(4)]
    state, results = run(state, *sessions)
    assert sum(isinstance(result, SessionInfo) for result in results) == 2
    refused(results[3], 429, "[max_sessions] is [2]")
    ended = next(result for result in results if isinstance(result, SessionInfo))
    _, results = run(state, task(SessionEnd(ended.id)), task(SessionCreate(ttl_ms=10_000, prefix="app/a/x")))
    assert results[0] is None and isinstance(results[1], SessionInfo)  # the ended one's place, in one batch


def test_a_transaction_refused_by_a_quota_changes_nothing() -> None:
    quota = Quota("app/a/", max_keys=2)
    state = base(security=SecurityMetadata(SECURITY.roles, SECURITY.role_mappings, {"q": quota}))
    txn = Txn(success=tuple(TxnOp("put", f"app/a/{n}", n) for n in range(3)))
    state, results = run(state, task(txn), task(KvPut("app/a/9", 9)))
    refused(results[0], 429)
    assert results[1] is None and set(state.kv) == {"app/a/9"}


def test_writes_per_second_are_a_sliding_window_of_the_masters_clock() -> None:
    quota = Quota("app/a/", max_writes_per_second=3)
    state = base(security=SecurityMetadata(SECURITY.roles, SECURITY.role_mappings, {"q": quota}))
    rates = WriteRates()
    state, results = run(state, *(task(KvPut(f"app/a/{n}", n)) for n in range(5)), now=1_000, rates=rates)
    assert results[:3] == [None] * 3
    refused(results[3], 429, "[max_writes_per_second] is [3]")
    _, results = run(state, task(KvPut("app/a/x", 1)), now=1_999, rates=rates)
    refused(results[0], 429)
    state, results = run(state, task(KvPut("app/a/x", 1)), task(KvPut("free", 1), ADMIN), now=2_000, rates=rates)
    assert results == [None, None]  # a second after: room again; a key under no quota is never counted


def test_a_write_that_waits_for_the_next_batch_is_not_counted_against_writes_per_second() -> None:
    """A transaction that writes a key an earlier task of the batch wrote runs, is taken back and waits for the
    next publication (one write per key per batch): until it runs again it has written nothing under the quota."""
    quota = Quota("app/a/", max_writes_per_second=2)
    state = base(security=SecurityMetadata(SECURITY.roles, SECURITY.role_mappings, {"q": quota}))
    rates = WriteRates()
    again = Txn(success=(TxnOp("put", "app/a/x", 2),))  # its writes are known only once it runs
    state, results = run(state, task(KvPut("app/a/x", 1)), task(again), now=1_000, rates=rates)
    assert results == [None, DEFERRED] and state.kv["app/a/x"] == 1
    state, results = run(state, task(again), now=1_000, rates=rates)
    assert isinstance(results[0], TxnResult) and state.kv["app/a/x"] == 2  # the second write of this second
    refused(run(state, task(KvPut("app/a/y", 1)), now=1_000, rates=rates)[1][0], 429, "[max_writes_per_second]")


def test_a_quota_set_in_a_batch_counts_what_earlier_tasks_of_the_batch_wrote() -> None:
    state, results = run(
        base(),
        task(KvPut("app/a/1", 1)),
        task(PutQuota("q", Quota("app/a/", max_keys=2)), ADMIN),
        task(KvPut("app/a/2", 2)),
        task(KvPut("app/a/3", 3)),
    )
    assert results[2] is None
    refused(results[3], 429)
    assert set(state.kv) == {"app/a/1", "app/a/2"}


usage_ops = st.lists(
    st.tuples(
        st.sampled_from(["put", "delete", "prefix", "session", "end"]),
        st.sampled_from(["a/", "a/b/", "a/b/c", "b/", "a", "c"]),
        st.integers(0, 3),
    ),
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(usage_ops, st.randoms(use_true_random=False))
def test_quota_usage_moved_by_diffs_equals_a_full_count(ops: list[tuple[str, str, int]], rng: random.Random) -> None:
    """Nested quotas, keys and sessions changed batch after batch: the usage a node or master moves along the
    diffs is the usage counted afresh, and a batch holds to it."""
    quotas = {"a": Quota("a/", max_keys=1000), "ab": Quota("a/b/", max_bytes=10**6), "all": Quota("", max_sessions=99)}
    security = SecurityMetadata(quotas=quotas)
    state = base(security=security)
    tracker = QuotaUsage()
    tracker.at(state)
    sessions: list[str] = []
    for kind, where, value in ops:
        if kind == "put":
            request: object = KvPut(f"{where}{value}", "v" * value)
        elif kind == "delete":
            request = KvDelete(f"{where}{value}")
        elif kind == "prefix":
            request = KvDeletePrefix(where)
        elif kind == "session":
            request = SessionCreate(ttl_ms=10_000, prefix=where)
        else:
            request = SessionEnd(rng.choice(sessions) if sessions else "none")
        new_state, results = run(state, task(request, ADMIN))
        sessions += [result.id for result in results if isinstance(result, SessionInfo)]
        tracker.advance(state, new_state)
        state = new_state
        expected = usage_of_state(state.kv, state.sessions.values(), quota_index(security))
        assert tracker.at(state).usage == expected
    for name, quota in quotas.items():
        under = [key for key in state.kv if key.startswith(quota.prefix)]
        counted = tracker.at(state).usage[name]
        assert counted == Usage(
            len(under),
            sum(entry_size(key, state.kv[key]) for key in under),
            sum(1 for session in state.sessions.values() if session.prefix.startswith(quota.prefix)),
        )
