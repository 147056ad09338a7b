"""`coordinated auth whoami|role|role-mapping|quota`: who the client is to the cluster, and the cluster's custom
roles, role mappings and quotas (changing them needs the `admin` role; docs/sidecar.md, "Access control")."""

from __future__ import annotations

from typing import IO, Any

import click

from coordinated.ctl.connection import Connection, connection_options
from coordinated.ctl.failures import BadInput
from coordinated.ctl.inputs import json_document
from coordinated.ctl.output import emit

ROLE_COLUMNS = ("role", "built_in", "keys", "cluster")
MAPPING_COLUMNS = ("mapping", "roles", "principals")
QUOTA_COLUMNS = ("quota", "prefix", "limit", "max", "used")
LIMITS = ("max_keys", "max_bytes", "max_sessions", "max_watch_streams", "max_writes_per_second")
USAGE_OF = {"max_keys": "keys", "max_bytes": "bytes", "max_sessions": "sessions", "max_watch_streams": "watch_streams"}


@click.group()
def auth() -> None:
    """Who am I, custom roles, role mappings and quotas."""


@auth.command()
@connection_options
def whoami(connection: Connection) -> None:
    """The principal the token (or certificate) is, the realm that knows it, and every role it has."""
    with connection.client() as client:
        answer = client.authenticate()
    row = {**answer, "roles": ",".join(answer["roles"])}
    emit(answer, connection.output, ("principal", "realm", "roles", "admin"), rows=[row])


def _changed(answer: dict[str, Any], kind: str, name: str) -> dict[str, Any]:
    return {kind: name, "created": answer[kind]["created"], "acknowledged": answer["acknowledged"]}


def _deleted(answer: dict[str, Any], kind: str, name: str) -> dict[str, Any]:
    return {kind: name, "deleted": answer["found"], "acknowledged": answer["acknowledged"]}


# -- roles ------------------------------------------------------------------------------------------------


@auth.group()
def role() -> None:
    """Custom roles: privileges on the keys under prefixes, and on the cluster."""


