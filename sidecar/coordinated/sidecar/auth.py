"""Transport authentication: an HMAC-SHA256 over a timestamp and the request body, keyed by the cluster secret.

The timestamp bounds how long a captured request can be replayed; the body is covered whole, so nothing in
an authenticated message can be altered.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping
from pathlib import Path

SIGNATURE_HEADER = "X-Coordinated-Signature"
TIMESTAMP_HEADER = "X-Coordinated-Timestamp"
MAX_CLOCK_SKEW_S = 300


class TransportAuth:
    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    @classmethod
    def from_file(cls, path: str) -> TransportAuth:
        return cls(Path(path).read_bytes().strip())

    def _mac(self, timestamp: str, body: bytes) -> str:
        return hmac.new(self._secret, timestamp.encode() + b"\n" + body, hashlib.sha256).hexdigest()

    def sign(self, body: bytes, now: float | None = None) -> dict[str, str]:
        timestamp = str(int(time.time() if now is None else now))
        return {TIMESTAMP_HEADER: timestamp, SIGNATURE_HEADER: "sha256=" + self._mac(timestamp, body)}

    def verify(self, headers: Mapping[str, str], body: bytes, now: float | None = None) -> str | None:
        """None when the request is authentic, otherwise why it is not."""
        signature = headers.get(SIGNATURE_HEADER)
        timestamp = headers.get(TIMESTAMP_HEADER)
        if not signature or not timestamp:
            return f"missing {SIGNATURE_HEADER} or {TIMESTAMP_HEADER} header"
        try:
            sent_at = int(timestamp)
        except ValueError:
            return f"malformed {TIMESTAMP_HEADER} header"
        current = time.time() if now is None else now
        if abs(current - sent_at) > MAX_CLOCK_SKEW_S:
            return f"{TIMESTAMP_HEADER} is more than {MAX_CLOCK_SKEW_S}s away from this node's clock"
        if not hmac.compare_digest(signature, "sha256=" + self._mac(timestamp, body)):
            return "bad signature"
        return None
