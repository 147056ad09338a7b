"""The floor of a watch fan-out: a bare HTTP/1.1 server on uvloop that holds chunked responses open and, on a
`PUT /kv/{key}`, writes one pre-encoded NDJSON line, framed once as a chunk, to every held connection, then
answers the PUT. No replication, no state, no barrier, no grouping: only what any fan-out over HTTP costs
(parsing the watchers' requests once, and one `transport.write` per watcher per change), in Python.

`python -m bench watch-fanout` runs three of these side by side with our nodes and etcd: the writer PUTs to all three
at once, each serving a third of the watchers, as three nodes would.

    python bench/suites/fanout_floor.py --port PORT
"""

from __future__ import annotations

import asyncio

import click
import msgspec
import uvloop

_ENCODER = msgspec.json.Encoder()


class Server(asyncio.Protocol):
    watchers: set[asyncio.Transport] = set()  # one server per process, shared by its connections
    version = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]  # uvloop's TCPTransport
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:
            head, _, rest = self.buffer.partition(b"\r\n\r\n")
            method, path, _ = head.split(b"\r\n", 1)[0].split(b" ", 2)
            length = 0
            for header in head.split(b"\r\n")[1:]:
                name, _, value = header.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(rest) < length:
                return  # the rest of the body is still on its way
            body, self.buffer = rest[:length], rest[length:]
            if method == b"GET":
                self.watch()
            else:
                self.put(path.decode()[len("/kv/") :], body)

    def watch(self) -> None:
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n"
        progress = _ENCODER.encode({"type": "progress", "version": Server.version}) + b"\n"
        self.transport.write(head + b"%x\r\n%s\r\n" % (len(progress), progress))
        Server.watchers.add(self.transport)

    def put(self, key: str, value: bytes) -> None:
        Server.version += 1
        event = {"type": "put", "key": key, "value": msgspec.Raw(value or b"null"), "version": Server.version}
        line = _ENCODER.encode(event) + b"\n"
        frame = b"%x\r\n%s\r\n" % (len(line), line)
        for watcher in list(Server.watchers):
            if watcher.is_closing():
                Server.watchers.discard(watcher)
            else:
                watcher.write(frame)
        body = _ENCODER.encode({"version": Server.version})
        self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

    def connection_lost(self, exc: Exception | None) -> None:
        Server.watchers.discard(self.transport)


async def serve(port: int) -> None:
    server = await asyncio.get_running_loop().create_server(Server, "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()


@click.command()
@click.option("--port", type=int, required=True)
def main(port: int) -> None:
    uvloop.run(serve(port))


if __name__ == "__main__":
    main()
