"""docs/sidecar.md's access control section: its examples are what a real node takes and answers (the role,
role mapping and quota bodies are accepted as they are; the answers have the documented shape)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from coordinated.tools.localcluster import LocalCluster, http

pytestmark = pytest.mark.timeout(120)

DOCS = Path(__file__).parents[2] / "docs" / "sidecar.md"
ADMIN, APP = "admin-token-0123456789", "app-a-token-0123456789"


def section_blocks() -> list[Any]:
    text = DOCS.read_text()
    section = text[text.index("### Access control: principals") : text.index("### Loopback listener")]
    return [json.loads(block) for block in re.findall(r"```json\n(.*?)```", section, re.S)]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_the_documented_bodies_and_answers(make_cluster: Callable[..., LocalCluster], tmp_path: Path) -> None:
    whoami, role, mapping, written, quota, exceeded = section_blocks()
    tokens = tmp_path / "tokens"
    tokens.write_text(f"admin {ADMIN} ops\nnone {APP} app-a\n")
    cluster = make_cluster(client_headers=bearer(ADMIN))
    cluster.settings["http.auth.tokens_file"] = str(tokens)
    (node,) = cluster.bootstrap(1)
    assert node.put("/_security/role/app-a", role)[0] == 200
    assert node.put("/_security/role_mapping/app-a", mapping)[0] == 200
    assert http("GET", node.url + "/_security/_authenticate", headers=bearer(APP)) == (200, whoami)
    assert node.put("/_quota/app-a", quota)[0] == 200
    status, _ = http("PUT", node.url + "/_cluster/metadata/app/a/config", written["value"], headers=bearer(APP))
    assert status == 200
    _, read = node.get("/_cluster/metadata/app/a/config")
    assert set(read) == set(written) and read["writer"] == written["writer"] == "app-a"
    assert node.put("/_quota/app-a?force=true", {**quota, "max_keys": 1})[0] == 200
    status, refused = http("PUT", node.url + "/_cluster/metadata/app/a/other", 1, headers=bearer(APP))
    assert (status, refused["error"]["type"]) == (429, exceeded["error"]["type"])
    pattern = re.escape(exceeded["error"]["reason"]).replace("10000", r"\d+").replace("10001", r"\d+")
    assert re.fullmatch(pattern, refused["error"]["reason"]), refused
