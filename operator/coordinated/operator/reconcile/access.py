"""Step: spec.access's roles, role mappings and quotas, applied through the sidecars' API (`/_security/role`,
`/_security/role_mapping`, `/_quota`) with the operator's admin token, once the cluster has a master.

Each pass reads what the cluster has and changes only what differs from the spec (roles first, since mappings
name them, then mappings, then quotas), so a steady cluster costs three reads and no publication. What the
operator applied is recorded in `status.access.managed`; an entry removed from spec.access is deleted from the
cluster (mappings first), while roles, mappings and quotas made through the API under other names are left
alone. An entry of the spec that already exists is taken over.

The condition `AccessApplied` says how that went: True once the cluster holds what the spec lists; False with
the reason otherwise (`InvalidSpec`, naming each entry's problem, in which case nothing is applied;
`Failed`, naming each entry the sidecars refused, such as a quota below the prefix's current usage without
`force`; `NotAvailable` while a node runs a release without access control; `TokensOff` without spec.auth;
`Pending` until the cluster has a master). A Warning announces each new failure once, and a Normal Event each
change made. Nothing here stops the rest of the pass: scaling and restarts go on whatever access says.
"""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from coordinated.client import ApiError
from coordinated.operator import manifests
from coordinated.operator.access_spec import (
    QUOTA_FIELDS,
    AccessSpec,
    mapping_matches,
    quota_matches,
    role_grants,
    role_matches,
)
from coordinated.operator.reconcile.context import Context, Event, StepResult
from coordinated.operator.reconcile.sidecars import coordinator
from coordinated.operator.sidecar_client import SidecarClient, SidecarError
from coordinated.operator.status import Condition

CONDITION = "AccessApplied"
ROLES, MAPPINGS, QUOTAS = "roles", "roleMappings", "quotas"
KINDS = (ROLES, MAPPINGS, QUOTAS)
_WHAT = {ROLES: "role", MAPPINGS: "role mapping", QUOTAS: "quota"}
FEATURE_NOT_AVAILABLE = "feature_not_available_exception"


@dataclass
class Applied:
    """What one pass did: the names the operator now manages, by kind, the changes made, and what failed."""

    managed: dict[str, set[str]]
    changes: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    not_available: str | None = None


def _reason(error: SidecarError) -> str:
    cause = error.__cause__
    if isinstance(cause, ApiError):
        return f"{cause.status} {cause.type}: {cause.reason}"
    return str(error)


async def apply_access(client: SidecarClient, access: AccessSpec, managed: Mapping[str, set[str]]) -> Applied:
    """Makes the cluster hold what `access` lists, and deletes what the operator applied before (`managed`) and
    the spec no longer lists."""
    applied = Applied({kind: set(names) for kind, names in managed.items()})
    try:
        current = {ROLES: await client.roles(), MAPPINGS: await client.role_mappings(), QUOTAS: await client.quotas()}
    except SidecarError as error:
        if error.error_type == FEATURE_NOT_AVAILABLE:
            applied.not_available = _reason(error)
        else:
            applied.failures.append(f"cannot read the cluster's access control: {_reason(error)}")
        return applied

    async def change(kind: str, name: str, verb: str, call: Awaitable[None]) -> None:
        try:
            await call
        except SidecarError as error:
            if error.error_type == FEATURE_NOT_AVAILABLE:
                applied.not_available = _reason(error)
                return
            if not (verb == "deleted" and error.status == 404):  # already gone: as good as deleted
                applied.failures.append(f"{_WHAT[kind]} [{name}]: {_reason(error)}")
                return
        else:
            applied.changes.append(f"{verb} {_WHAT[kind]} [{name}]")
        if verb == "deleted":
            applied.managed[kind].discard(name)
        else:
            applied.managed[kind].add(name)

    for role in access.roles:
        if role_matches(role.role, current[ROLES].get(role.name)):
            applied.managed[ROLES].add(role.name)
        else:
            call = client.put_role(role.name, role_grants(role.role), role.role.cluster)
            await change(ROLES, role.name, "put", call)
    for mapping in access.role_mappings:
        if mapping_matches(mapping.mapping, current[MAPPINGS].get(mapping.name)):
            applied.managed[MAPPINGS].add(mapping.name)
        else:
            call = client.put_role_mapping(mapping.name, mapping.mapping.roles, mapping.mapping.principals)
            await change(MAPPINGS, mapping.name, "put", call)
    for quota in access.quotas:
        if quota_matches(quota.quota, current[QUOTAS].get(quota.name)):
            applied.managed[QUOTAS].add(quota.name)
        else:
            limits = {key: value for key in QUOTA_FIELDS.values() if (value := getattr(quota.quota, key)) is not None}
            call = client.put_quota(quota.name, quota.quota.prefix, limits, quota.force)
            await change(QUOTAS, quota.name, "put", call)

    wanted = {
        ROLES: {role.name for role in access.roles},
        MAPPINGS: {mapping.name for mapping in access.role_mappings},
        QUOTAS: {quota.name for quota in access.quotas},
    }
    deletions: dict[str, Callable[[str], Awaitable[None]]] = {
        MAPPINGS: client.delete_role_mapping,
        ROLES: client.delete_role,
        QUOTAS: client.delete_quota,
    }
    for kind, delete in deletions.items():  # mappings before the roles they name
        for name in sorted(applied.managed[kind] - wanted[kind]):
            if name in current[kind]:
                await change(kind, name, "deleted", delete(name))
            else:
                applied.managed[kind].discard(name)
    return applied


