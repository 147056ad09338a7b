"""`coordinated kv`: get, put, del and txn on keys, range reads of a prefix (`get --prefix`, `list`), prefix
deletes, watches (kv_watch.py), and export/import of keys as JSON Lines."""

from __future__ import annotations

import json
import sys
from typing import IO, TYPE_CHECKING, Any

import click

from coordinated.client import Client, KeyValue, OutcomeUnknown, TxnResult, put_op
from coordinated.ctl.connection import Connection, connection_options
from coordinated.ctl.failures import Failed
from coordinated.ctl.inputs import json_document, json_lines, value_argument
from coordinated.ctl.kv_watch import watch
from coordinated.ctl.output import emit

if TYPE_CHECKING:
    from coordinated.ctl.kv_files import ExportedKey

# The server takes at most this many ops in one transaction; an import writes in transactions of this size.
MAX_TXN_OPS = 64


@click.group()
def kv() -> None:
    """Read and write keys. Values are JSON."""


KEY_COLUMNS = ("key", "value", "version", "create_version", "session")
kv.add_command(watch)


def key_data(found: KeyValue) -> dict[str, Any]:
    return {
        "key": found.key,
        "value": found.value,
        "version": found.version,
        "create_version": found.create_version,
        "session": found.session,
    }


def listing_data(keys: list[KeyValue], keys_only: bool) -> list[dict[str, Any]]:
    rows = [key_data(found) for found in keys]
    if keys_only:
        for row in rows:
            del row["value"]
    return rows


keys_only_option = click.option("--keys-only", is_flag=True, help="the keys and their versions, without values")
local_option = click.option("--local", is_flag=True, help="this node's applied state, without asking the master")


@kv.command()
@click.argument("key", required=False)
@click.option("--prefix", help="list the keys whose names start with PREFIX (one page; see `kv list`)")
@keys_only_option
@click.option("--limit", type=click.IntRange(1, 10000), help="with --prefix: at most this many keys (default 1000)")
@local_option
@connection_options
def get(
    connection: Connection, key: str | None, prefix: str | None, keys_only: bool, limit: int | None, local: bool
) -> None:
    """The value of KEY, its version and create_version (exit 1 if it does not exist); or, with --prefix,
    one page of the keys under PREFIX, in key order, read at one version. -o json gives
    {"version", "keys", "more", "next"}: `more` says whether keys follow (`kv list` reads them all)."""
    if (key is None) == (prefix is None):
        raise click.UsageError("give KEY or --prefix PREFIX")
    if prefix is None and (keys_only or limit is not None):
        raise click.UsageError("--keys-only and --limit go with --prefix")
    with connection.client() as client:
        if key is not None:
            emit(key_data(client.get(key, local=local)), connection.output, KEY_COLUMNS)
            return
        page = client.get_range(prefix or "", keys_only=keys_only, limit=limit, local=local)
    rows = listing_data(page.keys, keys_only)
    data = {"version": page.version, "keys": rows, "more": page.more, "next": page.next}
    emit(data, connection.output, key_columns(keys_only), rows)


def key_columns(keys_only: bool) -> tuple[str, ...]:
    return tuple(column for column in KEY_COLUMNS if not (keys_only and column == "value"))


@kv.command(name="list")
@click.option("--prefix", default="", help="the keys whose names start with PREFIX (default: every key)")
@keys_only_option
@click.option("--page-size", type=click.IntRange(1, 10000), help="keys per request (default 1000)")
@local_option
@connection_options
def list_keys(connection: Connection, prefix: str, keys_only: bool, page_size: int | None, local: bool) -> None:
    """Every key under PREFIX, in key order, all pages read at one version. -o json gives
    {"version", "keys"}."""
    with connection.client() as client:
        listing = client.list_prefix(prefix, keys_only=keys_only, page_size=page_size, local=local)
    rows = listing_data(listing.keys, keys_only)
    emit({"version": listing.version, "keys": rows}, connection.output, key_columns(keys_only), rows)


@kv.command()
@click.argument("key")
@click.argument("value")
@click.option("--if-version", type=click.IntRange(min=0), help="write only if the key is at this version (0: absent)")
@click.option("--create", is_flag=True, help="write only if the key does not exist")
@click.option("--session", help="an ephemeral key of this session: deleted when the session ends")
@connection_options
def put(
    connection: Connection, key: str, value: str, if_version: int | None, create: bool, session: str | None
) -> None:
    """Writes VALUE (JSON, or - to read it from stdin) to KEY. A failed condition exits 1."""
    if create and if_version is not None:
        raise click.UsageError("give --create or --if-version, not both")
    parsed = value_argument(value)
    with connection.client() as client:
        if create:
            written = client.create(key, parsed, session=session)
        elif if_version is not None:
            written = client.cas(key, parsed, if_version, session=session)
        else:
            written = client.put(key, parsed, session=session)
    emit(write_data(written), connection.output, ("key", "version", "term"))


