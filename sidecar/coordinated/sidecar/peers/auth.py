"""Transport authentication: HMAC-SHA256 keyed by the cluster secret.

One-shot requests (`POST /_transport/message`, `GET /_transport/watch`) carry a MAC over a timestamp and the
request body. The body is covered whole, so nothing in an authenticated message can be altered. The
timestamp bounds a signature's validity to `MAX_CLOCK_SKEW_S` either side of the receiver's clock; within
that window a POST is made unique by the random `request_nonce` of its envelope, which the receiver keeps
in a `ReplayCache` until the signature expires, so a replayed POST is refused instead of executed twice. A
replayed watch or stream upgrade gains nothing: a watch only waits, and a stream's frames are MACed under a
fresh nonce of the server (below).

Message streams (`GET /_transport/stream`, a WebSocket) are authenticated in two steps:

1. The upgrade request is signed like a one-shot request whose body is the fixed string `STREAM_HANDSHAKE`
   (a domain separator, so that no POST or watch signature opens a stream). A bad signature gets 401 and
   the connection is never upgraded.
2. The server then sends one binary frame: a fresh random nonce of `NONCE_BYTES` bytes. Every frame the
   client sends after it is `MAC || body`, where MAC is the 32-byte

       HMAC-SHA256(secret, FRAME_DOMAIN || nonce || counter as 8 bytes big-endian || body)

   and counter is 0 for the first frame of the stream, then 1, 2, ... The server checks each frame with its
   own counter, so a frame cannot be altered, injected, dropped from the middle, reordered or replayed
   within the stream, and (the nonce being fresh per connection) no frame of another stream, or a whole
   recorded stream, can be replayed either. A frame that fails the check closes the stream.

A stream is the peer protocol's one-way traffic: the server sends nothing back but the nonce and WebSocket
control frames, so only the client-to-server direction is authenticated. There is no encryption.
"""

from __future__ import annotations

import hashlib
import heapq
import hmac
import time
from collections.abc import Mapping
from pathlib import Path

SIGNATURE_HEADER = "X-Coordinated-Signature"
TIMESTAMP_HEADER = "X-Coordinated-Timestamp"
MAX_CLOCK_SKEW_S = 300
STREAM_HANDSHAKE = b"coordinated transport stream v1"
FRAME_DOMAIN = b"coordinated transport frame v1\n"
NONCE_BYTES = 16
MAC_BYTES = 32
REPLAY_CACHE_ENTRIES = 200_000  # ~660 signed POSTs a second sustained over the validity window


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
        problem = signed_at_or_problem(headers, now)
        if isinstance(problem, str):
            return problem
        if not hmac.compare_digest(headers[SIGNATURE_HEADER], "sha256=" + self._mac(headers[TIMESTAMP_HEADER], body)):
            return "bad signature"
        return None

    def sign_stream_handshake(self, now: float | None = None) -> dict[str, str]:
        return self.sign(STREAM_HANDSHAKE, now)

    def verify_stream_handshake(self, headers: Mapping[str, str], now: float | None = None) -> str | None:
        return self.verify(headers, STREAM_HANDSHAKE, now)

    def stream_mac(self, nonce: bytes) -> StreamMac:
        """The MACs of one stream's frames, in order; the sender and the receiver each hold one."""
        return StreamMac(self._secret, nonce)


class StreamMac:
    """Seals (sender) or opens (receiver) the frames of one stream; see the module docstring."""

    def __init__(self, secret: bytes, nonce: bytes) -> None:
        # Keyed once per stream; each frame then costs one copy of the keyed state plus hashing the body.
        self._keyed = hmac.new(secret, FRAME_DOMAIN + nonce, hashlib.sha256)
        self._counter = 0

    def _next_mac(self, body: bytes | memoryview) -> bytes:
        mac = self._keyed.copy()
        mac.update(self._counter.to_bytes(8, "big"))
        mac.update(body)
        self._counter += 1
        return mac.digest()

    def seal(self, body: bytes) -> bytes:
        return self._next_mac(body) + body

    def open(self, frame: bytes) -> memoryview | None:
        """The frame's body, or None if the frame is not the next authentic frame of this stream."""
        if len(frame) < MAC_BYTES:
            return None
        view = memoryview(frame)
        body = view[MAC_BYTES:]
        if not hmac.compare_digest(self._next_mac(body), view[:MAC_BYTES]):
            return None
        return body


def signed_at_or_problem(headers: Mapping[str, str], now: float | None = None) -> int | str:
    """The request's signing time if its signature headers are present and within the validity window,
    otherwise why not."""
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
    return sent_at


class ReplayCache:
    """The nonces of the signed requests seen while their signatures are valid; bounded in size.

    A nonce is kept until its request's signature expires (signing time + MAX_CLOCK_SKEW_S), after which a
    replay is refused by the timestamp check anyway. When full of unexpired nonces, new requests are refused
    rather than letting an old nonce be forgotten early (which would re-open it to replay).
    """

    def __init__(self, max_entries: int = REPLAY_CACHE_ENTRIES) -> None:
        self.max_entries = max_entries
        self._expiry: dict[str, int] = {}
        self._by_expiry: list[tuple[int, str]] = []

    def __len__(self) -> int:
        return len(self._expiry)

    def admit(self, nonce: str, signed_at: int, now: float | None = None) -> str | None:
        """None if the nonce is new (it is remembered), otherwise why the request is refused."""
        if not nonce:
            return "the request has no request_nonce: a signed POST must be unique"
        current = time.time() if now is None else now
        while self._by_expiry and self._by_expiry[0][0] < current:
            _, old = heapq.heappop(self._by_expiry)
            self._expiry.pop(old, None)
        if nonce in self._expiry:
            return "replayed request: this request_nonce was already used"
        if len(self._expiry) >= self.max_entries:
            return f"too many signed requests within {MAX_CLOCK_SKEW_S}s; retry later"
        expiry = signed_at + MAX_CLOCK_SKEW_S
        self._expiry[nonce] = expiry
        heapq.heappush(self._by_expiry, (expiry, nonce))
        return None
