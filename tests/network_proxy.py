"""A TCP proxy in front of one node, for network faults a client must survive:

- it drops the first watch stream through it at a chosen point of its life (`arm`): before the request reaches
  the node, or after the node's answer has passed up to a given byte. Just before it drops the connection it
  calls `at_drop`, so that a test can write a change in the window between what the client has received and
  its resume. Every other connection passes untouched;
- or it cuts the client off (`cut_off`): every connection is closed, and every new one at once (a partition).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable

BEFORE_REQUEST = -1  # the cut point that drops the stream before its request reaches the node


class NetworkProxy:
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.cut: int | None = None  # bytes of the answer passed before the drop (BEFORE_REQUEST: none sent)
        self.at_drop: Callable[[], None] = lambda: None
        self.dropped = threading.Event()
        self.answered = bytearray()  # the answer of the last stream passed whole (to find the cut points)
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._cut_off = False
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self, cut: int | None, at_drop: Callable[[], None] = lambda: None) -> None:
        """The next watch stream is dropped at `cut` (None: passed whole, its answer kept in `answered`)."""
        with self._lock:
            self.cut, self.at_drop = cut, at_drop
            self.dropped.clear()
            self.answered.clear()

    def cut_off(self) -> None:
        """From now on nothing passes: open connections are closed, new ones closed as they come."""
        self._cut_off = True
        self._shut(*self._sockets)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.close()
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        if self._cut_off:
            self._shut(client)
            return
        upstream = socket.create_connection(self.upstream)
        self._sockets += [client, upstream]
        request = client.recv(65536)
        with self._lock:
            watch = b"/_cluster/metadata/_watch?" in request and not self.dropped.is_set()
            cut = self.cut if watch else None
            if watch and cut is not None:
                self.dropped.set()  # this one is the stream to drop: later ones pass
        if cut == BEFORE_REQUEST:
            self._drop(client, upstream)
            return
        upstream.sendall(request)
        threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
        passed = 0
        while True:
            if cut is not None and passed >= cut:
                self._drop(client, upstream)
                return
            data = self._recv(upstream)
            if not data:
                break
            if cut is not None and passed + len(data) > cut:
                data = data[: cut - passed]
            if watch and cut is None:
                self.answered += data
            if not self._send(client, data):
                break
            passed += len(data)
        self._shut(client, upstream)

    def _drop(self, client: socket.socket, upstream: socket.socket) -> None:
        self.at_drop()
        self._shut(client, upstream)

    def _pump(self, client: socket.socket, upstream: socket.socket) -> None:
        """The client's bytes (a later request on the same connection) to the node."""
        while data := self._recv(client):
            if not self._send(upstream, data):
                break

    @staticmethod
    def _recv(sock: socket.socket) -> bytes:
        try:
            return sock.recv(65536)
        except OSError:
            return b""

    @staticmethod
    def _send(sock: socket.socket, data: bytes) -> bool:
        try:
            sock.sendall(data)
        except OSError:
            return False
        return True

    @staticmethod
    def _shut(*sockets: socket.socket) -> None:
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()
