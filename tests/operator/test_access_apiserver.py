"""ServiceAccount identities against a real kube-apiserver (the one test_operator_apiserver.py starts, with its
own service-account signing key) issuing real tokens (TokenRequest, as the kubelet asks for a projected token):

- the CRD's checks of spec.access;
- the operator reads the API server's issuer and signing keys with the chart's two discovery rules alone, keeps
  them in NAME-service-account-keys, and says why when it cannot;
- a real sidecar node verifies those tokens: the principal `system:serviceaccount:NS:NAME` of a projected token
  with the cluster's audience, a 401 with the reason for one that expired, is not valid yet, is for another
  audience (the pod's own API token among them) or is wrongly signed; the token never in the node's log;
- spec.access applied to that node by the operator's step: two ServiceAccounts of two namespaces, each with its
  own prefix, neither reading the other's; a quota; what changes and what is refused, in the step's report;
- the client and the command line with `--token-file`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import jwt
import pytest
import yaml
from click.testing import CliRunner
from cryptography.hazmat.primitives.asymmetric import rsa
from operator_schemas import REPO
from test_operator_apiserver import KUBECTL, cluster, kubeconfig, kubectl

from coordinated.cli import cli
from coordinated.client import AuthenticationError, Client, QuotaExceeded
from coordinated.coordination.client import Principal
from coordinated.coordination.security import REALM_KUBERNETES
from coordinated.operator.access_spec import AccessSpec
from coordinated.operator.reconcile import access as access_step
from coordinated.operator.reconcile import service_account_keys
from coordinated.operator.reconcile.context import Context
from coordinated.operator.sidecar_client import SidecarAccess, SidecarClient, SidecarConnections
from coordinated.operator.spec import ClusterSpec
from coordinated.sidecar.auth.authenticators import Refused
from coordinated.sidecar.auth.service_accounts import KeysFile, ServiceAccountTokens
from coordinated.tools.localcluster import LocalCluster, LocalNode, http

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore:Unverified HTTPS request")]

__all__ = ["kubeconfig"]  # the module's API server

ISSUER = "https://kubernetes.default.svc"  # the test API server's --service-account-issuer
AUDIENCE = "coordinated.dev/default/orders"
ADMIN = "admin-token-of-the-tokens-file"


def token_for(config: Path, namespace: str, account: str, audience: str | None = AUDIENCE) -> str:
    """A token from the API server's TokenRequest API, as the kubelet asks for a projected one (10 minutes: the
    least it issues)."""
    args = ["-n", namespace, "create", "token", account, "--duration", "10m"]
    done = kubectl(config, *args, *(["--audience", audience] if audience else []))
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def ensure_account(config: Path, namespace: str, account: str) -> None:
    for kind, name, extra in (("namespace", namespace, []), ("serviceaccount", account, ["-n", namespace])):
        done = kubectl(config, *extra, "create", kind, name)
        assert done.returncode == 0 or "already exists" in done.stderr.lower(), done.stderr


def resigned(token: str, key: Any, **changes: Any) -> str:
    """The same token with some claims changed, signed again with `key` under the same key id."""
    header = jwt.get_unverified_header(token)
    claims = {**jwt.decode(token, options={"verify_signature": False}), **changes}
    return jwt.encode(claims, key, algorithm=header["alg"], headers={"kid": header["kid"]})


def api_server_key(config: Path) -> Any:
    """The API server's own signing key (--service-account-signing-key-file, in the fixture's folder)."""
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    return load_pem_private_key((config.parent / "sa.key").read_bytes(), password=None)


def kube_as(config: Path) -> Any:
    """The operator's Kube, through `config`'s credentials."""
    from kubernetes import client
    from kubernetes import config as kube_config

    from coordinated.operator.kube import Kube

    configuration = client.Configuration()
    kube_config.load_kube_config(config_file=str(config), client_configuration=configuration)
    client.Configuration.set_default(configuration)
    return Kube()


def config_of(config: Path, token: str, into: Path) -> Path:
    """A kubeconfig like `config`, with `token` as its credentials."""
    document = yaml.safe_load(config.read_text())
    document["users"] = [{"name": "t", "user": {"token": token}}]
    into.write_text(yaml.safe_dump(document))
    return into


# ---- the CRD -------------------------------------------------------------------------------------------------

ACCESS = {
    "roles": [
        {"name": "orders", "keys": [{"prefixes": ["orders/"], "privileges": ["read", "write", "session"]}]},
        {
            "name": "billing",
            "keys": [{"prefixes": ["billing/"], "privileges": ["read", "write"]}],
            "cluster": ["monitor"],
        },
    ],
    "roleMappings": [
        {"name": "orders", "roles": ["orders"], "serviceAccounts": [{"namespace": "shop", "name": "orders-api"}]},
        {"name": "billing", "roles": ["billing"], "serviceAccounts": [{"namespace": "billing"}]},
    ],
    "quotas": [{"name": "orders", "prefix": "orders/", "maxKeys": 10000, "maxWritesPerSecond": 200}],
}


@pytest.mark.parametrize(
    ("access", "message"),
    [
        ({"roles": [{"name": "writer", "keys": []}]}, "admin, writer and reader are built-in roles"),
        (
            {"roles": [{"name": "r", "keys": [{"prefixes": ["a/"], "privileges": ["delete"]}]}]},
            'Unsupported value: "delete"',
        ),
        ({"roles": [{"name": "r", "cluster": ["security"]}]}, 'Unsupported value: "security"'),
        ({"roles": [{"name": "_r"}]}, "spec.access.roles[0].name in body should match"),
        ({"roles": [{"name": "r"}, {"name": "r"}]}, 'Duplicate value: map[string]interface {}{"name":"r"}'),
        ({"roleMappings": [{"name": "m", "roles": ["r"]}]}, "a role mapping names at least one serviceAccounts entry"),
        (
            {"roleMappings": [{"name": "m", "roles": ["r"], "serviceAccounts": [{"namespace": "Team_A"}]}]},
            "spec.access.roleMappings[0].serviceAccounts[0].namespace in body should match",
        ),
        ({"roleMappings": [{"name": "m", "roles": [], "principals": ["p"]}]}, "should have at least 1 items"),
        ({"quotas": [{"name": "q", "prefix": "a/"}]}, "a quota sets at least one of maxKeys"),
        ({"quotas": [{"name": "q", "prefix": "a/", "maxKeys": -1}]}, "should be greater than or equal to 0"),
        ({"serviceAccounts": {"audience": "two words"}}, "spec.access.serviceAccounts.audience in body should match"),
    ],
)
def test_the_api_server_refuses_a_malformed_spec_access(kubeconfig: Path, access: dict[str, Any], message: str) -> None:
    done = kubectl(kubeconfig, "apply", "--dry-run=server", "-f", "-", stdin=cluster("checked", access=access))
    assert done.returncode != 0 and message in done.stderr, done.stderr


def documented_access() -> dict[str, Any]:
    """docs/operator.md's spec.access, as a user copies it."""
    section = (REPO / "docs" / "operator.md").read_text().split("### Roles, role mappings and quotas", 1)[1]
    match = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert match is not None, "docs/operator.md shows no spec.access"
    return dict(yaml.safe_load(match.group(1))["spec"]["access"])


