"""TLS contexts for both ports, built with the stdlib `ssl` module from PEM files and reloaded when the files
change, so that a renewed certificate is used without a restart.

A server keeps one listening `SSLContext` for its lifetime (asyncio binds it to the listener). Its
`sni_callback`, which OpenSSL runs on every ClientHello (with or without a server name), swaps the
connection onto the newest context, so each new connection is served with the certificate and CA that are
on disk now; connections already open keep theirs. The files are looked at (stat only) at most once per
`CHECK_INTERVAL_S`, and re-read only when one changed. A file set that does not load (a certificate replaced
but its key not yet, say) keeps the previous context and is tried again at the next check.

The transport is mutual TLS: both sides present a certificate and require the peer's to chain to the
cluster's CA (`certificate_authorities`). Peers are addressed by IP (resolved seeds, published addresses),
so the chain is verified but not the host name, as with Elasticsearch's `verification_mode: certificate`.
A certificate the transport accepts is a node of the cluster, with every power of one (it can publish states),
so when the CA also issues other certificates (client certificates for the client port, say), the transport's
`TrustRestrictions` (`transport.ssl.trust_restrictions`, like Elasticsearch's trust restrictions) say which of
its certificates are nodes': those with a name that matches one of the patterns.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from coordinated.sidecar.peers.tls_settings import Side, TlsFiles

log = logging.getLogger("coordinated.tls")

CHECK_INTERVAL_S = 1.0


def _fingerprint(paths: tuple[str, ...]) -> tuple[tuple[int, int, int], ...] | None:
    try:
        stats = [os.stat(path) for path in paths]  # follows symlinks: a Kubernetes Secret swaps a link
    except OSError:
        return None
    return tuple((stat.st_ino, stat.st_mtime_ns, stat.st_size) for stat in stats)


class ReloadingContext:
    """The newest context built from `files` for one side; see the module docstring."""

    def __init__(self, files: TlsFiles, side: Side, clock: Callable[[], float] = time.monotonic) -> None:
        self.files = files
        self.side = side
        self._clock = clock
        self._fingerprint = _fingerprint(files.paths())
        self._context = files.build(side)
        self._checked_at = clock()
        self._failed: tuple[tuple[int, int, int], ...] | None = None
        self.reloads = 0

    def current(self) -> ssl.SSLContext:
        now = self._clock()
        if now - self._checked_at >= CHECK_INTERVAL_S:
            self._checked_at = now
            self._reload_if_changed()
        return self._context

    def _reload_if_changed(self) -> None:
        fingerprint = _fingerprint(self.files.paths())
        if fingerprint is None or fingerprint == self._fingerprint:
            return
        try:
            context = self.files.build(self.side)
        except (ssl.SSLError, OSError) as error:
            if fingerprint != self._failed:  # one warning per file set, not one a second
                self._failed = fingerprint
                log.warning(
                    "the files of [%s.*] changed but do not load (%s); keeping the previous ones",
                    self.files.prefix,
                    error,
                )
            return
        self._context, self._fingerprint, self._failed = context, fingerprint, None
        self.reloads += 1
        log.info("reloaded the certificate of [%s.*] from %s", self.files.prefix, self.files.certificate)

    def listening_context(self) -> ssl.SSLContext:
        """The context for a server's listener: each handshake moves onto the newest context."""
        assert self.side is Side.SERVER
        listener = self.files.build(Side.SERVER)

        def use_newest(connection: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, _: ssl.SSLContext) -> None:
            newest = self.current()
            if connection.context is not newest:
                connection.context = newest

        listener.sni_callback = use_newest
        return listener


class TrustRestrictions:
    """Which certificates of the CA are nodes: those with a DNS name, IP address or common name that matches one
    of `patterns`. A pattern matches a name of as many dot-separated labels, label by label, where `*` matches
    any characters within one label (`*.demo-headless.ns.svc` matches `demo-0.demo-headless.ns.svc`)."""

    def __init__(self, patterns: Sequence[str]) -> None:
        self.patterns = tuple(pattern.strip().lower() for pattern in patterns if pattern.strip())

    def problem(self, peercert: Mapping[str, Any] | None) -> str | None:
        """Why the peer's certificate (as `SSLObject.getpeercert()` gives it) is not a node's; None if it is."""
        names = certificate_names(peercert or {})
        if any(_matches(pattern, name) for pattern in self.patterns for name in names):
            return None
        return (
            f"its certificate (names {names}) matches none of [transport.ssl.trust_restrictions] "
            f"{list(self.patterns)}: it is not a node certificate of this cluster"
        )


def certificate_names(peercert: Mapping[str, Any]) -> list[str]:
    names = [str(value) for kind, value in peercert.get("subjectAltName", ()) if kind in ("DNS", "IP Address")]
    names += [str(value) for rdn in peercert.get("subject", ()) for key, value in rdn if key == "commonName"]
    return names


def _matches(pattern: str, name: str) -> bool:
    wanted, labels = pattern.split("."), name.lower().split(".")
    return len(wanted) == len(labels) and all(
        fnmatch.fnmatchcase(label, want) for want, label in zip(wanted, labels, strict=True)
    )
