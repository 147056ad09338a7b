"""The Kubernetes ServiceAccount realm (sidecar/auth/service_accounts.py) on tokens shaped as the API server
issues them (signed here with keys of our own, so every claim and every clock can be chosen): who a valid token
names, the reason of every refusal, the cache, and the keys file's changes, losses and damage. The same realm
against a real kube-apiserver's tokens is in tests/operator/test_access_apiserver.py."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from coordinated.coordination.client import Principal
from coordinated.coordination.security import REALM_KUBERNETES
from coordinated.coordination.settings import SettingsError
from coordinated.sidecar.auth import service_accounts
from coordinated.sidecar.auth.authenticators import Refused, build_authenticators
from coordinated.sidecar.auth.service_accounts import (
    CHECK_INTERVAL_S,
    KeysFile,
    ServiceAccountTokens,
)
from coordinated.sidecar.node_settings import sidecar_registry

ISSUER = "https://kubernetes.default.svc.cluster.local"
AUDIENCE = "coordinated.dev/shop/orders"
NOW = 1_800_000_000.0
SUBJECT = "system:serviceaccount:team-a:app"
LEEWAY_S = 60  # the clock skew allowed, as Kubernetes allows its own


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def public_jwk(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey, kid: str) -> dict[str, Any]:
    algorithm = jwt.algorithms.RSAAlgorithm if isinstance(key, rsa.RSAPrivateKey) else jwt.algorithms.ECAlgorithm
    jwk: dict[str, Any] = json.loads(algorithm.to_jwk(key.public_key()))
    return {**jwk, "kid": kid, "use": "sig", "alg": "RS256" if isinstance(key, rsa.RSAPrivateKey) else "ES256"}


RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
OTHER_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())


def claims(
    subject: str = SUBJECT, audience: str | list[str] = AUDIENCE, issued: float = NOW, lifetime: float = 3600
) -> dict[str, Any]:
    """A projected token's claims, as the API server writes them (TokenRequest with a pod binding)."""
    namespace, name = subject.split(":")[2:4]
    return {
        "aud": [audience] if isinstance(audience, str) else audience,
        "exp": int(issued + lifetime),
        "iat": int(issued),
        "nbf": int(issued),
        "iss": ISSUER,
        "jti": "5b1f3c1e-0000-4000-8000-000000000000",
        "sub": subject,
        "kubernetes.io": {
            "namespace": namespace,
            "serviceaccount": {"name": name, "uid": "a1b2"},
            "pod": {"name": "app-0", "uid": "c3d4"},
        },
    }


def token(
    payload: dict[str, Any] | None = None,
    key: Any = RSA_KEY,
    kid: str = "k1",
    algorithm: str = "RS256",
) -> str:
    return jwt.encode(claims() if payload is None else payload, key, algorithm=algorithm, headers={"kid": kid})


def write_keys(path: Path, *jwks: dict[str, Any], issuer: str | None = ISSUER) -> None:
    document: dict[str, Any] = {"keys": list(jwks)}
    if issuer is not None:
        document["issuer"] = issuer
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(document))
    temporary.replace(path)  # as the kubelet swaps a ConfigMap volume's files


@pytest.fixture
def keys_path(tmp_path: Path) -> Path:
    path = tmp_path / "keys.json"
    write_keys(path, public_jwk(RSA_KEY, "k1"), public_jwk(EC_KEY, "k2"))
    return path


MakeRealm = Callable[..., tuple[ServiceAccountTokens, Clock, Clock]]


@pytest.fixture
def make_realm(keys_path: Path) -> MakeRealm:
    """A realm on `keys_path`, with its wall clock (the tokens') and its monotonic clock (the keys file's)."""

    def make(path: Path = keys_path, now: float = NOW) -> tuple[ServiceAccountTokens, Clock, Clock]:
        wall, monotonic = Clock(now), Clock(0.0)
        return ServiceAccountTokens(AUDIENCE, KeysFile(str(path), clock=monotonic), clock=wall), wall, monotonic

    return make


def refused(found: object) -> str:
    assert isinstance(found, Refused), found
    return found.reason


def test_a_projected_token_names_its_service_account(make_realm: MakeRealm) -> None:
    realm, _, _ = make_realm()
    assert realm.verify(token()) == Principal(SUBJECT, REALM_KUBERNETES)
    # An ECDSA key signs too (--service-account-signing-key-file may be either).
    assert realm.verify(token(key=EC_KEY, kid="k2", algorithm="ES256")) == Principal(SUBJECT, REALM_KUBERNETES)
    # Several audiences, ours among them.
    assert realm.verify(token(claims(audience=["vault", AUDIENCE]))) == Principal(SUBJECT, REALM_KUBERNETES)


