"""Kubernetes ServiceAccount tokens as credentials of the client port: the realm `kubernetes`.

A pod proves who it is with the token the kubelet projects into it (a `serviceAccountToken` volume source with
this cluster's audience), sent as `Authorization: Bearer TOKEN`. The token is a JWT that the Kubernetes API
server signed; its principal is its subject, `system:serviceaccount:NAMESPACE:NAME`. The realm gives no roles
of its own: role mappings give them.

**Verified offline**, against the API server's published signing keys (its OIDC discovery: the issuer of
`/.well-known/openid-configuration` and the keys of `/openid/v1/jwks`), never by a call per token:

- the node never talks to the Kubernetes API, so an API server that is down, slow or unreachable locks out
  nobody: neither the clients already verified nor new ones (TokenReview would lock out every client whose
  token is not in its cache);
- no request of a client waits on another service, and the API server carries no load per client;
- each refusal has its exact reason (expired, not yet valid, another audience, another issuer, a wrong
  signature), which a TokenReview answer does not give in a stable form.

What it cannot see: a token stays valid until it expires even when its pod or ServiceAccount is deleted
(TokenReview would notice). Projected tokens live an hour by default (`expirationSeconds`, at least 10
minutes), which bounds that.

The keys come from a file (`http.auth.kubernetes.keys_file`): the JWKS as the API server publishes it, plus
the discovery document's `issuer` as a member of its own (a JWK Set may carry more members). On Kubernetes the
operator reads both from the API server and keeps the file in a ConfigMap that every pod mounts (elsewhere,
docs/sidecar.md shows the commands that make it).

The file is re-read when it changes (looked at at most once per `CHECK_INTERVAL_S`). A key removed from it
revokes the tokens it signed at once (a verified token is remembered only for the keys it was verified with). A
file that is missing, unreadable or does not parse keeps the keys last read (a missing file is no revocation),
and the realm's `problems()` says so (the node's health shows it); until a first file is read, every
ServiceAccount token is refused with that reason.

The signature, the algorithm, the audience, the issuer and the required claims are PyJWT's to check; the time
claims (`exp`, `nbf`, `iat`, with `LEEWAY_S` of clock skew) are checked here against the realm's clock, because
the cache of verified tokens must hold a token to the same rule at every later request.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import os
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from coordinated.coordination.client import Principal
from coordinated.coordination.security import REALM_KUBERNETES
from coordinated.coordination.settings import Settings
from coordinated.sidecar.auth.refusal import Refused
from coordinated.sidecar.auth.service_accounts_settings import AUDIENCE as AUDIENCE
from coordinated.sidecar.auth.service_accounts_settings import KEYS_FILE as KEYS_FILE

log = logging.getLogger("coordinated.access")

CHECK_INTERVAL_S = 1.0  # how often the keys file is looked at (a `stat`), at most
LEEWAY_S = 60  # clock skew allowed between this node and the API server, as Kubernetes allows its own
CACHE_SIZE = 10_000  # verified tokens remembered (least recently used first out)
MAX_KEYS_FILE_BYTES = 1 << 20
MAX_KEYS = 100
# What the API server signs with: RSA or ECDSA keys (--service-account-signing-key-file). Never a shared secret
# (HS*), nor `none`.
ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512"})
SUBJECT_PREFIX = "system:serviceaccount:"
# A namespace is a DNS label, a ServiceAccount's name a DNS subdomain (RFC 1123, as Kubernetes validates them).
_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
_NAMESPACE = re.compile(_LABEL)
_SERVICE_ACCOUNT = re.compile(rf"(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*")


class KeysFileError(ValueError):
    pass


@dataclass(frozen=True)
class SigningKeys:
    """The API server's issuer and its public keys, by key id (`None`: keys without one)."""

    issuer: str
    keys: Mapping[str | None, tuple[jwt.PyJWK, ...]]

    def candidates(self, kid: str | None) -> tuple[jwt.PyJWK, ...]:
        """The keys that may have signed a token with this key id: those of the id and those without one (a
        token without a key id: every key)."""
        if kid is None:
            return tuple(key for keys in self.keys.values() for key in keys)
        return (*self.keys.get(kid, ()), *self.keys.get(None, ()))


