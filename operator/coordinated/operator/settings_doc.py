"""docs/settings.md, rendered from the settings registries (`python -m coordinated.operator.generate` writes it).

Names, defaults, bounds, meanings, which settings are required or dynamic, the rules between settings and the
Zen1 replacements come from the declarations (`coordinated.coordination.registry` for the protocol,
`coordinated.sidecar.node_settings` for the sidecar service); who may set a setting on Kubernetes comes from the
operator's validation.
"""

from __future__ import annotations

from collections.abc import Iterable

from coordinated.coordination.registry import coordination_registry
from coordinated.coordination.retired_settings import retired_setting_message
from coordinated.coordination.settings import Setting, SettingsError, SettingsRegistry
from coordinated.operator.settings_validation import USER_SETTINGS, operator_managed
from coordinated.sidecar.node_settings import sidecar_only_registry, sidecar_registry

# Zen1 names users are most likely to bring along; the registry rejects every discovery.zen.* name.
ZEN1_EXAMPLES = (
    "discovery.zen.minimum_master_nodes",
    "discovery.zen.ping.unicast.hosts",
    "discovery.zen.no_master_block",
    "discovery.zen.commit_timeout",
    "discovery.zen.publish_timeout",
    "discovery.zen.fd.ping_interval",
    "discovery.zen.fd.ping_timeout",
    "discovery.zen.fd.ping_retries",
)

INTRODUCTION = """\
A node takes its settings as strings: `-E key=value` on `coordinated node`, `spec.settings` of a
CoordinatedCluster (which the operator passes on to every node as `-E`), and, for the dynamic ones,
`PUT /_cluster/settings`. Times take a unit (`500ms`, `1s`, `2m`, `1h`, `1d`); sizes take `b`, `kb`,
`mb` or `gb`. Every value must lie within its setting's bounds, which keep it within what the timers and
the wire can carry. An unknown, invalid or Zen1 setting stops the node at startup (exit code 2), is refused
by `PUT /_cluster/settings`, and is rejected by the API server or, for bounds and rules between settings,
by the operator (the `ReconciliationComplete` condition and a `ScalingRefused` event).
Every message names the setting, for example `{example}`."""

DYNAMIC = """\
## Node settings and dynamic settings

Most settings are node settings: each node reads its own at startup, and a change takes a restart (on
Kubernetes, a change of `spec.settings` rolls the pods one at a time). The dynamic ones (marked "yes") can
also be set for the whole cluster with `PUT /_cluster/settings`:

```sh
curl -XPUT localhost:9200/_cluster/settings -H 'Content-Type: application/json' \\
     -d '{"persistent": {"cluster.no_master_block": "all"}}'
curl -XPUT localhost:9200/_cluster/settings -H 'Content-Type: application/json' \\
     -d '{"persistent": {"cluster.no_master_block": null}}'    # back to the node's own value
```

A committed value is kept in the cluster state, survives restarts and overrides every node's own (`-E`)
until it is reset with `null`. A `null` removes any persisted setting, also one that is not dynamic (any
more) or not known. A setting is dynamic only if every value within its bounds still lets the cluster
commit the write that resets it; a test sets each one to its minimum and its maximum on a 3-node cluster,
commits a write and resets it, and the simulator changes them at their bounds under faults.

`cluster.publish.timeout` and `cluster.follower_lag.timeout` are node settings, as in Elasticsearch: a
publication timeout shorter than a publication makes every master step down at its first one, and a lag
timeout shorter than an apply removes every follower, so a cluster-wide value could take the cluster down
in a way that the cluster itself can no longer undo. A value that an older version persisted for either
is ignored (the node's own applies), as is a persisted dynamic value beyond today's bounds; remove it with
`null`.

## When a persisted setting is wrong and there is no master

`coordinated node-tool remove-settings` removes persistent settings from a stopped node's copy of the
cluster state, without a master, as Elasticsearch's `elasticsearch-node remove-settings` does. Stop every
master-eligible node, run it on each of them (names may end in `*`), then start them again:

```sh
.venv/bin/coordinated node-tool remove-settings --data-dir /tmp/demo/node-1 cluster.no_master_block 'cluster.metadata.*'
```

It prints what it will remove and asks for confirmation (`--yes` skips the question), records a
`settings_removed` event in the node's history, and keeps the node's term, version and keys. A node that
did not run it may still hold the setting; if that node is elected, its copy wins, so run it on all of
them. On Kubernetes, run it in each pod's data volume with the StatefulSet scaled to 0 (docs/operator.md)."""


def all_settings() -> list[Setting[object]]:
    return list(sidecar_registry().settings.values())


def _on_kubernetes(name: str) -> str:
    if name in USER_SETTINGS:
        return "`spec.settings`"
    if operator_managed(name) is not None:
        return "set by the operator"
    return "not settable"


def _rows(settings: Iterable[Setting[object]]) -> list[str]:
    rows = ["| setting | default | bounds | dynamic | on Kubernetes | meaning |", "|---|---|---|---|---|---|"]
    for setting in settings:
        default = "required" if setting.required else (f"`{setting.default}`" if setting.default else "none")
        bounds = setting.value_type.bounds() or "-"
        dynamic = "yes" if setting.dynamic else "no"
        rows.append(
            f"| `{setting.name}` | {default} | {bounds} | {dynamic} | {_on_kubernetes(setting.name)} | {setting.doc} |"
        )
    return rows


def _rules(registry: SettingsRegistry) -> list[str]:
    return [f"Rule between settings: {rule.doc}." for rule in registry.rules]


def _example_rejection() -> str:
    try:
        coordination_registry().parse_one("cluster.publish.timeout", "30")
    except SettingsError as error:
        return str(error)
    raise AssertionError("cluster.publish.timeout accepted a time without a unit")


def render() -> str:
    core, sidecar = coordination_registry(), sidecar_only_registry()
    lines = [
        "# Settings",
        "",
        "<!-- Generated by `python -m coordinated.operator.generate` from the settings registries; do not edit. -->",
        "",
        INTRODUCTION.format(example=_example_rejection()),
        "",
        DYNAMIC,
        "",
        "## Coordination",
        "",
        *_rows(core.settings.values()),
        "",
        *_rules(core),
        "",
        "## Sidecar service",
        "",
        *_rows(sidecar.settings.values()),
        "",
        *_rules(sidecar),
        "",
        "## Zen1 settings",
        "",
        "Every `discovery.zen.*` setting is rejected with what replaced it:",
        "",
        *[f"- `{name}`: {retired_setting_message(name)}" for name in ZEN1_EXAMPLES],
        "",
    ]
    return "\n".join(lines)
