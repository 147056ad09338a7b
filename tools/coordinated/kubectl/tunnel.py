"""HTTP to a cluster's sidecars through the Kubernetes API server's port-forward, as `kubectl port-forward` does,
but without a local listener: each HTTP connection to `http://POD:9200` is one port-forward stream to that pod.

Why port-forward (and not the API server's pod proxy, or exec): the API server consumes the `Authorization`
header of a proxied request (it authenticates the kubectl user with it), so the sidecar's bearer token cannot
ride through the proxy; exec would need a shell command per call. A port-forward is a byte stream, so the
token reaches the sidecar untouched. It lands on the sidecar's loopback listener (127.0.0.1:9200 in the pod:
plain HTTP, the same tokens), and the bytes travel only inside the API server's TLS connection and the
kubelet's, never on the pod network, so no NetworkPolicy has to admit the user and no pod certificate has to
name the user's address.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

import httpcore
import httpx
from kubernetes import client as kube_client
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import portforward

SIDECAR_PORT = 9200


class PortForwardStream(httpcore.NetworkStream):
    """One port-forward stream, read and written as a socket (the library gives one end of a socket pair)."""

    def __init__(self, forward: Any, port: int) -> None:
        self.forward = forward
        self.socket: socket.socket = forward.socket(port)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        self.socket.settimeout(timeout)
        try:
            return self.socket.recv(max_bytes)
        except TimeoutError as error:
            raise httpcore.ReadTimeout(str(error)) from error
        except OSError as error:
            raise httpcore.ReadError(str(error)) from error

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.socket.settimeout(timeout)
        try:
            self.socket.sendall(buffer)
        except TimeoutError as error:
            raise httpcore.WriteTimeout(str(error)) from error
        except OSError as error:
            raise httpcore.WriteError(str(error)) from error

    def close(self) -> None:
        self.forward.close()

    def get_extra_info(self, info: str) -> Any:
        return None


class PortForwardBackend(httpcore.NetworkBackend):
    """Connects `http://POD:PORT` to PORT in the pod POD of one namespace, through the API server."""

    def __init__(self, api: kube_client.ApiClient, namespace: str) -> None:
        self.core = kube_client.CoreV1Api(api)
        self.namespace = namespace
        # The library's websocket calls swap the ApiClient's request method while they connect: one at a time.
        self._connecting = threading.Lock()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.NetworkStream:
        try:
            with self._connecting:
                forward = portforward(
                    self.core.connect_get_namespaced_pod_portforward,
                    host,
                    self.namespace,
                    ports=str(port),
                    _request_timeout=timeout,
                )
        except ApiException as error:
            reason = (error.reason or "").strip() or f"HTTP {error.status}"
            raise httpcore.ConnectError(f"port-forward to pod {host}: {reason}") from error
        except Exception as error:  # the websocket library's handshake and socket errors have no common base
            raise httpcore.ConnectError(f"port-forward to pod {host}: {error}") from error
        return PortForwardStream(forward, port)

    def sleep(self, seconds: float) -> None:
        threading.Event().wait(seconds)


def pod_address(pod: str) -> str:
    """The client's address of a pod's sidecar: the host is the pod's name, which the backend forwards to."""
    return f"http://{pod}:{SIDECAR_PORT}"


def http_client(api: kube_client.ApiClient, namespace: str) -> httpx.Client:
    """An httpx client whose connections are port-forwards to the pods named by the URLs' hosts."""
    transport = httpx.HTTPTransport()
    # httpx takes no network backend, but its transport is a thin wrapper over an httpcore pool, which does.
    transport._pool = httpcore.ConnectionPool(network_backend=PortForwardBackend(api, namespace))
    return httpx.Client(transport=transport)