@pytest.mark.parametrize("access", [ACCESS, documented_access()], ids=["two-namespaces", "docs"])
def test_the_api_server_takes_the_documented_spec_access(kubeconfig: Path, access: dict[str, Any]) -> None:
    done = kubectl(kubeconfig, "apply", "--dry-run=server", "-f", "-", stdin=cluster("checked", access=access))
    assert done.returncode == 0, done.stderr
    spec = ClusterSpec.from_resource(yaml.safe_load(cluster("checked", access=access)))
    assert spec.access.validate() == []
    principals = [principal for mapping in spec.access.role_mappings for principal in mapping.mapping.principals]
    assert "system:serviceaccount:shop:orders-api" in principals, principals


# ---- the signing keys ----------------------------------------------------------------------------------------


def keys_context(kube: Any, spec: ClusterSpec, previous: dict[str, Any] | None = None) -> Context:
    """What the keys step reads of a pass."""
    fields = {"spec": spec, "kube": kube, "problems": [], "previous_status": previous or {}}
    return cast(Context, SimpleNamespace(**fields, logger=logging.getLogger("test")))


def test_the_operator_keeps_the_api_servers_keys_with_the_charts_two_rules(kubeconfig: Path, tmp_path: Path) -> None:
    """An operator whose only rights are the chart's discovery rules reads them (and writes its ConfigMap here as
    the admin, standing for its namespaced rules); without the rules it reports why, once, and keeps the old.

    Kubernetes grants discovery to every ServiceAccount by default (the ClusterRoleBinding
    system:service-account-issuer-discovery); a hardened cluster drops that binding, as this test does first, and
    the chart's own rule is what remains."""
    dropped = kubectl(kubeconfig, "delete", "clusterrolebinding", "system:service-account-issuer-discovery")
    assert dropped.returncode == 0 or "NotFound" in dropped.stderr, dropped.stderr
    ensure_account(kubeconfig, "ops", "operator")
    rule = {"nonResourceURLs": ["/.well-known/openid-configuration", "/openid/v1/jwks"], "verbs": ["get"]}
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "keys"}}
    assert kubectl(kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump({**role, "rules": [rule]})).returncode == 0
    as_operator = config_of(kubeconfig, token_for(kubeconfig, "ops", "operator", audience=None), tmp_path / "op")
    refused = asyncio.run(keys_of(kube_as(as_operator)))
    assert isinstance(refused, Exception) and getattr(refused, "status", None) == 403
    bound = kubectl(
        kubeconfig, "create", "clusterrolebinding", "keys", "--clusterrole=keys", "--serviceaccount=ops:operator"
    )
    assert bound.returncode == 0 or "AlreadyExists" in bound.stderr, bound.stderr
    deadline = time.monotonic() + 30  # RBAC caches take a moment
    while isinstance(found := asyncio.run(keys_of(kube_as(as_operator))), Exception) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not isinstance(found, Exception), found
    document, issuer, kids = service_account_keys.keys_document(*found)
    assert issuer == ISSUER and len(kids) == 1

    spec = ClusterSpec.from_resource({"metadata": {"name": "orders", "namespace": "default", "uid": "u"}})
    kube = kube_as(kubeconfig)
    result = asyncio.run(service_account_keys.step(keys_context(kube, spec)))
    [condition] = result.conditions
    assert condition.status and condition.reason == "Published" and ISSUER in condition.message
    stored = kubectl(kubeconfig, "get", "configmap", "orders-service-account-keys", "-o", "json")
    assert json.loads(json.loads(stored.stdout)["data"]["keys.json"]) == json.loads(document)
    previous = {"conditions": [{"type": "ServiceAccountKeys", "status": "True", "message": condition.message}]}
    assert asyncio.run(service_account_keys.step(keys_context(kube, spec, previous))).events == ()

    # Without the rules: the condition says why and the keys stay.
    assert kubectl(kubeconfig, "delete", "clusterrolebinding", "keys").returncode == 0
    unbound = kube_as(as_operator)
    deadline = time.monotonic() + 30
    while not isinstance(asyncio.run(keys_of(unbound)), Exception) and time.monotonic() < deadline:
        time.sleep(0.2)
    failed = asyncio.run(service_account_keys.step(keys_context(unbound, spec, previous)))
    [condition] = failed.conditions
    assert not condition.status and condition.reason == "DiscoveryFailed"
    assert "403" in condition.message and "/openid/v1/jwks" in condition.message, condition.message
    assert [reason for _, reason, _ in failed.events] == ["ServiceAccountKeysUnavailable"]
    again = kubectl(kubeconfig, "get", "configmap", "orders-service-account-keys", "-o", "json")
    assert json.loads(again.stdout)["data"] == json.loads(stored.stdout)["data"]


