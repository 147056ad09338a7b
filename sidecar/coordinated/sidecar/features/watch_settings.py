"""`watch.*`: the key changes kept for watches (`change_log`), and the buffer and progress lines of streaming
watches (`watch_streams`)."""

from __future__ import annotations

from coordinated.coordination.settings import int_setting, size_setting, time_setting

CHANGE_LOG_SIZE = int_setting(
    "watch.change_log.size",
    10_000,
    minimum=1,
    maximum=1_000_000,
    doc="key changes each node keeps for watches; a watch from before them gets 410",
)


# A streaming watch whose client leaves more than this unread ends (docs/applications.md, Watches).
STREAM_BUFFER_SIZE = size_setting(
    "watch.stream.buffer_size",
    "1mb",
    minimum="4kb",
    maximum="256mb",
    doc="unread bytes a streaming watch may leave in the node's buffer before the node ends it with a `closed` "
    "line (the kernel's socket buffer of a stream is set to half this)",
)
STREAM_PROGRESS_INTERVAL = time_setting(
    "watch.stream.progress_interval",
    "10s",
    minimum="100ms",
    maximum="1h",
    doc="how often an idle streaming watch gets a `progress` line",
)
