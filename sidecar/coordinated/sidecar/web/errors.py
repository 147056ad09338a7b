"""The client API's errors, in Elasticsearch's shape: `BadRequest` for input a handler refuses, and the
middleware that turns every failure (aiohttp's own 404, 405 and 413, a body not received in time, any
exception) into a JSON error, so that no request can take the node down."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from coordinated.coordination.client import ClusterError, error_body
from coordinated.sidecar.web.app_keys import NODE_KEY
from coordinated.sidecar.web.http_server import BODY_TIMEOUT_S
from coordinated.sidecar.web.http_settings import MAX_CONTENT_LENGTH

log = logging.getLogger("coordinated.api")


class BadRequest(Exception):
    def __init__(self, reason: str, error_type: str = "illegal_argument_exception", status: int = 400) -> None:
        super().__init__(reason)
        self.reason = reason
        self.error_type = error_type
        self.status = status


class FeatureNotAvailable(BadRequest):
    """A request that needs a feature not every node of the cluster has yet."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason, "feature_not_available_exception", 400)


class Forbidden(BadRequest):
    """A 403 `security_exception`: the principal lacks what the request needs (the reason names it)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason, "security_exception", 403)


def error_response(error_type: str, reason: str, status: int) -> web.Response:
    return web.json_response(error_body(error_type, reason, status), status=status)


def result_error(result: ClusterError) -> web.Response:
    return web.json_response(result.to_api(), status=result.status)


def master_not_discovered() -> web.Response:
    return error_response("master_not_discovered_exception", "no master has been discovered yet", 503)


@web.middleware
async def errors_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    try:
        if request.body_exists:
            # Read whole (and cached for the handler) within a bound, so a slow sender cannot hold a handler.
            try:
                if request.content.is_eof():
                    await request.read()  # all there already, as a small body usually is: nothing to bound
                else:
                    # asyncio.timeout rather than wait_for, which would make a task per request.
                    async with asyncio.timeout(BODY_TIMEOUT_S):
                        await request.read()
            except TimeoutError:
                raise BadRequest(
                    f"the request body was not received within {BODY_TIMEOUT_S:.0f}s", "request_timeout_exception", 408
                ) from None
        response = await handler(request)
    except BadRequest as error:
        response = error_response(error.error_type, error.reason, error.status)
    except web.HTTPRequestEntityTooLarge:
        limit = request.app[NODE_KEY].status().settings[MAX_CONTENT_LENGTH]
        reason = f"request body too large: the limit is {limit} bytes (setting http.max_content_length)"
        response = error_response("content_too_long_exception", reason, 413)
    except web.HTTPException as error:
        if error.status < 400:
            raise
        reason = f"no handler found for uri [{request.path}] and method [{request.method}]"
        if error.status not in (404, 405):
            reason = error.text or error.reason
        response = error_response(error.reason.lower().replace(" ", "_") + "_exception", reason, error.status)
    except UnicodeDecodeError as error:  # e.g. a string in a JSON body that is not UTF-8
        log.info("refused %s %s from %s: invalid UTF-8: %s", request.method, request.path, request.remote, error)
        response = error_response("parse_exception", f"invalid UTF-8: {error}", 400)
    except Exception as error:  # never let a request take the node down
        log.exception("error handling %s %s", request.method, request.path)
        response = error_response("internal_server_exception", f"{type(error).__name__}: {error}", 500)
    if response.status == 408:
        response.force_close()  # the rest of the body may still arrive: do not read it as a next request
    metrics = request.app[NODE_KEY].metrics
    metrics.count_request(response.status)
    if response.status == 409:  # only a conditional write answers 409
        metrics.version_conflicts.inc()
    return response
