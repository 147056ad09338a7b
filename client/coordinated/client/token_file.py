"""A bearer token kept in a file that changes under the client: a Kubernetes projected ServiceAccount token,
which the kubelet replaces before it expires, or a mounted Secret.

The file is read when the client is made (a missing, unreadable or empty file is a ValueError then) and again
whenever it changed: each request looks at it (a `stat`) at most once per `CHECK_INTERVAL_S`. The kubelet
renews a projected token once 80% of its lifetime has passed and swaps the file atomically, so the token a
request sends is never one the kubelet has replaced more than a second ago, and never half written. If the file
cannot be read for a moment, the token read last is sent (the cluster refuses it if it has expired).

`DEFAULT_TOKEN_FILE` is where an application pod mounts its token for the cluster (docs/operator.md,
"Applications in other namespaces"): a client made without a token or a token file uses it when it exists.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping

# The projected ServiceAccount token with the cluster's audience, in an application's pod. Not the pod's own API
# token (/var/run/secrets/kubernetes.io/serviceaccount/token): that one is for the Kubernetes API server, and
# sending it elsewhere would hand out a credential to that server.
DEFAULT_TOKEN_FILE = "/var/run/secrets/coordinated.dev/serviceaccount/token"
TOKEN_FILE_VARIABLE = "COORDINATED_TOKEN_FILE"
CHECK_INTERVAL_S = 1.0
MAX_TOKEN_BYTES = 64 * 1024


def _read(path: str) -> str:
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_TOKEN_BYTES + 1)
    except OSError as error:
        raise ValueError(f"cannot read the token file {path}: {error.strerror or error}") from None
    if len(data) > MAX_TOKEN_BYTES:
        raise ValueError(f"the token file {path} is larger than {MAX_TOKEN_BYTES} bytes: it holds no token")
    try:
        token = data.decode("ascii").strip()
    except UnicodeDecodeError:
        raise ValueError(f"the token file {path} holds no token (it is not text)") from None
    if not token or any(char.isspace() for char in token):
        raise ValueError(f"the token file {path} holds no token (empty, or more than one word)")
    return token


def _fingerprint(path: str) -> tuple[int, int, int] | None:
    try:
        stat = os.stat(path)  # follows the symlink the kubelet swaps
    except OSError:
        return None
    return (stat.st_ino, stat.st_mtime_ns, stat.st_size)


class TokenFile:
    """The token in `path`, following the file's changes (see the module). Safe to share between threads."""

    def __init__(self, path: str | os.PathLike[str], clock: Callable[[], float] = time.monotonic) -> None:
        self.path = os.fspath(path)
        self._clock = clock
        self._lock = threading.Lock()
        self._fingerprint = _fingerprint(self.path)
        self._token = _read(self.path)
        self._checked_at = clock()

    def current(self) -> str:
        now = self._clock()
        if now - self._checked_at < CHECK_INTERVAL_S:
            return self._token
        with self._lock:
            if now - self._checked_at >= CHECK_INTERVAL_S:
                self._checked_at = now
                fingerprint = _fingerprint(self.path)
                if fingerprint is not None and fingerprint != self._fingerprint:
                    try:
                        self._token = _read(self.path)
                        self._fingerprint = fingerprint
                    except ValueError:
                        pass  # caught between two writes: the next look reads it
            return self._token


def default_token_file() -> str | None:
    """DEFAULT_TOKEN_FILE when the pod has one, else None."""
    return DEFAULT_TOKEN_FILE if os.path.isfile(DEFAULT_TOKEN_FILE) else None


def environment_token_file(environ: Mapping[str, str] | None = None) -> str | None:
    """`COORDINATED_TOKEN_FILE`, as the client and the command line take it."""
    return (os.environ if environ is None else environ).get(TOKEN_FILE_VARIABLE) or None
