"""Every setting a node takes: the protocol core's registry plus the sidecar's own.

Each sidecar setting is declared in a light `*_settings` module beside the code that reads it (see
`coordinated.coordination.settings` for how to add one), which imports nothing of the node's I/O: the operator
validates `spec.settings` and generates the CRD and docs/settings.md from these registries without importing
the sidecar itself. `MODULES` lists the modules the sidecar's registry collects them from, in the order
docs/settings.md lists them.
"""

from __future__ import annotations

from types import ModuleType

from coordinated.coordination.registry import coordination_registry
from coordinated.coordination.settings import SettingsRegistry
from coordinated.s3 import s3_settings
from coordinated.sidecar import event_loop_settings
from coordinated.sidecar.events import archive_settings, history_settings
from coordinated.sidecar.features import hooks_settings, snapshot_settings, watch_settings
from coordinated.sidecar.peers import auth_settings, tls_settings, transport_settings
from coordinated.sidecar.storage import persistence_settings
from coordinated.sidecar.web import access_settings, http_settings

MODULES: tuple[ModuleType, ...] = (
    auth_settings,
    transport_settings,
    http_settings,
    history_settings,
    hooks_settings,
    watch_settings,
    event_loop_settings,
    persistence_settings,
    snapshot_settings,
    s3_settings,  # the S3 clients
    archive_settings,
    tls_settings,
    access_settings,
)


def sidecar_only_registry() -> SettingsRegistry:
    """The settings of the sidecar service alone, without the core's."""
    return SettingsRegistry.collect(MODULES)


def sidecar_registry() -> SettingsRegistry:
    """Every setting a node takes: the core's and the sidecar's."""
    return coordination_registry().merged(sidecar_only_registry())
