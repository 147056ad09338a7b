"""The client port's HTTP server: bounds on what a connection may send and hold, and aiohttp's own errors in
Elasticsearch's error shape.

- A request line and each header line: at most `MAX_LINE_BYTES`; at most `MAX_HEADERS` headers.
- Headers and idle keep-alive connections: aiohttp's keep-alive timer runs from the moment a connection
  opens and again from the end of each response, and closes a connection that has not delivered a whole
  request head by then. So `IDLE_TIMEOUT_S` bounds both an idle connection and a request head sent slowly.
  A request being handled (a long poll, say) is not affected.
- A body: at most `http.max_content_length` bytes (the application's limit), read within `BODY_TIMEOUT_S`
  (the API's middleware); a body left unread after the answer is drained for at most `LINGER_S`.

A request aiohttp refuses before any handler runs (a malformed or oversized request line or header) gets
the usual `{"error": {"type", "reason"}, "status"}` JSON and one log line, not a plain-text page and a
traceback.
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import LineTooLong
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

log = logging.getLogger("coordinated.api")

MAX_LINE_BYTES = 8190
MAX_HEADERS = 100
IDLE_TIMEOUT_S = 60.0
BODY_TIMEOUT_S = 30.0
LINGER_S = 1.0  # after answering a request whose body was not read in full, how long to drain the rest


def error_body(error_type: str, reason: str, status: int) -> dict[str, Any]:
    return {"error": {"type": error_type, "reason": reason}, "status": status}


class _ClientRequestHandler(RequestHandler):
    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if request.writer.output_size > 0:
            raise ConnectionError("a response was already sent; cannot send an error response")
        reason = (message or (str(exc) if exc else "") or "bad request").strip()[:300]
        if status >= 500:
            log.error("error handling a request from %s", request.remote, exc_info=exc)
            error_type, reason = "internal_server_exception", "internal error"
        else:
            log.info("refused a malformed request from %s: %s", request.remote, reason.splitlines()[0])
            error_type = "too_long_http_line_exception" if isinstance(exc, LineTooLong) else "bad_request_exception"
        response = web.json_response(error_body(error_type, reason, status), status=status)
        response.force_close()
        return response


class _ClientServer(web.Server):
    def __call__(self) -> RequestHandler:
        return _ClientRequestHandler(self, loop=self._loop, **self._kwargs)


class ClientAppRunner(web.AppRunner):
    """An AppRunner for the client API with the limits above."""

    def __init__(self, app: web.Application) -> None:
        super().__init__(
            app,
            access_log=None,
            handle_signals=False,
            keepalive_timeout=IDLE_TIMEOUT_S,
            max_line_size=MAX_LINE_BYTES,
            max_field_size=MAX_LINE_BYTES,
            max_headers=MAX_HEADERS,
            lingering_time=LINGER_S,
        )

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        # The same server; only the class of its per-connection handlers differs (aiohttp has no option for
        # the handler class).
        server.__class__ = _ClientServer
        return server