def _previous_condition(previous_status: Mapping[str, Any]) -> Condition | None:
    for entry in previous_status.get("conditions") or ():
        if entry.get("type") == CONDITION:
            status = entry.get("status") == "True"
            return Condition(CONDITION, status, str(entry.get("reason", "")), str(entry.get("message", "")))
    return None


def _announced(before: Condition | None, condition: Condition, changes: list[str]) -> tuple[Event, ...]:
    events: list[Event] = []
    if changes:
        events.append(("Normal", "AccessChanged", "; ".join(changes)))
    same = before is not None and (before.status, before.reason, before.message) == (
        condition.status,
        condition.reason,
        condition.message,
    )
    if not condition.status and not same and condition.reason != "Pending":
        events.append(("Warning", f"Access{condition.reason}", condition.message))
    return tuple(events)


def _status(previous: Mapping[str, Any], section: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The status to write: `access` only when it changed (a steady cluster costs no write). A merge patch: a
    field that goes is written as null."""
    before = previous.get("access") or {}
    now = {key: value for key, value in section.items() if value is not None}
    if before == now:
        return None
    return {"access": {**{key: None for key in before if key not in now}, **now}}


async def step(ctx: Context) -> StepResult:
    spec, previous = ctx.spec, ctx.previous_status
    access = spec.access
    audience = manifests.service_account_audience(spec)
    before_section: Mapping[str, Any] = previous.get("access") or {}
    managed = {kind: set((before_section.get("managed") or {}).get(kind) or ()) for kind in KINDS}
    section: dict[str, Any] = {**before_section, "serviceAccountAudience": audience}
    before = _previous_condition(previous)

    if not access.lists_anything and not any(managed.values()):
        section = {"serviceAccountAudience": audience}
        return StepResult(status=_status(previous, section))
    if not spec.auth_enabled:
        message = (
            "spec.access needs spec.auth.enabled: without tokens the sidecars authenticate nobody, so roles would "
            "restrict nobody"
        )
        condition = Condition(CONDITION, False, "TokensOff", message)
        return StepResult((condition,), _announced(before, condition, []), status=_status(previous, section))
    if not ctx.acting:  # paused, or an invalid spec: nothing changes, the condition stays as it was
        return StepResult(() if before is None else (before,), status=_status(previous, section))
    problems = access.validate()
    if problems:
        condition = Condition(CONDITION, False, "InvalidSpec", "; ".join(problems))
        return StepResult((condition,), _announced(before, condition, []), status=_status(previous, section))
    obs = ctx.obs
    if obs.cluster.master is None or not spec.recorded_cluster_uuid:
        waiting = Condition(CONDITION, False, "Pending", "waiting for the cluster to have a master")
        return StepResult((before or waiting,), status=_status(previous, section))

    try:
        client = coordinator(ctx.http, spec, obs, ctx.secured)
        applied = await apply_access(client, access, managed)
    except SidecarError as error:
        applied = Applied(managed, failures=[f"no sidecar to apply spec.access to: {error}"])
    section["managed"] = {kind: sorted(applied.managed[kind]) for kind in KINDS}
    if applied.not_available is not None:
        condition = Condition(
            CONDITION,
            False,
            "NotAvailable",
            f"access control is not on yet (not every node runs a release that has it): {applied.not_available}",
        )
    elif applied.failures:
        condition = Condition(CONDITION, False, "Failed", "; ".join(applied.failures))
    else:
        counts = ", ".join(f"{len(entries)} {kind}" for kind, entries in section["managed"].items())
        condition = Condition(CONDITION, True, "Applied", f"the cluster holds what spec.access lists ({counts})")
        if applied.changes or before is None or not before.status:
            section["lastAppliedTime"] = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    for change in applied.changes:
        ctx.logger.info("spec.access: %s", change)
    return StepResult((condition,), _announced(before, condition, applied.changes), status=_status(previous, section))
