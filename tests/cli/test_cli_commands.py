"""The command-line client (`coordinated kv|lock|elect|session|endpoint|member|snapshot|settings|local`)
against a real 3-node cluster with TLS and tokens on, including the exit codes of every kind of failure."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from child_processes import ChildProcesses
from click.testing import CliRunner, Result
from network_proxy import NetworkProxy

from coordinated.cli import cli
from coordinated.client import Client, Lock
from coordinated.tools.devcerts import client_context, have_openssl, make_ca, make_cert
from coordinated.tools.localcluster import LocalCluster

ADMIN, READER = "admin-token-0123456789", "reader-token-0123456789"
OK, FAILED, BAD_INPUT, UNREACHABLE, UNKNOWN_OUTCOME = 0, 1, 2, 3, 4


@dataclass
class Secured:
    cluster: LocalCluster
    endpoints: str
    cacert: Path
    other_ca: Path
    directory: Path

    def env(self, token: str | None = ADMIN) -> dict[str, str | None]:
        return {
            "COORDINATED_ENDPOINTS": self.endpoints,
            "COORDINATED_TOKEN": token,
            "COORDINATED_CACERT": str(self.cacert),
            "COORDINATED_TIMEOUT": "10",
            "COORDINATED_LOCAL_DIR": str(self.directory / "no-local-cluster"),
        }

    def client(self) -> Client:
        return Client(self.endpoints.split(","), token=ADMIN, verify=client_context(None), retry_timeout=10)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    assert have_openssl(), "needs the openssl command: make test installs it (scripts/system-deps.sh)"
    directory = tmp_path_factory.mktemp("cli")
    ca = make_ca(directory / "pki", "ca")
    cert = make_cert(directory / "pki", ca, "node")
    other_ca = make_ca(directory / "other", "other-ca")
    tokens = directory / "tokens"
    tokens.write_text(f"admin {ADMIN}\nreader {READER}\n")
    cluster = LocalCluster(directory / "nodes", max_nodes=3, client_tls=client_context(ca))
    cluster.client_headers = {"Authorization": f"Bearer {ADMIN}"}
    (directory / "repo").mkdir()
    cluster.settings.update(
        {
            "http.ssl.enabled": "true",
            "http.ssl.certificate": str(cert.certificate),
            "http.ssl.key": str(cert.key),
            "http.auth.tokens_file": str(tokens),
            "path.repo": str(directory / "repo"),
        }
    )
    try:
        nodes = cluster.bootstrap(3)
        endpoints = ",".join(node.url for node in nodes)
        yield Secured(cluster, endpoints, ca.certificate, other_ca.certificate, directory)
    finally:
        cluster.stop_all(graceful=False)


def run(secured: Secured, *args: str, token: str | None = ADMIN, stdin: str | None = None, **env: str | None) -> Result:
    result = CliRunner().invoke(cli, list(args), env={**secured.env(token), **env}, input=stdin)
    # Every outcome is an exit code and a message: never an exception that escaped (a traceback).
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    if result.exit_code in (FAILED, UNREACHABLE, UNKNOWN_OUTCOME) or (
        result.exit_code == BAD_INPUT and "Usage: " not in result.stderr
    ):
        assert result.stderr.count("\n") == 1 and result.stderr.startswith("Error: "), result.stderr
    return result


def json_of(result: Result) -> Any:
    assert result.exit_code == OK, result.stderr
    return json.loads(result.stdout)


# -- kv ---------------------------------------------------------------------------------------------------


def test_kv_put_get_del_and_their_failures(secured: Secured) -> None:
    written = json_of(run(secured, "kv", "put", "app/config", '{"replicas": 3}', "-o", "json"))
    assert written["key"] == "app/config" and written["version"] > 0
    got = json_of(run(secured, "kv", "get", "app/config", "-o", "json"))
    assert got == {
        "key": "app/config",
        "value": {"replicas": 3},
        "version": written["version"],
        "create_version": written["version"],
        "session": None,
    }
    table = run(secured, "kv", "get", "app/config").stdout.splitlines()
    assert table[0].split() == ["KEY", "VALUE", "VERSION", "CREATE_VERSION", "SESSION"]
    assert table[1].split()[:2] == ["app/config", '{"replicas":3}']
    # VALUE from stdin; YAML out.
    assert "key: from-stdin" in run(secured, "kv", "put", "from-stdin", "-", "-o", "yaml", stdin='"text"').stdout
    assert json_of(run(secured, "kv", "get", "from-stdin", "-o", "json"))["value"] == "text"
    # Conditions: a conflict is a failed operation.
    assert run(secured, "kv", "put", "app/config", "1", "--create").exit_code == FAILED
    stale = run(secured, "kv", "put", "app/config", "1", "--if-version", str(written["version"] + 100))
    assert stale.exit_code == FAILED and "version_conflict" in stale.stderr
    assert json_of(run(secured, "kv", "get", "app/config", "-o", "json"))["value"] == {"replicas": 3}
    # Bad input is refused before anything is sent.
    not_json = run(secured, "kv", "put", "app/config", "hello")
    assert not_json.exit_code == BAD_INPUT and "not JSON" in not_json.stderr and '"text"' in not_json.stderr
    assert run(secured, "kv", "put", "_reserved", "1").exit_code == BAD_INPUT
    assert run(secured, "kv", "put", "k", "1", "--create", "--if-version", "2").exit_code == BAD_INPUT
    assert run(secured, "kv", "get").exit_code == BAD_INPUT  # usage
    # Delete, then the key is not found.
    assert run(secured, "kv", "del", "app/config", "--if-version", "1").exit_code == FAILED
    assert json_of(run(secured, "kv", "del", "app/config", "-o", "json"))["key"] == "app/config"
    missing = run(secured, "kv", "get", "app/config")
    assert missing.exit_code == FAILED and "not found" in missing.stderr
    # Deleting a key that does not exist fails, and says so.
    gone = run(secured, "kv", "del", "app/config")
    assert gone.exit_code == FAILED and "[app/config] not found" in gone.stderr


def test_kv_txn_from_a_file_and_stdin(secured: Secured, tmp_path: Path) -> None:
    version = json_of(run(secured, "kv", "put", "txn/a", "1", "-o", "json"))["version"]
    spec = {
        "compare": [{"key": "txn/a", "version": version}],
        "success": [{"op": "put", "key": "txn/b", "value": 2}, {"op": "delete", "key": "txn/a"}],
        "failure": [{"op": "get", "key": "txn/a"}],
    }
    path = tmp_path / "txn.json"
    path.write_text(json.dumps(spec))
    assert json_of(run(secured, "kv", "txn", str(path), "-o", "json"))["succeeded"] is True
    assert json_of(run(secured, "kv", "get", "txn/b", "-o", "json"))["value"] == 2
    # The compare no longer holds: the failure branch runs, and the command exits 1 after printing it.
    failed = run(secured, "kv", "txn", "-o", "json", stdin=json.dumps(spec))
    assert failed.exit_code == FAILED and json.loads(failed.stdout)["succeeded"] is False
    # Malformed: not JSON, a field that does not belong, a missing file.
    assert run(secured, "kv", "txn", stdin="{").exit_code == BAD_INPUT
    assert run(secured, "kv", "txn", stdin='{"compare": [{"key": "a"}]}').exit_code == BAD_INPUT
    assert run(secured, "kv", "txn", stdin='{"succes": []}').exit_code == BAD_INPUT
    assert run(secured, "kv", "txn", str(tmp_path / "missing.json")).exit_code == BAD_INPUT
    for compare in ({"key": "a", "version": 1, "value": 1}, {"key": "a", "version": 1, "op": "~"}, ["a", 1]):
        malformed = run(secured, "kv", "txn", stdin=json.dumps({"compare": [compare]}))
        assert malformed.exit_code == BAD_INPUT and "stdin" in malformed.stderr, malformed.stderr
    # A transaction the server refuses (an op it does not know) is bad input too, and writes nothing.
    refused = run(secured, "kv", "txn", stdin='{"success": [{"op": "rename", "key": "txn/b"}]}')
    assert refused.exit_code == BAD_INPUT and "400" in refused.stderr


def test_kv_txn_takes_every_compare_of_the_api(secured: Secured) -> None:
    """On version, create version and value, with each op, as the API takes them."""
    created = json_of(run(secured, "kv", "put", "cmp/n", "5", "-o", "json"))["version"]
    run(secured, "kv", "put", "cmp/s", '"m"')
    holding = [
        {"key": "cmp/n", "value": 5},
        {"key": "cmp/n", "value": 10, "op": "<"},
        {"key": "cmp/n", "value": 1, "op": ">"},
        {"key": "cmp/n", "value": 6, "op": "!="},
        {"key": "cmp/s", "value": "a", "op": ">"},
        {"key": "cmp/n", "create_version": created},
        {"key": "cmp/n", "create_version": 0, "op": ">"},
        {"key": "cmp/n", "version": created, "op": "="},
        {"key": "cmp/n", "version": created + 1000, "op": "<"},
        {"key": "cmp/missing", "version": 0},
    ]
    for compare in holding:
        spec = {"compare": [compare], "success": [{"op": "get", "key": "cmp/n"}]}
        result = run(secured, "kv", "txn", "-o", "json", stdin=json.dumps(spec))
        assert result.exit_code == OK and json.loads(result.stdout)["succeeded"], (compare, result.stderr)
    failing = {"compare": [{"key": "cmp/missing", "value": 1, "op": "!="}], "failure": [{"op": "get", "key": "cmp/n"}]}
    failed = run(secured, "kv", "txn", "-o", "json", stdin=json.dumps(failing))  # no value compare holds if absent
    assert failed.exit_code == FAILED and json.loads(failed.stdout)["results"][0]["value"] == 5
    ordered = {"compare": [{"key": "cmp/n", "value": [1], "op": "<"}]}  # the server's rule: a number or a string
    refused = run(secured, "kv", "txn", stdin=json.dumps(ordered))
    assert refused.exit_code == BAD_INPUT and "400" in refused.stderr and "number or a string" in refused.stderr


def test_kv_export_then_import(secured: Secured, tmp_path: Path) -> None:
    for key, value in (("io/a", 1), ("io/b", {"deep": [1, 2]}), ("io/c", "three")):
        run(secured, "kv", "put", key, json.dumps(value))
    exported = tmp_path / "keys.jsonl"
    assert run(secured, "kv", "export", "--file", str(exported)).exit_code == OK
    lines = [json.loads(line) for line in exported.read_text().splitlines()]
    assert {"key": "io/b", "value": {"deep": [1, 2]}} in lines
    assert [line["key"] for line in lines] == sorted(line["key"] for line in lines)
    assert run(secured, "kv", "export", "-f", str(tmp_path / "again.jsonl")).exit_code == OK
    assert (tmp_path / "again.jsonl").read_text() == exported.read_text()
    with secured.client() as client:
        for key in ("io/a", "io/b", "io/c"):
            client.delete(key)
    # Both take their file with --file (-f); the import's old form, FILE as an argument, still works.
    imported = json_of(run(secured, "kv", "import", "--file", str(exported), "-o", "json"))
    assert imported["imported"] == len(lines)
    assert json_of(run(secured, "kv", "get", "io/b", "-o", "json"))["value"] == {"deep": [1, 2]}
    old_form = run(secured, "kv", "import", str(exported), "-o", "json")
    assert json.loads(old_form.stdout)["imported"] == len(lines) and "deprecated" in old_form.stderr
    assert json_of(run(secured, "kv", "import", "-f", "-", "-o", "json", stdin=exported.read_text()))["imported"]
    assert run(secured, "kv", "import", str(exported), "--file", str(exported)).exit_code == BAD_INPUT
    # A malformed line stops the import before anything is written.
    bad = '{"key": "io/new1", "value": 1}\n{"key": "io/new2"}\n'
    refused = run(secured, "kv", "import", stdin=bad)
    assert refused.exit_code == BAD_INPUT and "stdin" in refused.stderr
    broken = run(secured, "kv", "import", stdin='{"key": "io/new1", "value": 1}\nnot json\n')
    assert broken.exit_code == BAD_INPUT and "line 2" in broken.stderr
    assert run(secured, "kv", "get", "io/new1").exit_code == FAILED


# -- connection failures ----------------------------------------------------------------------------------


def test_connection_failures_have_their_exit_codes(secured: Secured, tmp_path: Path) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        refused_port = unused.getsockname()[1]
    refused = run(
        secured, "kv", "get", "k", COORDINATED_ENDPOINTS=f"https://127.0.0.1:{refused_port}", COORDINATED_TIMEOUT="0"
    )
    assert refused.exit_code == UNREACHABLE and "cannot reach" in refused.stderr
    for wrong in (" , ", "ftp://127.0.0.1:9200", "http://:9200", "127.0.0.1:port"):
        assert run(secured, "kv", "get", "k", COORDINATED_ENDPOINTS=wrong).exit_code == BAD_INPUT, wrong
    # Tokens: none, unknown, and a role too low for a write.
    assert run(secured, "kv", "put", "k", "1", token=None).exit_code == UNREACHABLE
    assert run(secured, "kv", "put", "k", "1", token="not-a-token-0123456789").exit_code == UNREACHABLE
    forbidden = run(secured, "kv", "put", "k", "1", token=READER)
    assert forbidden.exit_code == UNREACHABLE and "403" in forbidden.stderr
    assert run(secured, "kv", "get", "k", token=READER).exit_code == FAILED  # a reader may read: not found
    # TLS: a CA that did not sign the nodes' certificates; a CA file that is not one.
    untrusted = run(secured, "kv", "get", "k", COORDINATED_CACERT=str(secured.other_ca), COORDINATED_TIMEOUT="0")
    assert untrusted.exit_code == UNREACHABLE and "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr
    not_pem = tmp_path / "ca.pem"
    not_pem.write_text("not a certificate")
    assert run(secured, "kv", "get", "k", COORDINATED_CACERT=str(not_pem)).exit_code == BAD_INPUT
    assert run(secured, "kv", "get", "k", COORDINATED_CACERT=str(tmp_path / "missing.pem")).exit_code == BAD_INPUT


def test_a_conditional_write_whose_answer_is_lost_exits_4(secured: Secured) -> None:
    """A server that takes the request and closes the connection without an answer: the create may or may not
    have happened, and the command says so instead of retrying it."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()

        def swallow_one_request() -> None:
            connection, _ = listener.accept()
            with connection:
                connection.recv(65536)

        thread = threading.Thread(target=swallow_one_request, daemon=True)
        thread.start()
        address = f"http://127.0.0.1:{listener.getsockname()[1]}"
        lost = run(secured, "kv", "put", "k", "1", "--create", COORDINATED_ENDPOINTS=address, COORDINATED_CACERT=None)
        thread.join(5)
    assert lost.exit_code == UNKNOWN_OUTCOME and "outcome unknown" in lost.stderr