@kv.command(name="del")
@click.argument("key", required=False)
@click.option("--prefix", help="delete every key whose name starts with PREFIX (at most 1,000 per committed state)")
@click.option("--all", "every_key", is_flag=True, help="with an empty --prefix: delete every key")
@click.option("--if-version", type=click.IntRange(min=1), help="delete only if the key is at this version")
@connection_options
def delete(
    connection: Connection, key: str | None, prefix: str | None, every_key: bool, if_version: int | None
) -> None:
    """Deletes KEY (exit 1 if it does not exist, or is not at --if-version); or, with --prefix, every key
    under PREFIX (`--prefix "" --all`: every key), printing how many there were."""
    if (key is None) == (prefix is None):
        raise click.UsageError("give KEY or --prefix PREFIX")
    if prefix is not None and if_version is not None:
        raise click.UsageError("--if-version goes with KEY, not --prefix")
    if prefix == "" and not every_key:
        raise click.UsageError("an empty --prefix deletes every key: add --all to mean it (is a variable unset?)")
    if every_key and prefix != "":
        raise click.UsageError('--all goes with --prefix ""')
    with connection.client() as client:
        if prefix is not None:
            deleted = client.delete_prefix(prefix, every_key=every_key)
            data = {"prefix": deleted.prefix, "deleted": deleted.deleted, "version": deleted.version}
            emit(data, connection.output, ("prefix", "deleted", "version"))
            return
        written = delete_key(client, key or "", if_version)
    emit(write_data(written), connection.output, ("key", "version", "term"))


def delete_key(client: Client, key: str, if_version: int | None) -> Any:
    """Deletes the key; Failed (exit 1) if it did not exist. Whether it existed comes with the delete (its
    previous value), so the answer is exact; if that answer is lost, a plain delete (which may be repeated)
    makes sure the key is gone, and whether it was there is then unknown (said on stderr)."""
    if if_version is not None:
        return client.delete(key, if_version=if_version)  # a missing key is a conflict: exit 1
    try:
        written = client.delete(key, prev_value=True)
    except OutcomeUnknown:
        click.echo(f"the answer was lost: [{key}] is deleted, but whether it existed is unknown", err=True)
        return client.delete(key)
    if written.prev is None:
        raise Failed(f"[{key}] not found: nothing was deleted")
    return written


def write_data(written: Any) -> dict[str, Any]:
    return {"key": written.key, "version": written.version, "term": written.term}


@kv.command()
@click.argument("file", type=click.File("r"), default="-")
@connection_options
def txn(connection: Connection, file: IO[str]) -> None:
    """Runs the transaction in FILE (default: stdin), all or nothing, as the API takes it:

    {"compare": [{"key": "a", "version": 3}, {"key": "n", "value": 10, "op": "<"}],
    "success": [{"op": "put", "key": "a", "value": 1}], "failure": [{"op": "get", "key": "a"}]}

    A compare names a key and one of version, create_version and value, with op =, !=, < or > (default =).
    Exits 1 when a compare failed (the failure ops ran instead)."""
    from coordinated.ctl.kv_files import transaction

    compares, success, failure = transaction(json_document(file), "stdin" if file.name == "<stdin>" else file.name)
    with connection.client() as client:
        result = client.txn(compares, success, failure)
    emit(txn_data(result), connection.output, ("succeeded", "version", "results"))
    if not result.succeeded:
        raise Failed("the transaction's compares failed: the failure ops ran")


def txn_data(result: TxnResult) -> dict[str, Any]:
    return {"succeeded": result.succeeded, "version": result.version, "results": result.results}


file_option_help = "the JSON Lines file (default: - for {})"


@kv.command(name="export")
@click.option("--prefix", default="", help="only the keys whose names start with PREFIX")
@click.option("--include-ephemeral", is_flag=True, help="also the keys of live sessions")
@click.option("-f", "--file", "file", type=click.File("w"), default="-", help=file_option_help.format("stdout"))
@connection_options
def export_keys(connection: Connection, prefix: str, include_ephemeral: bool, file: IO[str]) -> None:
    """Every key (under PREFIX) and its value as JSON Lines ({"key", "value"} per line, sorted by key), read
    at one committed state (a range read, page by page). Ephemeral keys are left out unless
    --include-ephemeral."""
    with connection.client() as client:
        listing = client.list_prefix(prefix)
    for found in listing.keys:
        if include_ephemeral or found.session is None:
            line = json.dumps({"key": found.key, "value": found.value}, ensure_ascii=False, sort_keys=True)
            click.echo(line, file=file)


@kv.command(name="import")
@click.option("-f", "--file", "file", type=click.File("r"), help=file_option_help.format("stdin"))
@click.argument("old_file", metavar="[FILE]", required=False, type=click.File("r"))
@connection_options
def import_keys(connection: Connection, file: IO[str] | None, old_file: IO[str] | None) -> None:
    """Writes the keys of --file (default: stdin; the JSON Lines of `kv export`), in transactions of 64 keys.
    A malformed line stops the import before anything is written. (FILE as an argument still works, but is
    deprecated: `kv export` and `kv import` both take --file.)"""
    if old_file is not None:
        if file is not None:
            raise click.UsageError("give the file once: --file FILE")
        click.echo("Warning: `kv import FILE` is deprecated: use `kv import --file FILE`", err=True)
    from coordinated.ctl.kv_files import exported_keys

    source = file or old_file or sys.stdin
    entries = exported_keys(json_lines(source), "stdin" if source.name == "<stdin>" else source.name)
    version = write_all(connection.client(), entries)
    emit({"imported": len(entries), "version": version}, connection.output, ("imported", "version"))


def write_all(client: Client, entries: list[ExportedKey]) -> int | None:
    """Puts the keys in transactions of MAX_TXN_OPS; the version of the last."""
    version = None
    with client:
        for start in range(0, len(entries), MAX_TXN_OPS):
            chunk = entries[start : start + MAX_TXN_OPS]
            version = client.txn([], [put_op(entry.key, entry.value) for entry in chunk]).version
    return version
