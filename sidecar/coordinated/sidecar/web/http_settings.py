"""`http.max_content_length`: the client port's request body limit (`http_server`)."""

from __future__ import annotations

from coordinated.coordination.settings import size_setting

MAX_CONTENT_LENGTH = size_setting(
    "http.max_content_length",
    "1mb",
    minimum="1kb",
    maximum="512mb",
    doc="client request body limit (413 beyond it)",
)