def test_time_claims_have_a_minute_of_leeway_and_no_more(make_realm: MakeRealm) -> None:
    realm, wall, _ = make_realm()
    expiring = token(claims(lifetime=600))
    wall.now = NOW + 600 + LEEWAY_S - 1
    assert realm.verify(expiring) == Principal(SUBJECT, REALM_KUBERNETES)
    wall.now = NOW + 600 + LEEWAY_S
    reason = refused(realm.verify(expiring))
    assert reason.startswith("expired at 2027-01-15T08:10:00Z (this node's clock says"), reason
    # Issued a little ahead of this node's clock: accepted; further ahead: not yet valid.
    realm, wall, _ = make_realm(now=NOW - LEEWAY_S + 1)
    assert realm.verify(token()) == Principal(SUBJECT, REALM_KUBERNETES)
    realm, wall, _ = make_realm(now=NOW - LEEWAY_S - 1)
    assert refused(realm.verify(token())).startswith("not valid yet: not before 2027-01-15T08:00:00Z")


@pytest.mark.parametrize(
    ("make_token", "reason"),
    [
        (lambda: token(claims(audience="https://kubernetes.default.svc.cluster.local")), "issued for the audience"),
        (lambda: token(claims(audience=["vault", "consul"])), "not for this cluster's [coordinated.dev/shop/orders]"),
        (lambda: token(key=OTHER_KEY), "its signature is wrong: not signed by key [k1]"),
        (lambda: token(kid="rotated-away"), "signed by key [rotated-away], which is not one of the signing keys"),
        (lambda: token({**claims(), "iss": "https://evil.example"}), "issued by [https://evil.example], not by"),
        # A legacy token of a token Secret: no expiry, no audience.
        (
            lambda: token({k: v for k, v in claims().items() if k not in ("exp", "aud")}),
            "not a projected ServiceAccount token",
        ),
        (lambda: token(key=b"a shared secret of 32 bytes!!!!!", algorithm="HS256"), "signed with [HS256]"),
        (lambda: jwt.encode(claims(), key=None, algorithm="none"), "signed with [none]"),
        (lambda: token({**claims(), "sub": "admin"}), "its subject [admin] is not a ServiceAccount's"),
        (lambda: token(claims(subject="system:serviceaccount:Team_A:app")), "is not a ServiceAccount's"),
        (
            lambda: token({**claims(), "kubernetes.io": {"namespace": "team-b", "serviceaccount": {"name": "app"}}}),
            "name different ServiceAccounts",
        ),
        (lambda: token({**claims(), "exp": "tomorrow"}), "the [exp] claim must be a number"),
        (lambda: "eyJhbGciOiJSUzI1NiJ9.not-base64!.x", "not a well-formed ServiceAccount token"),
    ],
)
def test_each_refusal_says_why_and_never_shows_the_token(
    make_realm: MakeRealm, make_token: Callable[[], str], reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    realm, _, _ = make_realm()
    presented = make_token()
    with caplog.at_level(logging.DEBUG, logger="coordinated"):
        said = refused(realm.verify(presented))
    assert reason in said, said
    for part in presented.split("."):
        if len(part) > 8:
            assert part not in said and part not in caplog.text


def test_a_token_that_is_no_jwt_is_left_to_the_other_realms(make_realm: MakeRealm) -> None:
    realm, _, _ = make_realm()
    assert realm.verify("an-opaque-token-of-the-tokens-file") is None
    assert realm.verify("a.b.c") is None


def test_verified_tokens_are_remembered_until_they_expire(
    make_realm: MakeRealm, monkeypatch: pytest.MonkeyPatch
) -> None:
    realm, wall, _ = make_realm()
    presented = token(claims(lifetime=600))
    assert realm.verify(presented) == Principal(SUBJECT, REALM_KUBERNETES)
    decoded: list[str] = []
    real_decode = jwt.decode
    monkeypatch.setattr(jwt, "decode", lambda *a, **k: decoded.append("decode") or real_decode(*a, **k))
    assert realm.verify(presented) == Principal(SUBJECT, REALM_KUBERNETES)
    assert decoded == []  # the second time costs a hash, not a signature check
    wall.now = NOW + 600 + LEEWAY_S
    assert refused(realm.verify(presented)).startswith("expired at")


def test_the_cache_is_bounded(make_realm: MakeRealm, keys_path: Path) -> None:
    realm = ServiceAccountTokens(AUDIENCE, KeysFile(str(keys_path)), clock=Clock(NOW), cache_size=2)
    tokens = [token(claims(subject=f"system:serviceaccount:team-a:app-{n}")) for n in range(3)]
    for presented in tokens:
        assert isinstance(realm.verify(presented), Principal)
    assert len(realm._cache) == 2


def test_keys_follow_the_file_and_a_lost_file_keeps_them(make_realm: MakeRealm, keys_path: Path) -> None:
    realm, _, monotonic = make_realm()
    signed_by_k1, signed_by_k3 = token(), token(key=OTHER_KEY, kid="k3")
    assert isinstance(realm.verify(signed_by_k1), Principal)
    assert "not one of the signing keys" in refused(realm.verify(signed_by_k3))

    # The API server's keys rotate: k3 is added (the operator rewrites the file); the file is looked at again
    # once CHECK_INTERVAL_S has passed.
    write_keys(keys_path, public_jwk(RSA_KEY, "k1"), public_jwk(OTHER_KEY, "k3"))
    monotonic.now += CHECK_INTERVAL_S
    assert isinstance(realm.verify(signed_by_k3), Principal)

    # The file vanishes (a volume remounted, an operator deleting the ConfigMap): the keys stay, and health says so.
    os.unlink(keys_path)
    monotonic.now += CHECK_INTERVAL_S
    assert isinstance(realm.verify(signed_by_k1), Principal)
    assert isinstance(realm.verify(token(claims(subject="system:serviceaccount:team-a:new"))), Principal)
    [problem] = realm.problems()
    assert "[http.auth.kubernetes.keys_file] is not usable" in problem and "keys read before are kept" in problem

    # A damaged file: the same.
    keys_path.write_text("{not json")
    monotonic.now += CHECK_INTERVAL_S
    assert isinstance(realm.verify(signed_by_k1), Principal)
    assert "is not JSON" in realm.problems()[0]

    # k1 retired from the file: the tokens it signed are refused at once, cached or not.
    write_keys(keys_path, public_jwk(OTHER_KEY, "k3"))
    monotonic.now += CHECK_INTERVAL_S
    assert "not one of the signing keys" in refused(realm.verify(signed_by_k1))
    assert realm.problems() == []


def test_without_a_keys_file_every_service_account_token_is_refused_with_the_reason(
    make_realm: MakeRealm, tmp_path: Path
) -> None:
    missing = tmp_path / "not-yet" / "keys.json"
    realm, _, monotonic = make_realm(path=missing)
    reason = refused(realm.verify(token()))
    assert reason.startswith("this node cannot verify Kubernetes ServiceAccount tokens now: [http.auth.kubernetes")
    assert "no ServiceAccount token is accepted" in realm.problems()[0]
    missing.parent.mkdir()
    write_keys(missing, public_jwk(RSA_KEY, "k1"))
    monotonic.now += CHECK_INTERVAL_S
    assert isinstance(realm.verify(token()), Principal)


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ({"keys": [public_jwk(RSA_KEY, "k1")]}, "has no `issuer`"),
        ({"issuer": ISSUER, "keys": []}, "has no `keys`"),
        ({"issuer": ISSUER, "keys": [json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(RSA_KEY))]}, "is a private key"),
        ({"issuer": ISSUER, "keys": [{"kty": "oct", "k": "c2VjcmV0", "kid": "s"}]}, "only RSA and ECDSA keys"),
        ({"issuer": ISSUER, "keys": [{"kty": "RSA", "kid": "k"}]}, "is not a usable public key"),
        ({"issuer": ISSUER, "keys": [{**public_jwk(RSA_KEY, "k1"), "use": "enc"}]}, "holds no signing key"),
    ],
)
def test_a_keys_file_that_cannot_be_used_is_named_with_its_problem(
    tmp_path: Path, document: dict[str, Any], problem: str
) -> None:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps(document))
    keys = KeysFile(str(path))
    assert keys.keys is None and keys.problem is not None and problem in keys.problem, keys.problem


def test_the_settings_turn_the_realm_on_together(tmp_path: Path) -> None:
    registry = sidecar_registry()
    base = {"node.name": "n"}
    assert build_authenticators(registry.parse(base)) == []
    settings = registry.parse(
        {**base, service_accounts.AUDIENCE.name: AUDIENCE, service_accounts.KEYS_FILE.name: str(tmp_path / "k")}
    )
    [realm] = build_authenticators(settings)
    assert isinstance(realm, ServiceAccountTokens) and realm.audience == AUDIENCE
    with pytest.raises(SettingsError, match="go together"):
        registry.parse({**base, service_accounts.AUDIENCE.name: AUDIENCE})
    with pytest.raises(SettingsError, match="printable characters without spaces"):
        registry.parse({**base, service_accounts.AUDIENCE.name: "two words", service_accounts.KEYS_FILE.name: "k"})
