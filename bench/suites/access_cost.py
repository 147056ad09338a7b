"""What authorization costs a write: the CPU per acknowledged write of a 3-node cluster with access control,
writing as a principal whose role comes from one of 1,000 role mappings over 100 custom roles, against the same
run where the principal is a tokens-file `writer` and the cluster has no role or mapping at all.

Both systems authenticate every request (a tokens file), authorize it on the node that takes it and again on the
master in its batch, and record each key's last writer; what differs is only the roles and mappings the
permissions are compiled from (once per principal and roles change: `authorization.Authorizer`), so the ratio is
the cost of many roles and mappings. A third system without any authentication is measured beside them, for the
cost of access control as a whole.

    flock /tmp/bench.lock .venv/bin/python -m bench access-cost

Interleaved rounds (each system started fresh, in a rotated order), 16 sequential writers over the three nodes,
CPU per write from each node's /proc (`CpuMeter`). The figure is the median over the rounds.
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench.harness.machine import CpuMeter
from bench.harness.measure import sequential, throughput
from bench.harness.rounds import Factory, Results, new_results, rotated, run_system
from bench.harness.systems import OursSystem, System
from coordinated.tools.localcluster import LocalCluster

ADMIN_TOKEN = "bench-admin-token-0123456789"
WRITER_TOKEN = "bench-writer-token-0123456789"
APP_TOKEN = "bench-app-token-0123456789"
TOKENS = f"admin {ADMIN_TOKEN}\nwriter {WRITER_TOKEN} bench-writer\nnone {APP_TOKEN} bench-app\n"
ROLES, MAPPINGS = 100, 1_000
NO_AUTH, NO_ROLES, MANY_ROLES = "no auth", "tokens, no roles", f"tokens, {ROLES} roles, {MAPPINGS} mappings"


class AccessSystem(OursSystem):
    """Three sidecars with a tokens file, writing as `token`; with `roles`, the cluster holds 100 custom roles
    and 1,000 role mappings, one of which gives the writing principal its role."""

    def __init__(self, label: str, token: str | None, roles: bool) -> None:
        super().__init__(3)
        self.label = label
        self.token = token
        self.roles = roles

    async def start(self, workdir: Path) -> None:
        settings: dict[str, str] = {}
        headers: dict[str, str] = {}
        if self.token is not None:
            tokens = workdir / "tokens"
            tokens.write_text(TOKENS)
            settings["http.auth.tokens_file"] = str(tokens)
            headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        self.cluster = LocalCluster(workdir, settings=settings, max_nodes=self.size, client_headers=headers)
        writer = {"Authorization": f"Bearer {self.token}"} if self.token is not None else {}
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), headers=writer)
        nodes = await asyncio.to_thread(self.cluster.bootstrap, self.size, 60)
        self.names = [node.name for node in nodes]
        self.ids = {node.node_id(): index for index, node in enumerate(nodes)}
        if self.roles:
            await asyncio.to_thread(define_roles, nodes[0])


def define_roles(node: Any) -> None:
    """100 roles, each over its own prefixes, and 1,000 mappings: exact names and name patterns, by which
    the benchmark's principal gets the role that may write its keys (the harness's `s`, `t` and `health-`) and
    monitor."""
    for index in range(ROLES):
        grants = [{"prefixes": [f"app{index}/", f"shared/{index}/"], "privileges": ["read", "write", "session"]}]
        if index == ROLES - 1:
            grants.append({"prefixes": ["s", "t", "health-"], "privileges": ["read", "write"]})
        body = {"keys": grants, "cluster": ["monitor"] if index == ROLES - 1 else []}
        status, answer = node.put(f"/_security/role/role-{index}", body)
        assert status == 200, answer
    for index in range(MAPPINGS):
        role = f"role-{index % ROLES}"
        principals = [f"service-{index}", f"system:serviceaccount:team-{index % 37}:app-{index}"]
        if index % 10 == 0:
            principals.append(f"batch-{index}-*")
        if index == MAPPINGS - 1:
            role, principals = f"role-{ROLES - 1}", ["bench-*"]  # the writing principal: by a pattern
        status, answer = node.put(
            f"/_security/role_mapping/mapping-{index}", {"roles": [role], "principals": principals}
        )
        assert status == 200, answer


SYSTEMS: list[Factory] = [
    lambda: AccessSystem(NO_AUTH, None, roles=False),
    lambda: AccessSystem(NO_ROLES, WRITER_TOKEN, roles=False),
    lambda: AccessSystem(MANY_ROLES, APP_TOKEN, roles=True),
]


@dataclass
class AccessCostOptions:
    rounds: int = 3
    clients: int = 16
    seconds: float = 8.0
    workdir: Path | None = None
    systems: list[Factory] = field(default_factory=lambda: list(SYSTEMS))


async def measure(system: System, results: Results, options: AccessCostOptions) -> None:
    leader = await system.wait_healthy()
    pids = [system.pid(i) for i in range(system.size)]
    await sequential(system, leader, 50)  # warm-up: every principal's permissions compiled, caches filled
    with CpuMeter(pids) as meter:
        tput = await throughput(system, options.clients, options.seconds, (leader + 1) % system.size)
    cpu = meter.per_write(int(tput["writes"]), pids[leader])
    r = results[system.label]
    r["rate"].append(tput["rate"])
    r["errors"].append(tput["errors"])
    r["cpu_ms"].append(cpu["system_ms"])
    r["master_ms"].append(cpu["master_ms"])
    r["follower_ms"].append(cpu["follower_ms"])
    print(
        f"{system.label:36s} {tput['rate']:7.1f} writes/s ({tput['errors']} err)  cpu/write {cpu['system_ms']:.3f} ms "
        f"(master {cpu['master_ms']:.3f}, each follower {cpu['follower_ms']:.3f})",
        flush=True,
    )


async def run_async(options: AccessCostOptions) -> Results:
    results = new_results()
    base = Path(tempfile.mkdtemp(prefix="coordinated-access-", dir=options.workdir))
    try:
        for round_ in range(options.rounds):
            print(f"== round {round_ + 1}/{options.rounds}", flush=True)
            for factory in rotated(options.systems, round_):

                async def body(system: System, workdir: Path) -> None:
                    await measure(system, results, options)

                await run_system(factory, body, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return results


def summary(results: Results) -> dict[str, Any]:
    """Medians over the rounds, and the cost of the roles (and of access control) as a share of a write's CPU."""
    medians = {
        label: {figure: statistics.median(values) for figure, values in figures.items() if values}
        for label, figures in results.items()
    }
    out: dict[str, Any] = {"medians": medians}
    if NO_ROLES in medians and MANY_ROLES in medians:
        base, roles = medians[NO_ROLES]["cpu_ms"], medians[MANY_ROLES]["cpu_ms"]
        out["roles_cost"] = roles / base - 1
        out["roles_cost_master"] = medians[MANY_ROLES]["master_ms"] / medians[NO_ROLES]["master_ms"] - 1
    if NO_AUTH in medians and NO_ROLES in medians:
        out["access_control_cost"] = medians[NO_ROLES]["cpu_ms"] / medians[NO_AUTH]["cpu_ms"] - 1
    return out


def summary_text(section: dict[str, Any]) -> str:
    lines = []
    for label, figures in section["summary"]["medians"].items():
        lines.append(
            f"{label:36s} {figures['rate']:7.1f} writes/s  cpu/write {figures['cpu_ms']:.3f} ms "
            f"(master {figures['master_ms']:.3f}, each follower {figures['follower_ms']:.3f})"
        )
    summary_ = section["summary"]
    if "roles_cost" in summary_:
        lines.append(
            f"{ROLES} roles and {MAPPINGS} mappings cost {summary_['roles_cost'] * 100:+.1f}% of a write's CPU "
            f"(the master's: {summary_['roles_cost_master'] * 100:+.1f}%), against no roles"
        )
    if "access_control_cost" in summary_:
        lines.append(
            f"access control (tokens, checks, last writers) costs {summary_['access_control_cost'] * 100:+.1f}%"
        )
    return "\n".join(lines)


def run(options: AccessCostOptions) -> dict[str, Any]:
    results = asyncio.run(run_async(options))
    settings = {"rounds": options.rounds, "clients": options.clients, "seconds": options.seconds}
    return {"options": settings, "results": results, "summary": summary(results)}