def role_rows(roles: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for name, described in sorted(roles.items()):
        grants = "; ".join(
            f"{','.join(grant['privileges'])} on {' '.join(repr(p) for p in grant['prefixes'])}"
            for grant in described["keys"]
        )
        rows.append(
            {"role": name, "built_in": described["built_in"], "keys": grants, "cluster": ",".join(described["cluster"])}
        )
    return rows


@role.command(name="list")
@connection_options
def role_list(connection: Connection) -> None:
    """Every role: the built-in ones (admin, writer, reader) and the custom ones."""
    with connection.client() as client:
        roles = client.roles()
    emit(roles, connection.output, ROLE_COLUMNS, rows=role_rows(roles))


@role.command(name="get")
@click.argument("name")
@connection_options
def role_get(connection: Connection, name: str) -> None:
    """The role NAME (exit 1 if there is none)."""
    with connection.client() as client:
        roles = client.roles(name)
    emit(roles, connection.output, ROLE_COLUMNS, rows=role_rows(roles))


def grants_of(read: tuple[str, ...], write: tuple[str, ...], session: tuple[str, ...]) -> dict[str, list[str]]:
    grants: dict[str, list[str]] = {}
    for privilege, prefixes in (("read", read), ("write", write), ("session", session)):
        for prefix in prefixes:
            grants.setdefault(prefix, []).append(privilege)
    return grants


def role_file(stream: IO[str]) -> tuple[dict[str, list[str]], list[str]]:
    """The grants (privileges by prefix) and cluster privileges of a role written as the API takes it."""
    body, path = json_document(stream), stream.name
    shape = '{"keys": [{"prefixes": [...], "privileges": [...]}], "cluster": [...]}'
    if not isinstance(body, dict) or not set(body) <= {"keys", "cluster"}:
        raise BadInput(f"--file: [{path}] must hold a role: {shape}")
    grants: dict[str, list[str]] = {}
    for grant in body.get("keys", []):
        if not isinstance(grant, dict) or not all(isinstance(grant.get(f), list) for f in ("prefixes", "privileges")):
            raise BadInput(f'--file: [{path}]: each of [keys] is {{"prefixes": [...], "privileges": [...]}}')
        for prefix in grant["prefixes"]:
            grants.setdefault(prefix, []).extend(p for p in grant["privileges"] if p not in grants.get(prefix, []))
    cluster = body.get("cluster", [])
    if not isinstance(cluster, list):
        raise BadInput(f"--file: [{path}]: [cluster] is a list of cluster privileges")
    return grants, cluster


@role.command(name="put")
@click.argument("name")
@click.option("--read", "read", multiple=True, metavar="PREFIX", help="read (get, list, watch) the keys under PREFIX")
@click.option("--write", "write", multiple=True, metavar="PREFIX", help="write (put, delete, txn) under PREFIX")
@click.option("--session", "session", multiple=True, metavar="PREFIX", help="sessions and ephemeral keys under PREFIX")
@click.option("--cluster", multiple=True, type=click.Choice(["monitor", "manage"]), help="a cluster privilege")
@click.option(
    "--file", "path", type=click.File("r"), help='the role as JSON ({"keys": [...], "cluster": [...]}; - for stdin)'
)
@connection_options
def role_put(
    connection: Connection,
    name: str,
    read: tuple[str, ...],
    write: tuple[str, ...],
    session: tuple[str, ...],
    cluster: tuple[str, ...],
    path: IO[str] | None,
) -> None:
    """Defines or replaces the custom role NAME. Each option may be repeated; an empty PREFIX ('') is every key:

    coordinated auth role put app-a --read app/a/ --write app/a/ --session app/a/ --cluster monitor
    """
    if path is not None and (read or write or session or cluster):
        raise BadInput("give the role either with --file or with --read/--write/--session/--cluster, not both")
    grants, privileges = role_file(path) if path is not None else (grants_of(read, write, session), list(cluster))
    with connection.client() as client:
        answer = client.put_role(name, grants, privileges)
    emit(_changed(answer, "role", name), connection.output, ("role", "created", "acknowledged"))


@role.command(name="delete")
@click.argument("name")
@connection_options
def role_delete(connection: Connection, name: str) -> None:
    """Deletes the custom role NAME (exit 1 if there is none); mappings that name it then give nothing by it."""
    with connection.client() as client:
        answer = client.delete_role(name)
    emit(_deleted(answer, "role", name), connection.output, ("role", "deleted", "acknowledged"))


# -- role mappings ----------------------------------------------------------------------------------------


@auth.group(name="role-mapping")
def role_mapping() -> None:
    """Role mappings: roles given to principals (tokens-file names, certificate subjects, ServiceAccounts)."""


def mapping_rows(mappings: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"mapping": name, "roles": ",".join(found["roles"]), "principals": " ".join(found["principals"])}
        for name, found in sorted(mappings.items())
    ]


@role_mapping.command(name="list")
@connection_options
def mapping_list(connection: Connection) -> None:
    """Every role mapping."""
    with connection.client() as client:
        mappings = client.role_mappings()
    emit(mappings, connection.output, MAPPING_COLUMNS, rows=mapping_rows(mappings))


@role_mapping.command(name="get")
@click.argument("name")
@connection_options
def mapping_get(connection: Connection, name: str) -> None:
    """The role mapping NAME (exit 1 if there is none)."""
    with connection.client() as client:
        mappings = client.role_mappings(name)
    emit(mappings, connection.output, MAPPING_COLUMNS, rows=mapping_rows(mappings))


