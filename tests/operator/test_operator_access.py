"""spec.access in the operator, without Kubernetes: what the pods get for ServiceAccount tokens (settings, the
keys volume), the checks of the lists before anything is sent, and the access step's condition, Events and status
for every outcome, against a sidecar API kept in memory. The same step against a real node and a real API
server's tokens is in test_access_apiserver.py."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any, cast

import pytest

from coordinated.client import ApiError
from coordinated.operator import manifests
from coordinated.operator.reconcile import access as access_step
from coordinated.operator.reconcile.context import Context
from coordinated.operator.sidecar_client import SidecarError
from coordinated.operator.spec import CLUSTER_UUID_ANNOTATION, PAUSE_ANNOTATION, ClusterSpec

ACCESS = {
    "roles": [{"name": "orders", "keys": [{"prefixes": ["orders/"], "privileges": ["read", "write"]}]}],
    "roleMappings": [
        {"name": "orders", "roles": ["orders"], "serviceAccounts": [{"namespace": "shop", "name": "orders-api"}]}
    ],
    "quotas": [{"name": "orders", "prefix": "orders/", "maxKeys": 100}],
}


def spec_of(annotations: Mapping[str, str] | None = None, **fields: Any) -> ClusterSpec:
    metadata = {"name": "demo", "namespace": "ns", "uid": "u", "annotations": dict(annotations or {})}
    return ClusterSpec.from_resource({"metadata": metadata, "spec": fields})


def settings_of(spec: ClusterSpec) -> dict[str, str]:
    args = manifests.sidecar_args(spec)
    return dict(args[i + 1].split("=", 1) for i, arg in enumerate(args) if arg == "-E")


def test_with_tokens_on_the_pods_verify_service_account_tokens_of_the_clusters_audience() -> None:
    spec = spec_of()
    assert manifests.service_account_audience(spec) == "coordinated.dev/ns/demo"
    settings = settings_of(spec)
    assert settings["http.auth.kubernetes.audience"] == "coordinated.dev/ns/demo"
    assert settings["http.auth.kubernetes.keys_file"] == "/etc/coordinated/service-account-keys/keys.json"
    pod = manifests.statefulset(spec, 3)["spec"]["template"]["spec"]
    volume = next(volume for volume in pod["volumes"] if volume["name"] == "service-account-keys")
    assert volume["configMap"] == {"name": "demo-service-account-keys", "defaultMode": 0o440, "optional": True}
    mounts = pod["containers"][0]["volumeMounts"]
    assert {
        "name": "service-account-keys",
        "mountPath": "/etc/coordinated/service-account-keys",
        "readOnly": True,
    } in mounts
    assert pod["automountServiceAccountToken"] is False  # the sidecar still never calls the API server

    custom = spec_of(access={"serviceAccounts": {"audience": "orders.example.com"}})
    assert settings_of(custom)["http.auth.kubernetes.audience"] == "orders.example.com"
    for off in (spec_of(auth={"enabled": False}), spec_of(access={"serviceAccounts": {"enabled": False}})):
        assert manifests.service_account_audience(off) is None
        assert not any(name.startswith("http.auth.kubernetes.") for name in settings_of(off))
        volumes = manifests.statefulset(off, 3)["spec"]["template"]["spec"]["volumes"]
        assert "service-account-keys" not in {volume["name"] for volume in volumes}


@pytest.mark.parametrize(
    ("access", "problem"),
    [
        (
            {"roles": [{"name": "r", "keys": [{"prefixes": ["a" * 300], "privileges": ["read"]}]}]},
            "roles[r]: [keys[0].prefixes[0]]: invalid prefix",
        ),
        ({"roles": [{"name": "none"}]}, "role [none] is built in"),
        ({"roles": [{"name": "r"}, {"name": "r"}]}, "role [r] is listed twice"),
        (
            {"roleMappings": [{"name": "m", "roles": ["r"]}]},
            "roleMappings[m]: [principals]: a role mapping names at least one",
        ),
        ({"roleMappings": [{"name": "m", "roles": ["r"], "principals": ["a*b"]}]}, "has [*] other than at its end"),
        ({"quotas": [{"name": "q", "prefix": "a/"}]}, "quotas[q]: a quota sets at least one of maxKeys, maxBytes"),
        ({"quotas": [{"name": "q", "prefix": "a/", "maxKeys": "many"}]}, "[maxKeys] must be a whole number"),
    ],
)
def test_the_lists_are_checked_as_the_sidecars_check_them(access: dict[str, Any], problem: str) -> None:
    problems = spec_of(access=access).access.validate()
    assert any(problem in found for found in problems), problems


class MemorySidecar:
    """The sidecar's access API in memory, answering as the sidecar does."""

    def __init__(self) -> None:
        self.roles_: dict[str, dict[str, Any]] = {"admin": {"keys": [], "cluster": [], "built_in": True}}
        self.mappings: dict[str, dict[str, Any]] = {}
        self.quotas_: dict[str, dict[str, Any]] = {}
        self.calls: list[str] = []
        self.refuse: dict[str, ApiError] = {}  # call -> the error it answers

    def _answer(self, call: str) -> None:
        self.calls.append(call)
        if call in self.refuse:
            error = self.refuse[call]
            raise SidecarError(f"{call} answered {error}", error.status, error.type) from error

    async def roles(self) -> dict[str, Any]:
        self._answer("roles")
        return dict(self.roles_)

    async def role_mappings(self) -> dict[str, Any]:
        self._answer("role_mappings")
        return dict(self.mappings)

    async def quotas(self) -> dict[str, Any]:
        self._answer("quotas")
        return dict(self.quotas_)

    async def put_role(self, name: str, grants: Mapping[str, Sequence[str]], cluster: Sequence[str]) -> None:
        self._answer(f"put_role {name}")
        keys = [{"prefixes": [prefix], "privileges": list(privileges)} for prefix, privileges in grants.items()]
        self.roles_[name] = {"keys": keys, "cluster": list(cluster), "built_in": False}

    async def put_role_mapping(self, name: str, roles: Sequence[str], principals: Sequence[str]) -> None:
        self._answer(f"put_role_mapping {name}")
        self.mappings[name] = {"roles": list(roles), "principals": list(principals)}

    async def put_quota(self, name: str, prefix: str, limits: Mapping[str, int], force: bool) -> None:
        self._answer(f"put_quota {name}")
        self.quotas_[name] = {"prefix": prefix, **limits, "usage": {"keys": 0}}

    async def delete_role(self, name: str) -> None:
        self._answer(f"delete_role {name}")
        del self.roles_[name]

    async def delete_role_mapping(self, name: str) -> None:
        self._answer(f"delete_role_mapping {name}")
        del self.mappings[name]

    async def delete_quota(self, name: str) -> None:
        self._answer(f"delete_quota {name}")
        del self.quotas_[name]


