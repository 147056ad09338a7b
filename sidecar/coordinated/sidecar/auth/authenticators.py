"""How a request's credentials become a principal: the realms of the client port, in order, as Elasticsearch's
realm chain.

A request that carries `Authorization: Bearer TOKEN` is authenticated by the first realm that knows the token:
the tokens file (`http.auth.tokens_file`), then every `Authenticator` the node was built with (a Kubernetes
ServiceAccount token verifier, say), in their order. A request without that header is authenticated by its
client certificate when the client port asks for one (`http.ssl.client_authentication`): the principal is the
certificate's subject. Anything else gets 401 with the reason.

An `Authenticator` is the one interface another realm implements:

    class MyRealm:
        realm = "kubernetes"

        async def authenticate(self, token: str) -> Principal | Refused | None:
            ...

- `Principal(name, realm, roles=())`: the token is valid and names this principal. A realm that is not the
  tokens file gives no roles of its own: the principal's roles come from role mappings only.
- `Refused(reason)`: the token is of this realm's kind but not valid (expired, not yet valid, for another
  audience, wrongly signed, ...): 401 with `reason`, which must never include the token itself.
- None: not a token of this realm (the next realm is asked).

It must not block the event loop (do network or CPU-heavy work off it), and it should answer within a few
seconds; a realm that cannot reach what it verifies against must keep accepting the tokens it has already
verified and that are still valid, so that a brief outage of that service locks no client out. `problems()`
says what is wrong with the realm now (health and readiness show it). A realm is built from the node's
settings by a factory registered in `REALM_FACTORIES` (None when its settings do not turn it on).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from coordinated.coordination.client import Principal
from coordinated.coordination.security import REALM_CERTIFICATE
from coordinated.coordination.settings import Settings
from coordinated.sidecar.auth import service_accounts
from coordinated.sidecar.auth.refusal import Refused as Refused  # what a realm answers for a token it refuses
from coordinated.sidecar.auth.tokens_file import Tokens

log = logging.getLogger("coordinated.access")


class Authenticator(Protocol):
    """A realm that verifies bearer tokens (see the module's docstring)."""

    @property
    def realm(self) -> str: ...

    async def authenticate(self, token: str) -> Principal | Refused | None: ...

    def problems(self) -> list[str]: ...

    async def close(self) -> None: ...


# The factories of the realms besides the tokens file: each builds its realm from the node's settings, or
# returns None when its settings leave it off. A realm is added with one line here.
RealmFactory = Callable[[Settings], Authenticator | None]
REALM_FACTORIES: list[RealmFactory] = [service_accounts.realm_from_settings]  # Kubernetes ServiceAccount tokens


def build_authenticators(
    settings: Settings, factories: Sequence[RealmFactory] = REALM_FACTORIES
) -> list[Authenticator]:
    return [realm for factory in factories if (realm := factory(settings)) is not None]


def certificate_subject(peercert: dict[str, Any] | None) -> str | None:
    """A verified client certificate's subject as RFC 4514 writes it (`CN=app,O=acme`: the most specific part
    first, as `openssl x509 -noout -subject -nameopt RFC2253` prints it); None without a certificate."""
    if not peercert:
        return None
    parts = []
    for rdn in reversed(peercert.get("subject", ())):
        parts.append("+".join(f"{_ATTRIBUTE_NAMES.get(key, key)}={_escaped(str(value))}" for key, value in rdn))
    return ",".join(parts) or None


_ATTRIBUTE_NAMES = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


def _escaped(value: str) -> str:
    escaped = "".join(f"\\{char}" if char in ',+"\\<>;=' else char for char in value)
    if escaped.startswith((" ", "#")):
        escaped = "\\" + escaped
    if escaped.endswith(" "):
        escaped = escaped[:-1] + "\\ "
    return escaped


class Authentication:
    """The client port's realms: the tokens file (if set), the other realms, and client certificates (when the
    port asks for them). Built only when at least one token realm is configured: without one, the client port
    authenticates nothing (the local demo's default)."""

    def __init__(self, tokens: Tokens | None, authenticators: Sequence[Authenticator] = ()) -> None:
        self.tokens = tokens
        self.authenticators = list(authenticators)

    async def authenticate_token(self, token: str) -> Principal | Refused | None:
        if self.tokens is not None:
            principal = self.tokens.principal_of(token)
            if principal is not None:
                return principal
        for realm in self.authenticators:
            try:
                found = await realm.authenticate(token)
            except Exception:  # a realm's defect refuses the token, never the node
                log.exception("realm [%s] failed to authenticate a token", realm.realm)
                return Refused(f"realm [{realm.realm}] failed to verify the token (the node's log has the error)")
            if found is not None:
                return found
        return None

    @staticmethod
    def certificate_principal(peercert: dict[str, Any] | None) -> Principal | None:
        subject = certificate_subject(peercert)
        return Principal(subject, REALM_CERTIFICATE) if subject is not None else None

    def problems(self) -> list[str]:
        """What keeps the tokens file from being used: then no token of it is valid."""
        if self.tokens is not None:
            self.tokens.check()
            if self.tokens.problem is not None:
                return [self.tokens.problem]
        return []

    def realm_problems(self) -> list[str]:
        """What is wrong with the other realms now (each still serves what it can)."""
        return [problem for realm in self.authenticators for problem in realm.problems()]

    def file_admins(self) -> list[str]:
        return self.tokens.admins() if self.tokens is not None else []

    async def close(self) -> None:
        for realm in self.authenticators:
            await realm.close()