@role_mapping.command(name="put")
@click.argument("name")
@click.option("--role", "roles", multiple=True, required=True, help="a role it gives (repeat for several)")
@click.option(
    "--principal",
    "principals",
    multiple=True,
    required=True,
    help="a principal it names, or a name's start followed by * (repeat for several)",
)
@connection_options
def mapping_put(connection: Connection, name: str, roles: tuple[str, ...], principals: tuple[str, ...]) -> None:
    """Defines or replaces the role mapping NAME:

    coordinated auth role-mapping put app-a --role app-a --principal 'system:serviceaccount:team-a:*'
    """
    with connection.client() as client:
        answer = client.put_role_mapping(name, list(roles), list(principals))
    emit(_changed(answer, "role_mapping", name), connection.output, ("role_mapping", "created", "acknowledged"))


@role_mapping.command(name="delete")
@click.argument("name")
@connection_options
def mapping_delete(connection: Connection, name: str) -> None:
    """Deletes the role mapping NAME (exit 1 if there is none; exit 2 if it would leave no admin)."""
    with connection.client() as client:
        answer = client.delete_role_mapping(name)
    emit(_deleted(answer, "role_mapping", name), connection.output, ("role_mapping", "deleted", "acknowledged"))


# -- quotas -----------------------------------------------------------------------------------------------


@auth.group()
def quota() -> None:
    """Quotas per prefix: keys, bytes, sessions, watch streams and writes per second."""


def quota_rows(quotas: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for name, found in sorted(quotas.items()):
        for limit in LIMITS:
            if found.get(limit) is not None:
                used = found["usage"].get(USAGE_OF.get(limit, ""))
                rows.append(
                    {"quota": name, "prefix": found["prefix"], "limit": limit, "max": found[limit], "used": used}
                )
    return rows


@quota.command(name="list")
@connection_options
def quota_list(connection: Connection) -> None:
    """Every quota, each limit with what is used (watch streams: on the node that answered)."""
    with connection.client() as client:
        quotas = client.quotas()
    emit(quotas, connection.output, QUOTA_COLUMNS, rows=quota_rows(quotas))


@quota.command(name="get")
@click.argument("name")
@connection_options
def quota_get(connection: Connection, name: str) -> None:
    """The quota NAME and its usage (exit 1 if there is none)."""
    with connection.client() as client:
        quotas = client.quotas(name)
    emit(quotas, connection.output, QUOTA_COLUMNS, rows=quota_rows(quotas))


@quota.command(name="put")
@click.argument("name")
@click.option("--prefix", required=True, help="the keys it limits: those under PREFIX ('' for every key)")
@click.option("--max-keys", type=click.IntRange(min=0))
@click.option("--max-bytes", type=click.IntRange(min=0), help="key names (UTF-8) plus JSON values")
@click.option("--max-sessions", type=click.IntRange(min=0))
@click.option("--max-watch-streams", type=click.IntRange(min=0), help="on each node")
@click.option("--max-writes-per-second", type=click.IntRange(min=0))
@click.option("--force", is_flag=True, help="set limits below what is used now (only growth is then refused)")
@connection_options
def quota_put(
    connection: Connection,
    name: str,
    prefix: str,
    max_keys: int | None,
    max_bytes: int | None,
    max_sessions: int | None,
    max_watch_streams: int | None,
    max_writes_per_second: int | None,
    force: bool,
) -> None:
    """Defines or replaces the quota NAME (at least one limit):

    coordinated auth quota put app-a --prefix app/a/ --max-keys 10000 --max-writes-per-second 200
    """
    with connection.client() as client:
        answer = client.put_quota(
            name,
            prefix,
            max_keys=max_keys,
            max_bytes=max_bytes,
            max_sessions=max_sessions,
            max_watch_streams=max_watch_streams,
            max_writes_per_second=max_writes_per_second,
            force=force,
        )
    emit(_changed(answer, "quota", name), connection.output, ("quota", "created", "acknowledged"))


@quota.command(name="delete")
@click.argument("name")
@connection_options
def quota_delete(connection: Connection, name: str) -> None:
    """Deletes the quota NAME (exit 1 if there is none)."""
    with connection.client() as client:
        answer = client.delete_quota(name)
    emit(_deleted(answer, "quota", name), connection.output, ("quota", "deleted", "acknowledged"))