def run(
    spec: ClusterSpec,
    sidecar: MemorySidecar,
    monkeypatch: pytest.MonkeyPatch,
    previous: Mapping[str, Any] | None = None,
    master: str | None = "demo-0",
    problems: Sequence[str] = (),
) -> access_step.StepResult:
    monkeypatch.setattr(access_step, "coordinator", lambda *args: sidecar)
    fields = {
        "spec": spec,
        "previous_status": dict(previous or {}),
        "acting": not problems and not spec.paused,
        "problems": list(problems),
        "obs": SimpleNamespace(cluster=SimpleNamespace(master=master)),
        "http": None,
        "secured": None,
        "logger": logging.getLogger("test"),
    }
    return asyncio.run(access_step.step(cast(Context, SimpleNamespace(**fields))))


def status_after(previous: Mapping[str, Any], result: access_step.StepResult) -> dict[str, Any]:
    """The status as the API server keeps it after the step's merge patch and the status step's conditions."""
    access = dict(previous.get("access") or {})
    for key, value in ((result.status or {}).get("access") or {}).items():
        if value is None:
            access.pop(key, None)
        else:
            access[key] = value
    conditions = [
        {"type": c.type, "status": str(c.status), "reason": c.reason, "message": c.message} for c in result.conditions
    ]
    return {"access": access, "conditions": conditions}


FORMED = {CLUSTER_UUID_ANNOTATION: "uuid-1"}


