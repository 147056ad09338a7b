"""docs/applications.md's access control example runs as it is, as an application's principal with a role over
its prefix and a quota, against a real node."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from coordinated.tools.localcluster import LocalCluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

DOCS = Path(__file__).parents[2] / "docs" / "applications.md"
ADMIN, APP = "admin-token-0123456789", "app-a-token-0123456789"


def examples() -> list[str]:
    text = DOCS.read_text()
    section = text[text.index("## Access control: your application's") : text.index("## Watches")]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_access_control_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"admin {ADMIN} ops\nnone {APP} app-a\n")
    cluster = LocalCluster(tmp_path / "c", client_headers={"Authorization": f"Bearer {ADMIN}"})
    cluster.settings["http.auth.tokens_file"] = str(tokens)
    try:
        (node,) = cluster.bootstrap(1)
        role = {"keys": [{"prefixes": ["app/a/"], "privileges": ["read", "write", "session"]}]}
        assert node.put("/_security/role/app-a", role)[0] == 200
        assert node.put("/_security/role_mapping/app-a", {"roles": ["app-a"], "principals": ["app-a"]})[0] == 200
        assert node.put("/_quota/app-a", {"prefix": "app/a/", "max_keys": 20})[0] == 200
        monkeypatch.setenv("COORDINATED_URL", node.url)
        monkeypatch.setenv("COORDINATED_TOKEN", APP)
        (example,) = examples()
        exec(compile(example, f"{DOCS.name}, access control example", "exec"), {})
        printed = capsys.readouterr().out
        assert "app-a ['app-a']" in printed
        assert "it needs [write] on key [app/b/config]" in printed
        assert "quota [app-a] on prefix [app/a/] exceeded: [max_keys] is [20]" in printed
        _, state = node.get("/_cluster/metadata?prefix=app/a/&count_only=true")
        # The quota held 20 keys: app/a/config, the ephemeral app/a/leader and 18 items; the leader ended with its
        # session.
        assert state["count"] == 19
    finally:
        cluster.stop_all(graceful=False)
