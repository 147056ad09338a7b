"""`transport.*`: the timeouts, retries, queue and frame size of the peer transport (`sender`, `receiver`)."""

from __future__ import annotations

from coordinated.coordination.settings import int_setting, size_setting, time_setting

TRANSPORT_REQUEST_TIMEOUT = time_setting(
    "transport.request_timeout", "10s", minimum="1ms", maximum="5m", doc="time to wait for a peer to open a stream"
)
TRANSPORT_CONNECT_TIMEOUT = time_setting(
    "transport.connect_timeout", "1s", minimum="1ms", maximum="5m", doc="TCP connect timeout to a peer"
)
TRANSPORT_RETRIES = int_setting(
    "transport.retries", 2, minimum=0, maximum=100, doc="retries when a message was certainly not delivered"
)
TRANSPORT_QUEUE_SIZE = int_setting(
    "transport.queue_size",
    10_000,
    minimum=1,
    maximum=10_000_000,
    doc="per-destination send queue; messages beyond it are dropped",
)
# A smaller frame costs more frames per large state, a larger one more memory per connection.
TRANSPORT_MAX_CHUNK_SIZE = size_setting(
    "transport.max_chunk_size",
    "1mb",
    minimum="4kb",
    maximum="64mb",
    doc="largest frame on a peer stream; a larger message, such as a multi-MB full state, goes in chunks that the "
    "receiver reassembles and verifies; set the same on every node (a node refuses frames over its own)",
)
