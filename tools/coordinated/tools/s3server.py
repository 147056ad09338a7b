"""A local S3-compatible server for tests, benchmarks and the soak: Versity's S3 gateway (`versitygw`) serving a
folder over the S3 API on loopback, with SigV4 checks against one access key.

`scripts/install-tools.sh S3_SERVER` builds the binary (through the Go module proxy) and prints its path. The
server is started as a child process and stopped by its PID, within a bounded time; `stop()` then `start()` keeps
its port and its objects, so a test can take the store away and bring it back.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

START_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 5.0
REGION = "us-east-1"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class S3Server:
    """One versitygw process over `root` (each subfolder is a bucket), on `host:port`."""

    def __init__(self, binary: Path, root: Path, *, host: str = "127.0.0.1", port: int | None = None) -> None:
        self.binary = binary
        self.root = root
        self.host = host
        self.port = port or free_port(host)
        self.access_key = "test-" + secrets.token_hex(6)
        self.secret_key = secrets.token_urlsafe(24)
        self.process: subprocess.Popen[bytes] | None = None
        self.log = root.parent / f"{root.name}-s3server.log"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def endpoint(self) -> str:
        return f"http://{self.address}"

    def credentials_file(self, path: Path, *, secret_key: str | None = None) -> Path:
        """An AWS credentials file for this server's key (or a wrong secret, to provoke a 403)."""
        path.write_text(
            f"[default]\naws_access_key_id = {self.access_key}\n"
            f"aws_secret_access_key = {secret_key or self.secret_key}\n"
        )
        path.chmod(0o600)
        return path

    def environment(self) -> dict[str, str]:
        """The standard AWS variables for this server's key."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key}

    def create_bucket(self, name: str) -> None:
        """A bucket is a folder of the posix backend."""
        (self.root / name).mkdir(parents=True, exist_ok=True)

    def start(self) -> S3Server:
        if self.running:
            return self
        self.root.mkdir(parents=True, exist_ok=True)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "ROOT_ACCESS_KEY": self.access_key,
            "ROOT_SECRET_KEY": self.secret_key,
        }
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [str(self.binary), "--port", self.address, "--region", REGION, "--quiet", "posix", str(self.root)],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the S3 server exited with {self.process.returncode}: see {self.log}")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"the S3 server did not listen on {self.address} within {START_TIMEOUT_S}s: see {self.log}")

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        """SIGTERM, a bounded wait, then SIGKILL, by PID."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(STOP_TIMEOUT_S)

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
