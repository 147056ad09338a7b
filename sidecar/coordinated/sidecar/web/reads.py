"""How a handler makes a read of this node's applied state linearizable: a read barrier through the master
(shared by the watches and range reads that arrive while one is in flight), then a wait until this node has
applied the barrier's version."""

from __future__ import annotations

import asyncio

from aiohttp import web

from coordinated.coordination.client import ClusterError, Committed
from coordinated.coordination.requests.keys import ReadBarrier
from coordinated.sidecar.node import Node
from coordinated.sidecar.web.errors import error_response, master_not_discovered, result_error


async def read_barrier(node: Node, timeout_ms: int) -> web.Response | None:
    """Wait until this node has applied the master's state as of now (confirmed with a quorum), so that a
    non-local read includes every write acknowledged before it began, whichever node serves it, as
    Elasticsearch's reads from the master do. None when done, otherwise the error to answer with."""
    deadline = asyncio.get_running_loop().time() + timeout_ms / 1000
    result = await node.call(ReadBarrier(), timeout_ms)
    return await _applied_in_time(node, result, deadline, "read")


async def _applied_in_time(
    node: Node, result: Committed | ClusterError, deadline: float, local_verb: str
) -> web.Response | None:
    """The barrier's answer names the master's committed version: wait until this node has applied it, until
    `deadline`. None when done, otherwise the error to answer with."""
    if isinstance(result, ClusterError):
        return result_error(result)
    if not await node.keys.wait_for_version(result.version, max(0.0, deadline - asyncio.get_running_loop().time())):
        reason = (
            f"this node has not applied version [{result.version}] of the master's state in time "
            f"(applied [{node.keys.applied_state.version}]); retry, or {local_verb} with ?local=true"
        )
        return error_response("process_cluster_event_timeout_exception", reason, 503)
    return None


async def shared_read_barrier(node: Node, timeout_ms: int) -> web.Response | None:
    """`read_barrier`, shared by every watch that arrives while one is in flight (see SharedBarrier)."""
    deadline = asyncio.get_running_loop().time() + timeout_ms / 1000
    try:
        result = await asyncio.wait_for(node.keys.shared_read_barrier(), timeout_ms / 1000)
    except TimeoutError:
        return error_response("process_cluster_event_timeout_exception", "could not reach the master in time", 503)
    return await _applied_in_time(node, result, deadline, "watch")


async def consistent_read(node: Node, local: bool, timeout_ms: int) -> web.Response | None:
    """Before a read of this node's applied state: with `local`, only the no-master block; otherwise a read
    barrier (shared with the reads that arrive with it), so that the state read holds every write acknowledged
    before the request. None when the read may go ahead, otherwise the error to answer with."""
    if local:
        core = node.status().core
        assert core is not None
        block = core.no_master_block
        return result_error(block.error()) if block.refuses_local_reads else None
    if node.keys.applied_state.master_node is None:
        return master_not_discovered()
    return await shared_read_barrier(node, timeout_ms)
