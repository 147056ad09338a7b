"""`hooks.*`: the timeout of a hook notification and the folder of hook sockets (`hooks`)."""

from __future__ import annotations

import os

from coordinated.coordination.settings import Parsed, Setting, time_setting

HOOKS_TIMEOUT = time_setting("hooks.timeout", "5s", minimum="1ms", maximum="5m", doc="timeout of one hook notification")


def parse_socket_dir(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError(f"[{value}] is not an absolute path")
    return os.path.normpath(value)


HOOKS_UNIX_SOCKET_DIR = Setting(
    "hooks.unix_socket_dir",
    Parsed(parse_socket_dir),
    "/run/coordinated/hooks",
    "the folder a hook's `unix_socket` must be in (a volume the application shares with the sidecar); symlinks "
    "are followed and must stay in it",
)