def test_the_installed_command_prints_one_line_and_no_traceback(secured: Secured) -> None:
    env = {**os.environ, **{k: v for k, v in secured.env(READER).items() if v is not None}}
    done = subprocess.run(
        [sys.executable, "-m", "coordinated.cli", "kv", "put", "k", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == UNREACHABLE and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


# -- lock and elect ---------------------------------------------------------------------------------------


def test_lock_runs_the_command_with_the_fencing_token(secured: Secured, tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    script = f'echo "$COORDINATED_LOCK_NAME $COORDINATED_LOCK_TOKEN $COORDINATED_SESSION" >> {seen}; exit 7'
    first = run(secured, "lock", "locks/job", "--ttl", "5", "--", "sh", "-c", script)
    assert first.exit_code == 7  # the command's own exit code
    second = run(secured, "lock", "locks/job", "--", "sh", "-c", script)
    assert second.exit_code == 7
    (name1, token1, session1), (name2, token2, session2) = (line.split() for line in seen.read_text().splitlines())
    assert name1 == name2 == "locks/job" and int(token2) > int(token1) > 0 and session1 != session2
    # Released afterwards: the key is gone and the sessions were ended.
    assert run(secured, "kv", "get", "locks/job").exit_code == FAILED
    with secured.client() as client:
        assert session1 not in {s["id"] for s in client.sessions()["sessions"]}
        # Held by someone else: --wait gives up with exit 1, and the command never runs.
        with client.session(ttl=10) as session, Lock(client, "locks/job", session):
            busy = run(secured, "lock", "locks/job", "--wait", "0.3", "--", "sh", "-c", script)
    assert busy.exit_code == FAILED and "held by another session" in busy.stderr
    assert len(seen.read_text().splitlines()) == 2
    assert run(secured, "lock", "locks/job", "--", "no-such-command-anywhere").exit_code == BAD_INPUT
    assert run(secured, "lock", "locks/job").exit_code == BAD_INPUT  # no command


def cli_process(secured: Secured, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, **{k: v for k, v in secured.env().items() if v is not None}}
    return subprocess.Popen(
        [sys.executable, "-m", "coordinated.cli", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_elect_campaigns_resigns_on_sigterm_and_listen_follows(secured: Secured) -> None:
    listener = cli_process(secured, "elect", "elections/main", "--listen", "-o", "json")
    candidate = None
    try:
        assert listener.stdout is not None
        assert json.loads(listener.stdout.readline()) == {"leader": None, "name": "elections/main", "token": None}
        candidate = cli_process(secured, "elect", "elections/main", "alice", "-o", "json")
        assert candidate.stdout is not None
        lines = [candidate.stdout.readline()]
        while lines[-1] not in ("}\n", ""):  # the JSON object, indented over several lines
            lines.append(candidate.stdout.readline())
        elected = json.loads("".join(lines))
        assert elected["leader"] == "alice" and elected["token"] > 0
        assert json.loads(listener.stdout.readline()) == elected
        candidate.send_signal(signal.SIGTERM)
        assert candidate.wait(15) == OK
        assert json.loads(listener.stdout.readline())["leader"] is None  # resigned at once, not after the TTL
    finally:
        for process in (listener, candidate):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait(10)


def test_elect_resigns_when_the_interrupt_lands_as_the_leader_is_printed(
    secured: Secured, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SIGTERM sent as soon as the leader's line is read may arrive before the wait for the session
    starts; it must resign and exit 0 all the same, not exit 1 with the leadership kept until the TTL."""
    from coordinated.ctl import recipes

    printed = recipes.emit

    def interrupted_once_printed(*args: Any, **kwargs: Any) -> None:
        printed(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(recipes, "emit", interrupted_once_printed)
    result = run(secured, "elect", "elections/printed", "bob", "-o", "json")
    assert result.exit_code == OK, result.output
    listened = run(secured, "kv", "get", "--prefix", "elections/printed/", "-o", "json")
    assert json_of(listened)["keys"] == []  # resigned: its candidate key is gone


def test_kv_get_prefix_list_and_del_prefix(secured: Secured) -> None:
    for name in "abcde":
        run(secured, "kv", "put", f"pre/{name}", json.dumps({"n": name}))
    run(secured, "kv", "put", "prefixed-elsewhere", "0")
    page = json_of(run(secured, "kv", "get", "--prefix", "pre/", "--limit", "2", "-o", "json"))
    assert [entry["key"] for entry in page["keys"]] == ["pre/a", "pre/b"]
    assert (page["more"], page["next"], page["keys"][0]["value"]) == (True, "pre/b", {"n": "a"})
    keys_only = json_of(run(secured, "kv", "get", "--prefix", "pre/", "--keys-only", "-o", "json"))
    assert len(keys_only["keys"]) == 5 and all("value" not in entry for entry in keys_only["keys"])
    table = run(secured, "kv", "get", "--prefix", "pre/").stdout.splitlines()
    assert table[0].split() == ["KEY", "VALUE", "VERSION", "CREATE_VERSION", "SESSION"] and len(table) == 6
    listed = json_of(run(secured, "kv", "list", "--prefix", "pre/", "--page-size", "2", "-o", "json"))
    assert [entry["key"] for entry in listed["keys"]] == [f"pre/{name}" for name in "abcde"]
    assert all(entry["version"] <= listed["version"] for entry in listed["keys"])
    deleted = json_of(run(secured, "kv", "del", "--prefix", "pre/", "-o", "json"))
    assert (deleted["prefix"], deleted["deleted"]) == ("pre/", 5)
    assert json_of(run(secured, "kv", "list", "--prefix", "pre/", "-o", "json"))["keys"] == []
    assert run(secured, "kv", "get", "prefixed-elsewhere").exit_code == OK
    for usage in (["get"], ["get", "k", "--prefix", "p"], ["get", "k", "--limit", "2"], ["del"]):
        assert run(secured, "kv", *usage).exit_code == BAD_INPUT, usage
    assert run(secured, "kv", "del", "--prefix", "p", "--if-version", "3").exit_code == BAD_INPUT
    unset = run(secured, "kv", "del", "--prefix", "")  # "$PREFIX" of an unset variable: nothing deleted
    assert unset.exit_code == BAD_INPUT and "--all" in unset.output, unset.output
    assert run(secured, "kv", "get", "prefixed-elsewhere").exit_code == OK
    assert run(secured, "kv", "del", "--prefix", "p", "--all").exit_code == BAD_INPUT
    assert run(secured, "kv", "get", "--prefix", "_reserved").exit_code == BAD_INPUT


def test_kv_watch_prints_changes_or_runs_a_command_per_change(secured: Secured, tmp_path: Path) -> None:
    start = json_of(run(secured, "kv", "put", "watched/a", "1", "-o", "json"))["version"]
    run(secured, "kv", "put", "watched/b", '"two"')
    run(secured, "kv", "del", "watched/a")
    printed = run(secured, "kv", "watch", "--prefix", "watched/", "--from-version", str(start - 1), "--max-events", "3")
    assert printed.exit_code == OK, printed.stderr
    lines = [line.split("\t") for line in printed.stdout.splitlines()]
    assert [(fields[0], fields[1], fields[3]) for fields in lines] == [
        ("put", "watched/a", "1"),
        ("put", "watched/b", '"two"'),
        ("delete", "watched/a", "null"),
    ]
    # Each change's own version: another publication (the cluster's own) may fall between two of them.
    versions = [int(fields[2]) for fields in lines]
    assert versions[0] == start and versions == sorted(set(versions)), versions
    as_json = run(secured, "kv", "watch", "--prefix", "watched/", "--from-version", str(start), "--max-events", "1",
                  "--prev-value", "-o", "json")  # fmt: skip
    assert json.loads(as_json.stdout) == {
        "type": "put", "key": "watched/b", "value": "two", "version": versions[1], "prev_value": None
    }  # fmt: skip
    log = tmp_path / "events"
    script = f'echo "$COORDINATED_EVENT_TYPE $COORDINATED_EVENT_KEY $COORDINATED_EVENT_VALUE $COORDINATED_EVENT_VERSION" >> {log}'
    ran = run(secured, "kv", "watch", "--prefix", "watched/", "--from-version", str(start - 1), "--max-events", "3",
              "--", "sh", "-c", script)  # fmt: skip
    assert ran.exit_code == OK, ran.stderr
    assert log.read_text().splitlines() == [
        f"put watched/a 1 {versions[0]}",
        f'put watched/b "two" {versions[1]}',
        f"delete watched/a null {versions[2]}",
    ]


# -- sessions, endpoints, members -------------------------------------------------------------------------


def test_sessions_grant_keepalive_list_revoke(secured: Secured) -> None:
    session = json_of(run(secured, "session", "grant", "--ttl", "30", "-o", "json"))["id"]
    assert run(secured, "kv", "put", "sessions/eph", "1", "--session", session).exit_code == OK
    assert run(secured, "session", "keepalive", session).exit_code == OK
    listed = json_of(run(secured, "session", "list", "-o", "json"))
    assert {"id": session, "ttl": "30s", "keys": ["sessions/eph"]}.items() <= next(
        s for s in listed if s["id"] == session
    ).items()
    assert run(secured, "session", "revoke", session).exit_code == OK
    assert run(secured, "kv", "get", "sessions/eph").exit_code == FAILED  # the ephemeral key went with it
    ended = run(secured, "session", "keepalive", session)
    assert ended.exit_code == FAILED and "ended" in ended.stderr
    assert run(secured, "session", "revoke", session).exit_code == FAILED


def test_endpoint_status_and_health(secured: Secured) -> None:
    rows = json_of(run(secured, "endpoint", "status", "-o", "json"))
    assert [row["name"] for row in rows] == ["node-1", "node-2", "node-3"]
    assert sum(row["master"] for row in rows) == 1 and all(row["voting"] for row in rows)
    assert all(row["health"] == "green" and row["applied_lag"] >= 0 for row in rows)
    assert len({row["term"] for row in rows}) == 1
    table = run(secured, "endpoint", "status", "-o", "table").stdout.splitlines()
    assert table[0].split()[:9] == [
        "ENDPOINT", "NAME", "ID", "MASTER", "TERM", "VERSION", "VOTING", "APPLIED_LAG", "HEALTH"
    ]  # fmt: skip
    assert len(table) == 4
    assert run(secured, "endpoint", "health").exit_code == OK
    # One endpoint that does not answer: its row says so; health fails; none answering is unreachable.
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        dead = f"https://127.0.0.1:{unused.getsockname()[1]}"
    mixed = f"{secured.endpoints},{dead}"
    rows = json_of(run(secured, "endpoint", "status", "-o", "json", COORDINATED_ENDPOINTS=mixed))
    assert rows[-1]["health"] == "unreachable" and "cannot reach" in rows[-1]["error"]
    assert run(secured, "endpoint", "health", COORDINATED_ENDPOINTS=mixed).exit_code == FAILED
    assert run(secured, "endpoint", "status", COORDINATED_ENDPOINTS=dead).exit_code == UNREACHABLE
    assert run(secured, "endpoint", "status", token=READER).exit_code == OK  # reads only


def test_endpoint_health_of_the_whole_cluster(secured: Secured) -> None:
    first = secured.endpoints.split(",")[0]
    rows = json_of(run(secured, "endpoint", "health", "--cluster", "-o", "json", COORDINATED_ENDPOINTS=first))
    assert [row["name"] for row in rows] == ["node-1", "node-2", "node-3"]
    assert [row["health"] for row in rows] == ["green", "joined", "joined"]
    assert rows[0]["endpoint"] == first and all(row["voting"] for row in rows)
    assert sum(row["master"] for row in rows) == 1
    table = run(secured, "endpoint", "health", "--cluster", COORDINATED_ENDPOINTS=first).stdout.splitlines()
    assert table[0].split()[:6] == ["NAME", "ID", "ENDPOINT", "MASTER", "VOTING", "HEALTH"] and len(table) == 4
    every = json_of(run(secured, "endpoint", "health", "--cluster", "-o", "json"))
    assert [row["health"] for row in every] == ["green"] * 3


def test_settings_set_and_get(secured: Secured) -> None:
    changed = json_of(run(secured, "settings", "set", "cluster.publish.diff_history.max_diffs=500", "-o", "json"))
    assert changed == {"cluster.publish.diff_history.max_diffs": "500"}
    got = json_of(run(secured, "settings", "get", "cluster.publish.diff_history.max_diffs", "-o", "json"))
    assert got == {"cluster.publish.diff_history.max_diffs": "500"}
    unknown = run(secured, "settings", "set", "cluster.no_such_setting=1")
    assert unknown.exit_code == BAD_INPUT and "unknown setting" in unknown.stderr
    assert run(secured, "settings", "set", "cluster.publish.diff_history.max_diffs=-3").exit_code == BAD_INPUT
    assert run(secured, "settings", "set", "no-equals-sign").exit_code == BAD_INPUT
    assert run(secured, "settings", "set", "cluster.publish.diff_history.max_diffs=", token=READER).exit_code == 3
    assert run(secured, "settings", "set", "cluster.publish.diff_history.max_diffs=").exit_code == OK  # reset
    assert json_of(run(secured, "settings", "get", "-o", "json")).get("cluster.publish.diff_history.max_diffs") is None


def test_snapshot_save_list_restore_delete(secured: Secured) -> None:
    run(secured, "kv", "put", "snap/kept", '"before"')
    saved = json_of(run(secured, "snapshot", "save", "backups", "first", "--location", "backups", "-o", "json"))
    assert saved["snapshot"] == "first" and saved["state"] == "SUCCESS"
    taken = run(secured, "snapshot", "save", "backups", "first")  # the name exists: a conflict
    assert taken.exit_code == FAILED and "exists already" in taken.stderr
    listed = json_of(run(secured, "snapshot", "list", "backups", "-o", "json"))
    assert [s["snapshot"] for s in listed] == ["first"]
    run(secured, "kv", "put", "snap/kept", '"after"')
    # Without --yes it asks; no answer is no.
    declined = CliRunner().invoke(cli, ["snapshot", "restore", "backups", "first"], env=secured.env(), input="n\n")
    assert declined.exit_code == FAILED and declined.stderr.endswith(
        "Error: not restored: not confirmed (--yes restores without asking)\n"
    )
    assert json_of(run(secured, "kv", "get", "snap/kept", "-o", "json"))["value"] == "after"
    assert run(secured, "snapshot", "restore", "backups", "first", "--yes").exit_code == OK
    assert json_of(run(secured, "kv", "get", "snap/kept", "-o", "json"))["value"] == "before"
    assert run(secured, "snapshot", "delete", "backups", "first").exit_code == OK
    assert run(secured, "snapshot", "delete", "backups", "first").exit_code == FAILED  # missing
    assert run(secured, "snapshot", "list", "nowhere").exit_code == FAILED
    assert run(secured, "snapshot", "save", "backups", "second", token=READER).exit_code == UNREACHABLE


def test_member_list_exclude_and_clear(secured: Secured) -> None:
    members = json_of(run(secured, "member", "list", "-o", "json"))
    assert [m["name"] for m in members] == ["node-1", "node-2", "node-3"]
    assert all(m["voting"] and not m["excluded"] for m in members) and sum(m["master"] for m in members) == 1
    follower = next(m["name"] for m in members if not m["master"])
    excluded = json_of(run(secured, "member", "exclude", follower, "-o", "json"))
    assert [e["node_name"] for e in excluded] == [follower]
    after = {m["name"]: m for m in json_of(run(secured, "member", "list", "-o", "json"))}
    assert after[follower]["excluded"] and not after[follower]["voting"]
    assert run(secured, "member", "clear-exclusions", "--no-wait").exit_code == OK
    assert not any(m["excluded"] for m in json_of(run(secured, "member", "list", "-o", "json")))
    assert run(secured, "member", "exclude", "node-1", "node-2", "node-3").exit_code == BAD_INPUT


# -- completion and the local cluster --------------------------------------------------------------------


def test_completion_scripts_and_completions(secured: Secured) -> None:
    for shell in ("bash", "zsh", "fish"):
        script = run(secured, "completion", shell)
        assert script.exit_code == OK and "_COORDINATED_COMPLETE" in script.stdout
    assert run(secured, "completion", "tcsh").exit_code == BAD_INPUT
    env = {**os.environ, "_COORDINATED_COMPLETE": "bash_complete", "COMP_WORDS": "coordinated kv ", "COMP_CWORD": "2"}
    done = subprocess.run(
        [sys.executable, "-m", "coordinated.cli"], env=env, capture_output=True, text=True, timeout=60
    )
    assert {"plain,get", "plain,put", "plain,txn"} <= set(done.stdout.split())


@pytest.mark.usefixtures("processes")
def test_local_up_then_commands_without_endpoints_then_down(tmp_path: Path) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("COORDINATED_")},
        "COORDINATED_LOCAL_DIR": str(tmp_path / "local"),
    }

    def coordinated(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "coordinated.cli", *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)

    up = coordinated("local", "up", "-o", "json")
    try:
        assert up.returncode == OK, up.stderr
        nodes = json.loads(up.stdout)["nodes"]
        assert len(nodes) == 3 and "export COORDINATED_ENDPOINTS=" in up.stderr
        assert coordinated("local", "up").returncode == FAILED  # one at a time
        # With no endpoints given, the commands use the local cluster.
        assert coordinated("kv", "put", "greeting", '"hello"').returncode == OK
        assert json.loads(coordinated("kv", "get", "greeting", "-o", "json").stdout)["value"] == "hello"
        status = json.loads(coordinated("endpoint", "status", "-o", "json").stdout)
        assert sorted(row["name"] for row in status) == ["node-1", "node-2", "node-3"]
        down = coordinated("local", "down")
        assert down.returncode == OK, down.stderr
        assert not (tmp_path / "local").exists()
        assert not any(Path(f"/proc/{node['pid']}").exists() and not zombie(node["pid"]) for node in nodes)
        assert coordinated("local", "down").returncode == FAILED  # nothing to stop
    finally:
        for node in json.loads(up.stdout)["nodes"] if up.returncode == OK else []:
            if Path(f"/proc/{node['pid']}").exists():
                os.kill(node["pid"], signal.SIGKILL)


def zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_the_programs_keep_their_own_arguments(processes: ChildProcesses) -> None:
    """`coordinated node ...` and the other programs get their command line untouched by click."""
    done = processes.run(
        [sys.executable, "-m", "coordinated.cli", "simulate", "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and "usage:" in done.stdout.lower() and "--chaos-seconds" in done.stdout
    unknown = processes.run([sys.executable, "-m", "coordinated.cli", "nonsense"], capture_output=True, text=True)
    assert unknown.returncode == BAD_INPUT and "No such command" in unknown.stderr
    time.sleep(0)


# -- the table of exit codes in docs/cli.md ---------------------------------------------------------------

CLI_DOC = Path(__file__).parents[2] / "docs" / "cli.md"


def documented_exit_codes() -> dict[str, int]:
    """docs/cli.md's table of exit codes: each example (the last column, split at `;`) -> its code."""
    text = CLI_DOC.read_text()
    table = text[text.index("| code | meaning | examples |") :].split("\n\n", 1)[0]
    examples = {}
    for row in table.splitlines()[2:]:
        code, _, listed = (cell.strip() for cell in row.strip("|").split("|"))
        for example in listed.split(";"):
            examples[" ".join(example.split())] = int(code)
    return examples


def masterless_node(directory: Path) -> tuple[LocalCluster, str]:
    """A node that never gets a master: it waits for two more of its bootstrap nodes, which never come."""
    cluster = LocalCluster(directory, max_nodes=1)
    node = cluster.start("lonely", initial_master_nodes=["lonely", "ghost-1", "ghost-2"])
    cluster.wait_http(node)
    return cluster, node.url


def lost_while_held(secured: Secured, *args: str, command: tuple[str, ...] = ()) -> int:
    """`lock` or `elect` through a proxy to one node, cut off once it holds: no keepalive reaches the cluster."""
    node = secured.cluster.nodes["node-1"]
    proxy = NetworkProxy(("127.0.0.1", node.http_port))
    try:
        endpoint = proxy.address.replace("http", "https")
        process = cli_process(secured, *args, "--ttl", "1", "--endpoints", endpoint, *command)
        assert process.stdout is not None
        process.stdout.readline()  # the leader, or the command's first line: it holds
        proxy.cut_off()
        _, errors = process.communicate(timeout=30)
    finally:
        proxy.close()
    assert "no keepalive has reached the cluster" in errors, errors
    return process.returncode


def lost_answer(secured: Secured, *args: str, stdin: str | None = None) -> Result:
    """The command against a server that takes the request and closes the connection without an answer."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()

        def swallow_one_request() -> None:
            connection, _ = listener.accept()
            with connection:
                connection.recv(65536)

        thread = threading.Thread(target=swallow_one_request, daemon=True)
        thread.start()
        address = f"http://127.0.0.1:{listener.getsockname()[1]}"
        result = run(secured, *args, stdin=stdin, COORDINATED_ENDPOINTS=address, COORDINATED_CACERT=None)
        thread.join(5)
    return result


def test_every_example_of_the_exit_code_table_exits_with_its_code(secured: Secured, tmp_path: Path) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        dead = f"https://127.0.0.1:{unused.getsockname()[1]}"
    not_pem = tmp_path / "ca.pem"
    not_pem.write_text("not a certificate")
    version = json_of(run(secured, "kv", "put", "codes/k", "1", "-o", "json"))["version"]
    run(secured, "snapshot", "save", "codes", "taken", "--location", "codes")
    masterless, lonely = masterless_node(tmp_path / "masterless")

    def held_lock() -> int:
        with secured.client() as client, client.session(ttl=10) as session, Lock(client, "codes/lock", session):
            return run(secured, "lock", "codes/lock", "--wait", "0.3", "--", "true").exit_code

    lines = "\n".join(['{"key": "codes/i", "value": 1}', '{"key": "codes/j"}'])
    scenarios: dict[str, list[Callable[[], int]]] = {
        "the command did what it was asked": [lambda: run(secured, "kv", "get", "codes/k").exit_code],
        "a key or session not found (`kv get`, `kv del`, `session keepalive`)": [
            lambda: run(secured, "kv", "get", "codes/missing").exit_code,
            lambda: run(secured, "kv", "del", "codes/missing").exit_code,
            lambda: run(secured, "session", "keepalive", "0" * 32).exit_code,
        ],
        "a conflict (409: `--create` on an existing key, a stale `--if-version`)": [
            lambda: run(secured, "kv", "put", "codes/k", "2", "--create").exit_code,
            lambda: run(secured, "kv", "put", "codes/k", "2", "--if-version", str(version + 1000)).exit_code,
            lambda: run(secured, "kv", "del", "codes/k", "--if-version", str(version + 1000)).exit_code,
        ],
        "a transaction whose compares failed": [
            lambda: run(secured, "kv", "txn", stdin='{"compare": [{"key": "codes/k", "version": 0}]}').exit_code
        ],
        "a lock not acquired within `--wait`": [held_lock],
        "a lock or a leadership lost (no keepalive reached the cluster in time)": [
            lambda: lost_while_held(secured, "lock", "codes/lost", command=("--", "sh", "-c", "echo held; sleep 30")),
            lambda: lost_while_held(secured, "elect", "codes/lost-election", "alice"),
        ],
        "an unhealthy node for `endpoint health`": [
            lambda: run(secured, "endpoint", "health", COORDINATED_ENDPOINTS=f"{secured.endpoints},{dead}").exit_code
        ],
        "a snapshot name taken": [lambda: run(secured, "snapshot", "save", "codes", "taken").exit_code],
        "an unknown option": [lambda: run(secured, "kv", "get", "codes/k", "--no-such-option").exit_code],
        "a VALUE that is not JSON": [lambda: run(secured, "kv", "put", "codes/k", "hello").exit_code],
        "a key name the cluster refuses": [
            lambda: run(secured, "kv", "put", "_reserved", "1").exit_code,
            lambda: run(secured, "kv", "get", "codes//k").exit_code,
        ],
        "a malformed transaction or import file": [
            lambda: (
                run(secured, "kv", "txn", stdin='{"compare": [{"key": "codes/k", "value": 1, "version": 1}]}').exit_code
            ),
            lambda: run(secured, "kv", "txn", stdin='{"success": [{"op": "rename", "key": "codes/k"}]}').exit_code,
            lambda: run(secured, "kv", "import", stdin=lines).exit_code,
        ],
        "an unknown setting or a bad value (the cluster's 400)": [
            lambda: run(secured, "settings", "set", "cluster.no_such_setting=1").exit_code,
            lambda: run(secured, "settings", "set", "cluster.publish.diff_history.max_diffs=-3").exit_code,
        ],
        "a CA file that is not PEM": [
            lambda: run(secured, "kv", "get", "codes/k", COORDINATED_CACERT=str(not_pem)).exit_code
        ],
        "connection refused": [
            lambda: run(secured, "kv", "get", "codes/k", COORDINATED_ENDPOINTS=dead, COORDINATED_TIMEOUT="0").exit_code
        ],
        "a wrong address": [
            lambda: (
                run(
                    secured,
                    "kv",
                    "get",
                    "codes/k",
                    COORDINATED_ENDPOINTS="https://no-such-host.invalid:9200",
                    COORDINATED_TIMEOUT="0",
                ).exit_code
            )
        ],
        "a TLS failure (an untrusted certificate)": [
            lambda: (
                run(
                    secured, "kv", "get", "codes/k", COORDINATED_CACERT=str(secured.other_ca), COORDINATED_TIMEOUT="0"
                ).exit_code
            )
        ],
        "no master for longer than `--timeout` (the message says that the node that answered has no master)": [
            lambda: no_master(secured, lonely),
            lambda: no_master(secured, f"{lonely},{dead}"),  # the dead endpoint is not what the message names
        ],
        "a missing or unknown token (401) or a role too low (403)": [
            lambda: run(secured, "kv", "put", "codes/k", "1", token=None).exit_code,
            lambda: run(secured, "kv", "put", "codes/k", "1", token="not-a-token-0123456789").exit_code,
            lambda: run(secured, "kv", "put", "codes/k", "1", token=READER).exit_code,
        ],
        "a conditional write or transaction was sent and its answer was lost (it may or may not have taken effect: "
        "read the key to find out)": [
            lambda: lost_answer(secured, "kv", "put", "codes/k", "1", "--create").exit_code,
            lambda: (
                lost_answer(
                    secured, "kv", "txn", stdin='{"success": [{"op": "put", "key": "a", "value": 1}]}'
                ).exit_code
            ),
        ],
    }
    try:
        documented = documented_exit_codes()
        assert set(documented) == set(scenarios)  # every example of the table has its scenarios, and no more
        assert set(documented.values()) == {OK, FAILED, BAD_INPUT, UNREACHABLE, UNKNOWN_OUTCOME}
        for example, code in documented.items():
            for number, scenario in enumerate(scenarios[example]):
                assert scenario() == code, f"{example} (scenario {number}) did not exit {code}"
    finally:
        masterless.stop_all(graceful=False)


def no_master(secured: Secured, endpoints: str) -> int:
    result = run(
        secured, "kv", "put", "codes/k", "1", COORDINATED_ENDPOINTS=endpoints, COORDINATED_TIMEOUT="2", token=None
    )
    assert "has no master" in result.stderr and "cannot reach" not in result.stderr, result.stderr
    return result.exit_code