def parse_keys(text: str, path: str) -> SigningKeys:
    """The keys file's content, or KeysFileError naming what is wrong."""
    try:
        document = json.loads(text)
    except ValueError as error:
        raise KeysFileError(f"[{path}] is not JSON: {error}") from None
    if not isinstance(document, dict):
        raise KeysFileError(f"[{path}] must hold a JSON object (a JWK Set with an `issuer`)")
    issuer = document.get("issuer")
    if not isinstance(issuer, str) or not issuer:
        raise KeysFileError(f"[{path}] has no `issuer`: add the API server's (`.issuer` of its discovery document)")
    entries = document.get("keys")
    if not isinstance(entries, list) or not entries:
        raise KeysFileError(f"[{path}] has no `keys`: it must be the API server's JWKS (`/openid/v1/jwks`)")
    if len(entries) > MAX_KEYS:
        raise KeysFileError(f"[{path}] holds {len(entries)} keys, more than {MAX_KEYS}")
    keys: dict[str | None, list[jwt.PyJWK]] = {}
    for number, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise KeysFileError(f"key {number} of [{path}] is not a JSON object")
        if entry.get("use", "sig") != "sig":
            continue  # an encryption key: never one that signs tokens
        try:
            key = jwt.PyJWK(entry)
        except jwt.PyJWTError as error:
            raise KeysFileError(f"key {number} of [{path}] is not a usable public key: {error}") from None
        if key.algorithm_name not in ALGORITHMS:
            raise KeysFileError(
                f"key {number} of [{path}] is for [{key.algorithm_name}]: only RSA and ECDSA keys sign "
                "ServiceAccount tokens"
            )
        if isinstance(key.key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
            raise KeysFileError(f"key {number} of [{path}] is a private key: the file holds public keys only")
        kid = entry.get("kid")
        keys.setdefault(kid if isinstance(kid, str) else None, []).append(key)
    if not keys:
        raise KeysFileError(f"[{path}] holds no signing key")
    return SigningKeys(issuer, {kid: tuple(found) for kid, found in keys.items()})


def _fingerprint(path: str) -> tuple[int, int, int] | None:
    try:
        stat = os.stat(path)  # follows symlinks: a ConfigMap volume swaps a link
    except OSError:
        return None
    return (stat.st_ino, stat.st_mtime_ns, stat.st_size)


class KeysFile:
    """The signing keys of `path`, re-read when the file changes (a `stat` at most once per CHECK_INTERVAL_S).
    A file that cannot be used keeps the keys read before; `problem` says why it cannot."""

    def __init__(self, path: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self._clock = clock
        self.keys: SigningKeys | None = None
        self.generation = 0  # grows with every change of the keys
        self.problem: str | None = None
        self._fingerprint: tuple[int, int, int] | None = None
        self._checked_at = clock()
        self._reload(_fingerprint(path))

    def current(self) -> SigningKeys | None:
        now = self._clock()
        if now - self._checked_at >= CHECK_INTERVAL_S:
            self._checked_at = now
            fingerprint = _fingerprint(self.path)
            if fingerprint is None or fingerprint != self._fingerprint:
                self._reload(fingerprint)
        return self.keys

    def _reload(self, fingerprint: tuple[int, int, int] | None) -> None:
        self._fingerprint = fingerprint
        try:
            with open(self.path, "rb") as file:
                data = file.read(MAX_KEYS_FILE_BYTES + 1)
            if len(data) > MAX_KEYS_FILE_BYTES:
                raise KeysFileError(f"[{self.path}] is larger than {MAX_KEYS_FILE_BYTES} bytes")
            keys = parse_keys(data.decode("utf-8"), self.path)
        except (OSError, UnicodeDecodeError, KeysFileError) as error:
            kept = "the keys read before are kept" if self.keys is not None else "no ServiceAccount token is accepted"
            problem = f"[{KEYS_FILE.name}] is not usable ({error}): {kept} until it is"
            if problem != self.problem:
                log.warning("%s", problem)
            self.problem = problem
            return
        if keys != self.keys:
            self.keys = keys
            self.generation += 1
            count = sum(len(found) for found in keys.keys.values())
            log.info("read %d Kubernetes signing key(s) of issuer [%s] from %s", count, keys.issuer, self.path)
        if self.problem is not None:
            log.warning("[%s] is usable again: %s", KEYS_FILE.name, self.path)
        self.problem = None


@dataclass(frozen=True)
class _Verified:
    principal: Principal
    expires_at: float
    generation: int


def _shown(value: object, limit: int = 120) -> str:
    """A claim of a token that may not be genuine, safe to put in an answer and a log line."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = text.encode("unicode_escape").decode("ascii")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _instant(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _number(payload: Mapping[str, Any], claim: str) -> float | None:
    value = payload.get(claim)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise jwt.DecodeError(f"the [{claim}] claim must be a number")
    return float(value)


def _looks_like_a_jwt(token: str) -> bool:
    return token.count(".") == 2 and token.startswith("eyJ")


class ServiceAccountTokens:
    """The realm: `authenticate(token)` answers the token's principal, a refusal with the reason, or None for a
    token that is not a JWT at all (another realm's). Verified tokens are remembered (by their SHA-256, never
    the token) until they expire or the keys change, so that a client's requests after its first cost a hash."""

    realm = REALM_KUBERNETES

    def __init__(
        self,
        audience: str,
        keys: KeysFile,
        clock: Callable[[], float] = time.time,
        cache_size: int = CACHE_SIZE,
    ) -> None:
        self.audience = audience
        self.keys = keys
        self._clock = clock  # wall-clock seconds, as the tokens' claims are
        self._cache: OrderedDict[bytes, _Verified] = OrderedDict()
        self._cache_size = cache_size

    async def authenticate(self, token: str) -> Principal | Refused | None:
        return self.verify(token)

    def verify(self, token: str) -> Principal | Refused | None:
        if not _looks_like_a_jwt(token):
            return None
        keys = self.keys.current()
        digest = hashlib.sha256(token.encode()).digest()
        now = self._clock()
        cached = self._cache.get(digest)
        if cached is not None and cached.generation == self.keys.generation:
            if now < cached.expires_at + LEEWAY_S:
                self._cache.move_to_end(digest)
                return cached.principal
            del self._cache[digest]
            return Refused(self._expired(cached.expires_at, now))
        if keys is None:
            return Refused(f"this node cannot verify Kubernetes ServiceAccount tokens now: {self.keys.problem}")
        found = self._verified(token, keys, now)
        if isinstance(found, _Verified):
            self._remember(digest, found)
            return found.principal
        return found

    def _verified(self, token: str, keys: SigningKeys, now: float) -> _Verified | Refused:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as error:
            return Refused(f"not a well-formed ServiceAccount token: {error}")
        algorithm, kid = header.get("alg"), header.get("kid")
        if algorithm not in ALGORITHMS:
            return Refused(f"signed with [{_shown(algorithm)}]: ServiceAccount tokens are signed with RSA or ECDSA")
        if kid is not None and not isinstance(kid, str):
            return Refused("not a well-formed ServiceAccount token: its key id is not a string")
        candidates = [key for key in keys.candidates(kid) if key.algorithm_name == algorithm]
        if not candidates:
            return Refused(
                f"signed by key [{_shown(kid)}], which is not one of the signing keys of the Kubernetes API server "
                f"[{keys.issuer}] that this node knows"
            )
        payload: dict[str, Any] | None = None
        for key in candidates:
            try:
                payload = jwt.decode(
                    token,
                    key,
                    algorithms=[algorithm],
                    audience=self.audience,
                    issuer=keys.issuer,
                    options={
                        "require": ["exp", "iat", "iss", "aud", "sub"],
                        # Checked below, against this realm's clock (the cache holds tokens to the same rule).
                        "verify_exp": False,
                        "verify_nbf": False,
                        "verify_iat": False,
                    },
                )
                break
            except jwt.InvalidSignatureError:
                continue
            except jwt.MissingRequiredClaimError as error:
                return Refused(
                    f"has no [{error.claim}] claim: not a projected ServiceAccount token (use a `serviceAccountToken` "
                    f"volume with audience [{self.audience}], not a token Secret)"
                )
            except jwt.InvalidAudienceError:
                audiences = jwt.decode(token, options={"verify_signature": False}).get("aud")
                return Refused(
                    f"issued for the audience {_shown(audiences)}, not for this cluster's [{self.audience}]: project "
                    f"the token with `audience: {self.audience}`"
                )
            except jwt.InvalidIssuerError:
                issuer = jwt.decode(token, options={"verify_signature": False}).get("iss")
                return Refused(
                    f"issued by [{_shown(issuer)}], not by this cluster's Kubernetes API server [{keys.issuer}]"
                )
            except jwt.PyJWTError as error:
                return Refused(f"not a valid ServiceAccount token: {error}")
        if payload is None:
            return Refused(f"its signature is wrong: not signed by key [{_shown(kid)}] of the Kubernetes API server")
        try:
            expires_at, not_before, issued_at = (_number(payload, claim) for claim in ("exp", "nbf", "iat"))
        except jwt.DecodeError as error:
            return Refused(f"not a valid ServiceAccount token: {error}")
        assert expires_at is not None and issued_at is not None  # required above
        if now >= expires_at + LEEWAY_S:
            return Refused(self._expired(expires_at, now))
        starts = max(not_before or issued_at, issued_at)
        if now + LEEWAY_S < starts:
            return Refused(f"not valid yet: not before {_instant(starts)} (this node's clock says {_instant(now)})")
        subject = payload["sub"]
        problem = _subject_problem(subject, payload.get("kubernetes.io"))
        if problem is not None:
            return Refused(problem)
        return _Verified(Principal(subject, REALM_KUBERNETES), expires_at, self.keys.generation)

    @staticmethod
    def _expired(expires_at: float, now: float) -> str:
        return f"expired at {_instant(expires_at)} (this node's clock says {_instant(now)})"

    def _remember(self, digest: bytes, verified: _Verified) -> None:
        self._cache[digest] = verified
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    def problems(self) -> list[str]:
        self.keys.current()
        return [] if self.keys.problem is None else [self.keys.problem]

    async def close(self) -> None:
        self._cache.clear()


def _subject_problem(subject: object, claims: object) -> str | None:
    """None when `subject` names a ServiceAccount, `system:serviceaccount:NS:NAME`, agreeing with the token's
    `kubernetes.io` claim (when it has one)."""
    if not isinstance(subject, str) or not subject.startswith(SUBJECT_PREFIX):
        return f"its subject [{_shown(subject)}] is not a ServiceAccount's (system:serviceaccount:NAMESPACE:NAME)"
    namespace, _, name = subject[len(SUBJECT_PREFIX) :].partition(":")
    if not _NAMESPACE.fullmatch(namespace) or not _SERVICE_ACCOUNT.fullmatch(name):
        return f"its subject [{_shown(subject)}] is not a ServiceAccount's (system:serviceaccount:NAMESPACE:NAME)"
    if isinstance(claims, dict):
        account = claims.get("serviceaccount")
        claimed = (claims.get("namespace"), account.get("name") if isinstance(account, dict) else None)
        if claimed != (namespace, name):
            return f"its subject [{_shown(subject)}] and its kubernetes.io claim name different ServiceAccounts"
    return None


def realm_from_settings(settings: Settings) -> ServiceAccountTokens | None:
    """The realm when `http.auth.kubernetes.*` turn it on, else None."""
    audience, path = settings[AUDIENCE], settings[KEYS_FILE]
    if audience is None or path is None:
        return None
    return ServiceAccountTokens(audience, KeysFile(path))
