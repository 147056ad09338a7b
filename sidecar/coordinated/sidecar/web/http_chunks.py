"""The HTTP/1.1 chunked framing of a streaming watch's held response: the node's StreamHub frames each group's
lines once with it and writes the same bytes to every stream of the group."""

from __future__ import annotations


def chunk(payload: bytes) -> bytes:
    """`payload` as one HTTP/1.1 chunk of a chunked response body."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)
