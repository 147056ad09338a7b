"""The peer transport's framing, which both ends share: its endpoints, the WebSocket subprotocols and frame limits,
what can be read of a frame that does not decode as a message, and the rate limit on the warnings about what
peers send.

One-way messages go over one persistent WebSocket stream per destination (`GET /_transport/stream`, see
`sender`), each message as one binary frame holding one encoded envelope, with a MAC in front when a cluster
secret is configured (see `auth`). On a stream of protocol v2 a message whose envelope is larger than
`transport.max_chunk_size` goes as chunk frames that the receiver reassembles and verifies before passing it on
(see `chunked`); the receiver refuses any frame larger than its own `max_chunk_size` (plus the chunk header and
MAC). A peer that only speaks v1 (an older version) is sent whole frames. The POST endpoint serves older
senders during a rolling upgrade, and the watch endpoint the connection watch (see `receiver`).
"""

from __future__ import annotations

import logging
import time
from typing import NamedTuple

import msgspec

log = logging.getLogger("coordinated.transport")

MESSAGE_PATH = "/_transport/message"
STREAM_PATH = "/_transport/stream"
WATCH_PATH = "/_transport/watch"
# WebSocket subprotocols: plain envelopes, or MAC || envelope (see auth). The server picks one. v2 adds chunk
# frames (see `chunked`); a v1 peer (an older version) gets every message as one frame.
PROTOCOL_PLAIN = "coordinated.v1"
PROTOCOL_HMAC = "coordinated.v1.hmac-sha256"
PROTOCOL_PLAIN_V2 = "coordinated.v2"
PROTOCOL_HMAC_V2 = "coordinated.v2.hmac-sha256"
HMAC_PROTOCOLS = (PROTOCOL_HMAC_V2, PROTOCOL_HMAC)
PLAIN_PROTOCOLS = (PROTOCOL_PLAIN_V2, PROTOCOL_PLAIN)
CHUNKED_PROTOCOLS = (PROTOCOL_HMAC_V2, PROTOCOL_PLAIN_V2)
DEFAULT_MAX_CHUNK_SIZE = 1024 * 1024  # transport.max_chunk_size
HEARTBEAT_S = 10.0  # a ping after this long without traffic; no pong within half of it closes the stream
CLOSE_TIMEOUT_S = 1.0  # how long a graceful close waits for the peer's close frame
WARNING_INTERVAL_S = 10.0


class RateLimitedWarnings:
    """At most one warning per key and interval; the others are logged at debug level."""

    def __init__(self, interval_s: float = WARNING_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._last: dict[str, float] = {}

    def warn(self, key: str, message: str, *args: object) -> None:
        now = time.monotonic()
        last = self._last.get(key)
        if last is None or now - last >= self.interval_s:
            self._last[key] = now
            log.warning(message, *args)
        else:
            log.debug(message, *args)


class Undecodable(NamedTuple):
    """What can be read of a frame that does not decode as a message: its sender, the message's type, and its
    request id if it has one (None when not even that can be read)."""

    sender: str
    kind: str
    request_id: int | None


def read_undecodable(payload: bytes | bytearray | memoryview) -> Undecodable | None:
    try:
        raw = msgspec.json.decode(payload)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    message = raw.get("message") if isinstance(raw, dict) else None
    sender = raw.get("sender") if isinstance(raw, dict) else None
    if not isinstance(message, dict) or not isinstance(sender, str) or not isinstance(message.get("type"), str):
        return None
    request_id = message.get("request_id")
    kind = str(message["type"])[:64]
    return Undecodable(sender[:300], kind, request_id if isinstance(request_id, int) and request_id >= 0 else None)
