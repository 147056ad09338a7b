"""This installation's release and wire version: the release is the package's version (its one source is the
`version` of the project's pyproject.toml), the wire version this tree's (`coordination.wire_versions`)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from coordinated.coordination.wire_versions import CURRENT, NodeVersion

DISTRIBUTION = "coordinated-cluster"
UNKNOWN_RELEASE = "0+unknown"  # running from a checkout that was never installed


def installed_release() -> str:
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return UNKNOWN_RELEASE


def node_version() -> NodeVersion:
    """What this node reports of itself in its handshakes and joins."""
    return NodeVersion(installed_release(), CURRENT)


def describe() -> str:
    """`coordinated --version`."""
    return f"coordinated {installed_release()} (wire version {CURRENT})"
