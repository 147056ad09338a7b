"""docs/cli.md's `auth` example, line by line, against a real node: each command's exit code as the comment
beside it says (0 without one), and the reason it names."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from coordinated.tools.localcluster import LocalCluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

DOCS = Path(__file__).parents[2] / "docs" / "cli.md"
ADMIN, APP_A = "admin-token-0123456789", "app-a-token-0123456789"


def example_lines() -> list[str]:
    text = DOCS.read_text()
    section = text[text.index("### `auth`") : text.index("### `local`")]
    (block,) = re.findall(r"```sh\n(.*?)```", section, re.S)
    return [line for line in block.splitlines() if line.strip()]


def expected(line: str) -> tuple[int, list[str]]:
    """The exit code a line's comment gives (0 without one) and the pieces of the reason it quotes."""
    comment = line.partition("#")[2].strip()
    found = re.match(r"exit (\d+): (.*)", comment)
    if found is None:
        return 0, []
    return int(found.group(1)), [piece.strip() for piece in found.group(2).split("...") if piece.strip()]


def test_the_auth_example_runs_line_by_line(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"admin {ADMIN} ops\nnone {APP_A} app-a\n")
    (tmp_path / "role.json").write_text('{"keys": []}')
    cluster = LocalCluster(tmp_path / "c", client_headers={"Authorization": f"Bearer {ADMIN}"})
    cluster.settings["http.auth.tokens_file"] = str(tokens)
    try:
        (node,) = cluster.bootstrap(1)
        env = {
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            "COORDINATED_ENDPOINTS": node.url,
            "COORDINATED_TOKEN": ADMIN,
            "APP_A_TOKEN": APP_A,
            "COORDINATED_TIMEOUT": "5",
            "COORDINATED_LOCAL_DIR": str(tmp_path / "no-local-cluster"),
        }
        lines = example_lines()
        assert len(lines) >= 10
        for line in lines:
            code, reason = expected(line)
            done = subprocess.run(
                ["bash", "-c", line], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False
            )
            output = done.stdout + done.stderr
            assert done.returncode == code, (line, output)
            for piece in reason:
                assert piece in output, (line, piece, output)
            if "whoami" in line:
                assert "app-a" in done.stdout, done.stdout
            if "quota get" in line:
                assert '"keys": 2' in done.stdout and '"max_keys": 2' in done.stdout, done.stdout
    finally:
        cluster.stop_all(graceful=False)
