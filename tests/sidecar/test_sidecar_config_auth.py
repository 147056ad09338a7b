from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from coordinated.coordination.peer_finder import FIND_PEERS_INTERVAL
from coordinated.coordination.settings import SettingsError, parse_byte_size
from coordinated.sidecar.cli import main
from coordinated.sidecar.config import NodeConfig
from coordinated.sidecar.node_settings import build_config
from coordinated.sidecar.peers.auth import SIGNATURE_HEADER, TIMESTAMP_HEADER, TransportAuth
from coordinated.sidecar.web.http_settings import MAX_CONTENT_LENGTH


def config(**overrides: str) -> NodeConfig:
    return build_config(
        name="n1", data_dir="/tmp/x", host="127.0.0.1", http_port=1, transport_port=2, overrides=overrides
    )


def test_defaults() -> None:
    cfg = config()
    assert cfg.settings[FIND_PEERS_INTERVAL] == 1000
    assert cfg.settings[MAX_CONTENT_LENGTH] == 1024 * 1024
    assert cfg.transport_address == "127.0.0.1:2"


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("no.such.setting", "1", "unknown setting [no.such.setting]"),
        ("discovery.zen.minimum_master_nodes", "2", "discovery.zen.minimum_master_nodes"),
        ("discovery.zen.ping.unicast.hosts", "a:1", "discovery.seed_hosts"),
        ("cluster.publish.timeout", "soon", "cluster.publish.timeout"),
        ("http.max_content_length", "-1", "http.max_content_length"),
        ("transport.secret_file", "/nonexistent/secret", "transport.secret_file"),
        ("discovery.seed_hosts", "nohostport", "discovery.seed_hosts"),
    ],
)
def test_bad_settings_name_the_setting(key: str, value: str, message: str) -> None:
    with pytest.raises(SettingsError, match=re.escape(message)):
        config(**{key: value})


def test_cli_exits_2_with_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--name", "n1", "--data-dir", str(tmp_path), "-E", "discovery.zen.minimum_master_nodes=2"])
    assert code == 2
    err = capsys.readouterr().err
    assert "discovery.zen.minimum_master_nodes" in err and "Traceback" not in err
    assert main(["--name", "n1", "--data-dir", str(tmp_path), "-E", "novalue"]) == 2
    assert main(["--name", "bad name!", "--data-dir", str(tmp_path)]) == 2


def test_byte_sizes() -> None:
    assert parse_byte_size("10kb") == 10240
    assert parse_byte_size("5") == 5
    with pytest.raises(ValueError):
        parse_byte_size("lots")


def test_hmac_sign_verify() -> None:
    auth = TransportAuth(b"0123456789abcdef-secret")
    headers = auth.sign(b"body")
    assert auth.verify(headers, b"body") is None
    assert auth.verify(headers, b"bodx") == "bad signature"
    assert "missing" in (auth.verify({}, b"body") or "")
    assert TransportAuth(b"another-secret-0123456").verify(headers, b"body") == "bad signature"
    old = auth.sign(b"body", now=time.time() - 3600)
    assert "clock" in (auth.verify(old, b"body") or "")
    forged = {TIMESTAMP_HEADER: str(int(time.time())), SIGNATURE_HEADER: headers[SIGNATURE_HEADER]}
    assert auth.verify(forged, b"body") in (None, "bad signature")  # same second: same MAC; else refused