def test_applied_once_then_nothing_is_written_and_a_removed_entry_is_deleted(monkeypatch: pytest.MonkeyPatch) -> None:
    sidecar = MemorySidecar()
    spec = spec_of(FORMED, access=ACCESS)
    first = run(spec, sidecar, monkeypatch)
    [condition] = first.conditions
    assert (condition.status, condition.reason) == (True, "Applied")
    assert first.events == (
        ("Normal", "AccessChanged", "put role [orders]; put role mapping [orders]; put quota [orders]"),
    )
    assert sidecar.mappings["orders"]["principals"] == ["system:serviceaccount:shop:orders-api"]
    status = status_after({}, first)
    assert status["access"]["managed"] == {"roles": ["orders"], "roleMappings": ["orders"], "quotas": ["orders"]}
    assert status["access"]["serviceAccountAudience"] == "coordinated.dev/ns/demo"

    sidecar.calls.clear()
    steady = run(spec, sidecar, monkeypatch, status)
    assert sidecar.calls == ["roles", "role_mappings", "quotas"] and steady.events == () and steady.status is None

    # Someone changed the role through the API: the spec's comes back.
    sidecar.roles_["orders"]["keys"] = [{"prefixes": [""], "privileges": ["read", "write"]}]
    assert [event[2] for event in run(spec, sidecar, monkeypatch, status).events] == ["put role [orders]"]

    without_quota = spec_of(FORMED, access={**ACCESS, "quotas": []})
    removed = run(without_quota, sidecar, monkeypatch, status)
    assert [event[2] for event in removed.events] == ["deleted quota [orders]"]
    assert status_after(status, removed)["access"]["managed"]["quotas"] == []
    assert "orders" not in sidecar.quotas_

    # Everything removed: the rest goes, mappings before roles; roles of others stay.
    sidecar.roles_["someone-elses"] = {"keys": [], "cluster": ["monitor"], "built_in": False}
    status = status_after(status, removed)
    emptied = run(spec_of(FORMED), sidecar, monkeypatch, status)
    assert [event[2] for event in emptied.events] == ["deleted role mapping [orders]; deleted role [orders]"]
    assert set(sidecar.roles_) == {"admin", "someone-elses"}
    status = status_after(status, emptied)
    assert run(spec_of(FORMED), sidecar, monkeypatch, status).conditions == ()  # nothing left to say
    assert status_after(status, run(spec_of(FORMED), sidecar, monkeypatch, status))["access"] == {
        "serviceAccountAudience": "coordinated.dev/ns/demo"
    }


def test_a_refused_entry_fails_the_condition_with_its_reason_announced_once(monkeypatch: pytest.MonkeyPatch) -> None:
    sidecar = MemorySidecar()
    reason = "quota [orders] limits max_keys to 100 but its prefix holds 250"
    sidecar.refuse["put_quota orders"] = ApiError(400, "illegal_argument_exception", reason)
    spec = spec_of(FORMED, access=ACCESS)
    first = run(spec, sidecar, monkeypatch)
    [condition] = first.conditions
    assert (condition.status, condition.reason) == (False, "Failed")
    assert condition.message == f"quota [orders]: 400 illegal_argument_exception: {reason}"
    assert [event[:2] for event in first.events] == [("Normal", "AccessChanged"), ("Warning", "AccessFailed")]
    status = status_after({}, first)
    assert status["access"]["managed"] == {"roles": ["orders"], "roleMappings": ["orders"], "quotas": []}
    assert run(spec, sidecar, monkeypatch, status).events == ()  # the same failure: no second Warning

    del sidecar.refuse["put_quota orders"]
    fixed = run(spec, sidecar, monkeypatch, status)
    assert fixed.conditions[0].status and [event[2] for event in fixed.events] == ["put quota [orders]"]


def test_access_control_not_on_yet_is_said_so(monkeypatch: pytest.MonkeyPatch) -> None:
    sidecar = MemorySidecar()
    sidecar.refuse["roles"] = ApiError(400, access_step.FEATURE_NOT_AVAILABLE, "node demo-2 runs 0.1.0")
    [condition] = run(spec_of(FORMED, access=ACCESS), sidecar, monkeypatch).conditions
    assert (condition.status, condition.reason) == (False, "NotAvailable") and "demo-2 runs 0.1.0" in condition.message


def test_nothing_is_sent_while_the_spec_is_invalid_paused_tokens_off_or_without_a_master(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sidecar = MemorySidecar()
    invalid = spec_of(FORMED, access={**ACCESS, "quotas": [{"name": "q", "prefix": "bad\u0007", "maxKeys": 1}]})
    [condition] = run(invalid, sidecar, monkeypatch).conditions
    assert (condition.status, condition.reason) == (False, "InvalidSpec") and "quotas[q]: [prefix]" in condition.message
    tokens_off = spec_of(FORMED, access=ACCESS, auth={"enabled": False})
    [condition] = run(tokens_off, sidecar, monkeypatch).conditions
    assert condition.reason == "TokensOff"
    [condition] = run(spec_of(FORMED, access=ACCESS), sidecar, monkeypatch, master=None).conditions
    assert condition.reason == "Pending"
    before = {"conditions": [{"type": "AccessApplied", "status": "True", "reason": "Applied", "message": "m"}]}
    paused = spec_of({**FORMED, PAUSE_ANNOTATION: "true"}, access=ACCESS)
    assert [(c.status, c.reason) for c in run(paused, sidecar, monkeypatch, before).conditions] == [(True, "Applied")]
    assert [
        (c.status, c.reason)
        for c in run(spec_of(FORMED, access=ACCESS), sidecar, monkeypatch, before, master=None).conditions
    ] == [(True, "Applied")]
    assert sidecar.calls == []
