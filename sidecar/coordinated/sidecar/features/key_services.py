"""The key services: what the client API reads keys through. The applied state they serve, the change log and
the watch hubs it feeds (long-polling watches and streams), the range reads' listings, the shared read barrier,
and the waits for an applied version.

The node tells them of each applied state (`on_applied`); nothing else changes them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from coordinated.coordination.client import ClusterError, Committed, Principal
from coordinated.coordination.quotas import QuotaUsage
from coordinated.coordination.settings import Settings
from coordinated.coordination.state import ClusterState, Derivations
from coordinated.sidecar.features.change_log import ChangeLog
from coordinated.sidecar.features.listings import Listings
from coordinated.sidecar.features.watch_settings import CHANGE_LOG_SIZE, STREAM_BUFFER_SIZE, STREAM_PROGRESS_INTERVAL
from coordinated.sidecar.features.watch_streams import StreamHub, StreamQuotas
from coordinated.sidecar.features.watches import SharedBarrier, WatchHub


class KeyServices:
    def __init__(
        self,
        settings: Settings,
        derivations: Derivations,
        applied_state: ClusterState,
        chunk: Callable[[bytes], bytes],
        read_barrier: Callable[[], Awaitable[Committed | ClusterError]],
        stream_refusal: Callable[[Principal, tuple[str, ...]], str | None],
    ) -> None:
        """`applied_state`: the state served until the first one is applied; `chunk`: frames a stream's line;
        `read_barrier`: asks the master for a read barrier (shared by the reads that arrive while one is out);
        `stream_refusal`: why a principal may no longer watch its streams' prefixes, by the applied roles."""
        self.settings = settings
        self.stream_refusal = stream_refusal
        self.applied_state = applied_state
        self._applied_event = asyncio.Event()
        # Key watches (the client API's), parked here until an applied state changes their prefix.
        self.key_watches = WatchHub(ChangeLog(settings[CHANGE_LOG_SIZE], derivations))
        self.watch_streams = StreamHub(self.key_watches.log, settings[STREAM_BUFFER_SIZE], chunk)
        self.stream_quotas = StreamQuotas()  # this node's streams, for the quotas' max_watch_streams
        self.quota_usage = QuotaUsage(derivations)  # every quota's usage in the applied state
        # Range reads: the sorted keys of the applied state, and pinned listings.
        self.listings = Listings(derivations)
        self.shared_read_barrier = SharedBarrier(read_barrier)
        self._progress: asyncio.Task[None] | None = None

    @property
    def change_log(self) -> ChangeLog:
        return self.key_watches.log

    def start(self) -> None:
        self._applied_event = asyncio.Event()
        interval_s = self.settings[STREAM_PROGRESS_INTERVAL] / 1000
        self._progress = asyncio.get_running_loop().create_task(self._stream_progress(interval_s))

    def stop(self) -> None:
        if self._progress is not None:
            self._progress.cancel()
        self.close()

    def close(self) -> None:
        """Ends every streaming watch (with its last line) and answers every long-polling watch: the node is
        stopping. Idempotent."""
        self.watch_streams.close()
        self.key_watches.close()

    def on_applied(self, state: ClusterState) -> None:
        before = self.applied_state
        self.listings.on_applied(before, state)
        self.quota_usage.advance(before, state)
        self.applied_state = state
        if state.security is not before.security and self.watch_streams.streams:
            # Before this node acknowledges the change: no stream serves a principal by the old rules.
            self.watch_streams.refuse_streams(self.stream_refusal)
        # Wake every long-poll; each re-checks its own version.
        self._applied_event.set()
        self._applied_event = asyncio.Event()
        self.key_watches.on_applied(state)
        if state.master_node is None:
            self.watch_streams.lost_master()
        step = self.key_watches.log.newest
        if step is not None and self.watch_streams.streams:
            # Two turns of the event loop later: after the effects of this state (an apply's ack to the master, a
            # write's answer, whose handler resumes in the next turn) have gone out.
            loop = asyncio.get_running_loop()
            loop.call_soon(loop.call_soon, self.watch_streams.deliver, step)

    async def wait_for_version(self, version: int, timeout_s: float) -> bool:
        """True once this node has applied `version` or later, False on timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.applied_state.version < version:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self._applied_event.wait(), remaining)
            except TimeoutError:
                return False
        return True

    async def wait_for(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        """True once `predicate` holds (checked at each applied state), or whether it holds at the timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not predicate():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self._applied_event.wait(), remaining)
            except TimeoutError:
                return predicate()
        return True

    async def _stream_progress(self, interval_s: float) -> None:
        """Progress lines to the idle watch streams, one round every interval."""
        while True:
            await asyncio.sleep(interval_s)
            self.watch_streams.progress()
