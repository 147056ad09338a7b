"""The protocol core's settings registry: every setting its components declare (see `settings` for how to add
one). The order of the modules is the order of docs/settings.md."""

from __future__ import annotations

from types import ModuleType

from coordinated.coordination import (
    batch,
    client_requests,
    diff_history,
    elections,
    followers_checker,
    formation,
    leader_checker,
    peer_finder,
    publication,
    reconfigurator,
    settings,
    validation,
)
from coordinated.coordination.settings import Setting, Settings, SettingsRegistry

MODULES: tuple[ModuleType, ...] = (
    settings,  # the node's identity
    peer_finder,
    formation,
    elections,
    leader_checker,
    followers_checker,
    publication,
    diff_history,
    client_requests,
    reconfigurator,
    validation,
    batch,
)


def coordination_registry() -> SettingsRegistry:
    """A fresh registry of the core's settings (the sidecar's registry adds its own to these)."""
    return SettingsRegistry.collect(MODULES)


def default_settings(node_name: str = "node") -> Settings:
    """The core's settings at their defaults, for a node named `node_name`: for tests, tools and the simulator."""
    return coordination_registry().defaults({settings.NODE_NAME: node_name})


__all__ = ["MODULES", "Setting", "coordination_registry", "default_settings"]
