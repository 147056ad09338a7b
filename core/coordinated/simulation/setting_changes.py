"""An admin for random schedules who sets the dynamic settings to the ends of their ranges, and the check that the
cluster stays able to repair them.

A `SettingsChanger` picks a dynamic setting and one of its extremes (every choice of a choice, both ends of a
range) or a reset, and sends it through any node, again and again while the nemesis runs. After the schedule
heals and settles, with the settings wherever the changers left them, `check_repair` asks the master to commit
the reset of every dynamic setting and a write: a value within the bounds that kept the cluster from committing
its own repair is a liveness violation (docs/settings.md).
"""

from __future__ import annotations

import random

from coordinated.coordination.client import ClientResult, Committed
from coordinated.coordination.requests.cluster import UpdateSettings
from coordinated.coordination.requests.keys import KvPut
from coordinated.simulation.cluster import SimulatedCluster, stabilisation_time

REPAIR_KEY = "after-setting-changes"


def dynamic_changes(cluster: SimulatedCluster) -> list[tuple[str, str | None]]:
    """Every (setting, value) a changer may send: each extreme of each dynamic setting, and its reset."""
    registry = cluster.nodes[0].settings.registry
    return [
        (setting.name, value)
        for setting in registry.settings.values()
        if setting.dynamic
        for value in (*setting.value_type.extremes(), None)
    ]


class SettingsChanger:
    def __init__(self, cluster: SimulatedCluster, client_id: int, rng: random.Random) -> None:
        self.cluster = cluster
        self.client_id = client_id
        self.rng = rng
        self.changes = dynamic_changes(cluster)
        self.active = True
        self.committed = 0

    def start(self) -> None:
        self.cluster.schedule(self.cluster.now + self.rng.randint(0, 500), self.change)

    def change(self) -> None:
        if not self.active:
            return
        name, value = self.rng.choice(self.changes)
        node = self.rng.randrange(len(self.cluster.nodes))
        self.cluster.submit(node, UpdateSettings({name: value}), client=self.client_id, on_done=self.done)

    def done(self, result: ClientResult) -> None:
        if isinstance(result, Committed):
            self.committed += 1
        if self.active:
            self.cluster.schedule(self.cluster.now + self.rng.randint(200, 3_000), self.change)


def check_repair(cluster: SimulatedCluster, client_id: int) -> None:
    """The settled cluster commits the reset of every dynamic setting and then a write, through its master."""
    leader = cluster.leader()
    assert leader is not None
    reset = UpdateSettings(dict.fromkeys(name for name, _ in dynamic_changes(cluster)))
    results: list[ClientResult] = []
    cluster.submit(leader.index, reset, client=client_id, on_done=results.append)
    cluster.submit(leader.index, KvPut(REPAIR_KEY, client_id), client=client_id, on_done=results.append)
    cluster.run_until(lambda: len(results) == 2, stabilisation_time(leader.settings))
    if len(results) != 2 or not all(isinstance(result, Committed) for result in results):
        cluster.violation(f"after the setting changes the master could not commit their reset and a write: {results}")
    left = dict(leader.running().applied_state.persistent_settings)
    if left:
        cluster.violation(f"the reset of every dynamic setting left {left}")