async def keys_of(kube: Any) -> tuple[bytes, bytes] | Exception:
    try:
        return cast(tuple[bytes, bytes], await kube.service_account_issuer())
    except Exception as error:
        return error


# ---- real tokens, the realm in this process ------------------------------------------------------------------


def documented_keys_commands() -> str:
    """docs/sidecar.md's commands that make a keys file by hand, as a user copies them."""
    section = (REPO / "docs" / "sidecar.md").read_text().split("### Kubernetes ServiceAccount tokens", 1)[1]
    match = re.search(r"```sh\n(.*?)```", section, re.S)
    assert match is not None, "docs/sidecar.md shows no commands that make the keys file"
    return match.group(1)


@pytest.fixture(scope="module")
def keys_file(kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sidecars' keys file, made by docs/sidecar.md's commands; the operator makes the same one."""
    folder = tmp_path_factory.mktemp("keys")
    assert KUBECTL is not None
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PATH": f"{Path(KUBECTL).parent}:{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", documented_keys_commands()],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    document, _, _ = service_account_keys.keys_document(*asyncio.run(kube_as(kubeconfig).service_account_issuer()))
    assert json.loads((folder / "keys.json").read_text()) == json.loads(document)
    return folder / "keys.json"


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def test_real_tokens_name_their_service_account_or_are_refused_with_the_reason(
    kubeconfig: Path, keys_file: Path
) -> None:
    ensure_account(kubeconfig, "team-a", "app")
    clock = Clock()
    realm = ServiceAccountTokens(AUDIENCE, KeysFile(str(keys_file)), clock=clock)
    projected = token_for(kubeconfig, "team-a", "app")
    assert realm.verify(projected) == Principal("system:serviceaccount:team-a:app", REALM_KUBERNETES)

    def reason(token: str) -> str:
        found = realm.verify(token)
        assert isinstance(found, Refused), found
        return found.reason

    # The pod's own API token (the API server's audience) and a token for another service.
    assert "not for this cluster's [coordinated.dev/default/orders]" in reason(
        token_for(kubeconfig, "team-a", "app", None)
    )
    assert 'issued for the audience ["vault"]' in reason(token_for(kubeconfig, "team-a", "app", "vault"))
    # The same token on this node's clock past its expiry, and before it was issued (beyond a minute of skew).
    claims = jwt.decode(projected, options={"verify_signature": False})
    clock.now = claims["exp"] + 61
    assert reason(projected).startswith("expired at")
    clock.now = claims["iat"] - 61
    assert reason(projected).startswith("not valid yet")
    clock.now = time.time()
    # Claims the API server signed, signed again by someone else under its key id.
    forged = resigned(projected, rsa.generate_private_key(public_exponent=65537, key_size=2048))
    assert reason(forged).startswith("its signature is wrong")


# ---- a real node, with spec.access applied by the operator's step ----------------------------------------------


@dataclass
class Node:
    node: LocalNode
    log: Path


@pytest.fixture(scope="module")
def node(keys_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    directory = tmp_path_factory.mktemp("node")
    tokens = directory / "tokens"
    tokens.write_text(f"admin {ADMIN} operator\n")
    local = LocalCluster(directory / "nodes", max_nodes=1, client_headers={"Authorization": f"Bearer {ADMIN}"})
    local.settings.update(
        {
            "http.auth.tokens_file": str(tokens),
            "http.auth.kubernetes.audience": AUDIENCE,
            "http.auth.kubernetes.keys_file": str(keys_file),
        }
    )
    try:
        [started] = local.bootstrap(1)
        assert started.log_path is not None
        yield Node(started, started.log_path)
    finally:
        local.stop_all(graceful=False)


def applied(node: Node, access: dict[str, Any], managed: dict[str, set[str]] | None = None) -> access_step.Applied:
    spec = AccessSpec.from_resource(access)
    assert spec.validate() == []

    async def run() -> access_step.Applied:
        async with SidecarConnections() as connections:
            client = SidecarClient(connections, node.node.url, access=SidecarAccess(token=ADMIN))
            managed_before = managed or {kind: set() for kind in access_step.KINDS}
            return await access_step.apply_access(client, spec, managed_before)

    return asyncio.run(run())


TWO_TEAMS = {
    "roles": [
        {"name": "team-a", "keys": [{"prefixes": ["app/a/"], "privileges": ["read", "write", "session"]}]},
        {"name": "team-b", "keys": [{"prefixes": ["app/b/"], "privileges": ["read", "write", "session"]}]},
    ],
    "roleMappings": [
        {"name": "team-a", "roles": ["team-a"], "serviceAccounts": [{"namespace": "team-a", "name": "app"}]},
        {"name": "team-b", "roles": ["team-b"], "serviceAccounts": [{"namespace": "team-b"}]},
    ],
    "quotas": [{"name": "team-b", "prefix": "app/b/", "maxKeys": 1}],
}


def test_two_service_accounts_each_have_their_own_prefix_and_nothing_of_the_others(
    kubeconfig: Path, node: Node, tmp_path: Path
) -> None:
    ensure_account(kubeconfig, "team-a", "app")
    ensure_account(kubeconfig, "team-b", "app")
    first = applied(node, TWO_TEAMS)
    assert first.failures == [] and first.not_available is None
    assert first.changes == [
        "put role [team-a]",
        "put role [team-b]",
        "put role mapping [team-a]",
        "put role mapping [team-b]",
        "put quota [team-b]",
    ]
    managed = first.managed
    assert applied(node, TWO_TEAMS, managed).changes == []  # a steady cluster: nothing written

    a_file, b_file = tmp_path / "a", tmp_path / "b"
    a_file.write_text(token_for(kubeconfig, "team-a", "app"))
    b_file.write_text(token_for(kubeconfig, "team-b", "app"))
    with (
        Client(node.node.url, token_file=a_file, retry_timeout=5) as team_a,
        Client(node.node.url, token_file=b_file, retry_timeout=5) as team_b,
    ):
        assert team_a.authenticate() == {
            "principal": "system:serviceaccount:team-a:app",
            "realm": "kubernetes",
            "roles": ["team-a"],
            "admin": False,
        }
        team_a.put("app/a/config", {"replicas": 3})
        team_b.put("app/b/config", {"replicas": 5})
        assert team_a.get("app/a/config").value == {"replicas": 3}
        with pytest.raises(AuthenticationError) as refused:
            team_a.get("app/b/config")
        assert refused.value.status == 403
        with pytest.raises(AuthenticationError):
            team_b.get("app/a/config")
        with pytest.raises(AuthenticationError):
            team_b.put("app/a/config", {"replicas": 0})
        with pytest.raises(QuotaExceeded):
            team_b.put("app/b/second", {})

    # The command line, with the token file.
    done = CliRunner().invoke(
        cli,
        ["auth", "whoami", "-o", "json", "--endpoints", node.node.url, "--token-file", str(b_file)],
        env={"COORDINATED_TOKEN": None, "COORDINATED_TOKEN_FILE": None},
    )
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["principal"] == "system:serviceaccount:team-b:app"

    # team-b leaves spec.access: its mapping, role and quota go; team-a's stay.
    only_a = {key: [entry for entry in entries if entry["name"] == "team-a"] for key, entries in TWO_TEAMS.items()}
    gone = applied(node, only_a, managed)
    assert gone.changes == ["deleted role mapping [team-b]", "deleted role [team-b]", "deleted quota [team-b]"]
    assert gone.managed == {"roles": {"team-a"}, "roleMappings": {"team-a"}, "quotas": set()}
    with Client(node.node.url, token_file=b_file, retry_timeout=5) as team_b, pytest.raises(AuthenticationError):
        team_b.get("app/b/config")

    # A quota below what its prefix holds is refused, named in the report, unless forced.
    below = {**only_a, "quotas": [{"name": "team-a", "prefix": "app/a/", "maxKeys": 0}]}
    refused_quota = applied(node, below, gone.managed)
    assert refused_quota.changes == [] and len(refused_quota.failures) == 1
    assert refused_quota.failures[0].startswith("quota [team-a]: 400"), refused_quota.failures
    forced = {**only_a, "quotas": [{"name": "team-a", "prefix": "app/a/", "maxKeys": 0, "force": True}]}
    assert applied(node, forced, gone.managed).changes == ["put quota [team-a]"]


def test_a_node_answers_401_with_the_reason_and_never_logs_the_token(kubeconfig: Path, node: Node) -> None:
    ensure_account(kubeconfig, "team-a", "app")
    projected = token_for(kubeconfig, "team-a", "app")
    now = int(time.time())
    cases = {
        "wrong audience": (token_for(kubeconfig, "team-a", "app", "vault"), "issued for the audience"),
        "the pod's API token": (token_for(kubeconfig, "team-a", "app", None), "not for this cluster's"),
        # Signed by the API server's own key: a token it issued an hour ago for ten minutes.
        "expired": (
            resigned(projected, api_server_key(kubeconfig), iat=now - 3600, nbf=now - 3600, exp=now - 3000),
            "expired at",
        ),
        "not yet valid": (
            resigned(projected, api_server_key(kubeconfig), iat=now + 600, nbf=now + 600, exp=now + 1200),
            "not valid yet",
        ),
        "wrongly signed": (
            resigned(projected, rsa.generate_private_key(public_exponent=65537, key_size=2048)),
            "its signature is wrong",
        ),
    }
    for case, (token, reason) in cases.items():
        headers = {"Authorization": f"Bearer {token}"}
        status, body = http("GET", f"{node.node.url}/_security/_authenticate", headers=headers)
        assert status == 401, (case, status, body)
        assert body["error"]["type"] == "security_exception" and reason in body["error"]["reason"], (case, body)
    log = node.log.read_text()
    for token, _ in cases.values():
        assert token.split(".")[2] not in log and token.split(".")[1] not in log
    assert "issued for the audience" in log  # the refusals are logged, with their reasons


def test_a_lost_keys_file_keeps_the_keys_and_turns_health_yellow_without_locking_anyone_out(
    kubeconfig: Path, node: Node, keys_file: Path
) -> None:
    """The keys file stands for the API server here: while it cannot be read (the operator cannot reach the API
    server, a ConfigMap volume remounted), the node keeps verifying with the keys it has, new tokens too."""
    ensure_account(kubeconfig, "team-a", "app")
    verified_before = token_for(kubeconfig, "team-a", "app")
    headers = {"Authorization": f"Bearer {verified_before}"}
    assert http("GET", f"{node.node.url}/_security/_authenticate", headers=headers)[0] == 200
    saved = keys_file.read_bytes()
    try:
        keys_file.write_text("{damaged")
        deadline = time.monotonic() + 30
        while (health := node.node.get("/_cluster/health")[1])["status"] != "yellow" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert health["status"] == "yellow", health
        [problem] = [problem for problem in health["problems"] if problem["kind"] == "auth_realm"]
        assert "[http.auth.kubernetes.keys_file] is not usable" in problem["reason"], problem
        assert "the keys read before are kept" in problem["reason"]
        assert http("GET", f"{node.node.url}/readyz")[0] == 200  # not a reason to take the node out of service
        for token in (verified_before, token_for(kubeconfig, "team-a", "app")):
            status, body = http(
                "GET", f"{node.node.url}/_security/_authenticate", headers={"Authorization": f"Bearer {token}"}
            )
            assert (status, body["principal"]) == (200, "system:serviceaccount:team-a:app"), body
    finally:
        keys_file.write_bytes(saved)
    deadline = time.monotonic() + 30
    while node.node.get("/_cluster/health")[1]["status"] != "green" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert node.node.get("/_cluster/health")[1]["status"] == "green"
