"""Principals: the tokens file's `ROLE TOKEN [NAME]` lines, the realms a bearer token is tried in (the tokens file,
then every other realm, which a Kubernetes verifier plugs into), a client certificate's subject, and the access
middleware's answers: 401 with the reason, never the token; roles from mappings only for a realm other than the
tokens file."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from coordinated.coordination.authorization import Authorizer
from coordinated.coordination.client import Principal
from coordinated.coordination.security import KeyGrant, RoleDescriptor, RoleMapping, SecurityMetadata
from coordinated.sidecar.auth.authenticators import Authentication, Refused, certificate_subject
from coordinated.sidecar.auth.tokens_file import Tokens, TokensFileError, parse_tokens
from coordinated.sidecar.web.access import access_middleware
from coordinated.sidecar.web.app import ServedRoutes
from coordinated.sidecar.web.route_table import ENDPOINTS

T = "t" * 16


def principals(text: str) -> list[Principal]:
    return [principal for _, principal in parse_tokens(text, "tokens")]


def test_token_lines_name_their_principal_and_old_files_keep_working() -> None:
    assert principals(f"admin {T}1\nwriter {T}2\n") == [
        Principal("admin", "file", ("admin",)),
        Principal("writer", "file", ("writer",)),
    ]
    assert principals(f"none {T}1 app-a\napp-reader {T}2 dashboards\n# comment\n\nreader {T}3 app-a-2") == [
        Principal("app-a", "file", ()),
        Principal("dashboards", "file", ("app-reader",)),  # a custom role: grants nothing until it is defined
        Principal("app-a-2", "file", ("reader",)),
    ]
    # Two tokens of one principal (one being rotated in), with the same role.
    assert len(principals(f"writer {T}1 app\nwriter {T}2 app\n")) == 2


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (f"writer {T}1 app\nreader {T}2 app\n", "gives principal [app] role [reader], but an earlier line gave it"),
        (f"super*user {T}1\n", "invalid role name [super*user]"),
        (f"none {T}1 system:serviceaccount:ns:x\n", "names starting with [system:] are Kubernetes' own"),
        ("writer short\n", "shorter than 16 characters"),
        (f"writer {T} a b\n", "must be `ROLE TOKEN` or `ROLE TOKEN NAME`"),
        ("# nothing\n", "holds no tokens"),
    ],
)
def test_a_malformed_tokens_file_is_refused_naming_the_line(text: str, problem: str) -> None:
    with pytest.raises(TokensFileError, match=problem.replace("[", r"\[").replace("]", r"\]").replace("*", r"\*")):
        parse_tokens(text, "tokens")


def test_a_certificates_subject_is_written_as_rfc_4514() -> None:
    cert = {"subject": ((("countryName", "DE"),), (("organizationName", "Acme, Inc."),), (("commonName", "app"),))}
    assert certificate_subject(cert) == "CN=app,O=Acme\\, Inc.,C=DE"
    assert certificate_subject({}) is None and certificate_subject(None) is None


class FakeRealm:
    """A realm for tokens that start with `sa.`: `sa.NS.NAME` is valid, `sa.expired` is refused."""

    realm = "kubernetes"

    def __init__(self) -> None:
        self.calls = 0

    async def authenticate(self, token: str) -> Principal | Refused | None:
        self.calls += 1
        if not token.startswith("sa."):
            return None
        if token == "sa.expired":
            return Refused("the token expired at 2026-01-01T00:00:00Z")
        if token == "sa.boom":
            raise RuntimeError("a defect")
        _, namespace, name = token.split(".")
        return Principal(f"system:serviceaccount:{namespace}:{name}", self.realm)

    def problems(self) -> list[str]:
        return []

    async def close(self) -> None:
        pass


SECURITY = SecurityMetadata(
    roles={"team-a": RoleDescriptor((KeyGrant(("team/a/",), ("read",)),))},
    role_mappings={"team-a": RoleMapping(("team-a",), ("system:serviceaccount:team-a:*",))},
)


def test_the_realms_in_order_roles_from_mappings_only_and_401s_with_the_reason(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tokens_file = tmp_path / "tokens"
    tokens_file.write_text(f"admin {T}admin\nnone {T}none app\n")
    realm = FakeRealm()
    authentication = Authentication(Tokens(str(tokens_file)), [realm])
    served = ServedRoutes()
    authorizer = Authorizer()
    middleware = access_middleware(
        authentication,
        served.endpoint_of,
        served.privilege_of,
        lambda principal: authorizer.permissions(principal, SECURITY),
    )
    app = web.Application(middlewares=[middleware])
    routes = {"/_security/_authenticate", "/_cluster/health"}
    served.register(app.router, [endpoint for endpoint in ENDPOINTS if endpoint.route.path in routes])

    async def scenario() -> None:
        async with TestClient(TestServer(app)) as client:

            async def status_of(token: str, path: str = "/_cluster/health") -> tuple[int, dict[str, object]]:
                response = await client.get(path, headers={"Authorization": f"Bearer {token}"})
                return response.status, await response.json()

            # The tokens file first: its tokens never reach another realm.
            assert (await status_of(f"{T}admin", "/_security/_authenticate"))[1]["principal"] == "admin"
            assert realm.calls == 0
            status, body = await status_of("sa.team-a.web", "/_security/_authenticate")
            assert body == {
                "principal": "system:serviceaccount:team-a:web",
                "realm": "kubernetes",
                "roles": ["team-a"],
                "admin": False,
            }
            assert (await status_of("sa.team-a.web"))[0] == 403  # no monitor privilege from team-a
            status, body = await status_of("sa.expired")
            assert status == 401 and "the token expired at 2026-01-01T00:00:00Z" in str(body)
            status, body = await status_of("sa.boom")
            assert status == 401 and "failed to verify the token" in str(body)
            status, body = await status_of("no-such-token-0123456789")
            assert status == 401 and "unable to authenticate with the provided token" in str(body)

    with caplog.at_level(logging.DEBUG):
        asyncio.run(scenario())
    for token in (f"{T}admin", "sa.team-a.web", "sa.expired", "no-such-token-0123456789"):
        assert token not in caplog.text
