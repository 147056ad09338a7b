"""The release version moves everything that names it: the chart's version and appVersion, the image's version label
(both recipes), the operator's default image, and every `coordinated-cluster:X.Y.Z` image reference in the repo.
The previous release (compat/previous-release) is a revision of this clone that calls itself another release."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # e2e/release.py: the harness's one reader of both versions

import pytest  # noqa: E402
import yaml  # noqa: E402

from coordinated.operator.spec import DEFAULT_IMAGE  # noqa: E402
from e2e.release import previous_revision, release_version  # noqa: E402

RELEASE = release_version()
IMAGE_REFERENCE = re.compile(r"coordinated-cluster:(\d+\.\d+\.\d+\S*?)(?=[\s\"'`,)\]}]|$)")


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True).stdout


def test_the_chart_and_the_client_follow_the_release_version() -> None:
    chart = yaml.safe_load((REPO / "charts" / "coordinated-cluster" / "Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == (RELEASE, RELEASE)
    # The client's version is read from pyproject.toml's (tests/client/test_package.py), which pins it.
    client = tomllib.loads((REPO / "client" / "pyproject.toml").read_text())["project"]
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert client["dynamic"] == ["version"] and importlib.metadata.version("coordinated-client") == RELEASE
    assert f"coordinated-client=={RELEASE}" in dependencies


def test_both_image_recipes_label_the_image_with_the_release_version() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    assert re.search(rf"^ARG VERSION={re.escape(RELEASE)}$", dockerfile, re.MULTILINE), "the Dockerfile's VERSION"
    assert 'org.opencontainers.image.version="${VERSION}"' in dockerfile
    # The harness labels each image with the version of the checkout it builds, and checks that its installed
    # packages call themselves the same.
    script = (REPO / "e2e" / "lib" / "image.sh").read_text()
    assert '"org.opencontainers.image.version":"\'"$version"\'"' in script
    assert 'version=$(release_version "$src")' in script


@pytest.mark.usefixtures("processes")  # git
def test_every_image_reference_and_the_operators_default_name_the_release() -> None:
    image = f"coordinated-cluster:{RELEASE}"
    assert image == DEFAULT_IMAGE
    stale = []
    for path in git("ls-files", "-z").split("\0"):
        file = REPO / path
        if not path or not file.is_file() or file.is_symlink():
            continue
        try:
            text = file.read_text()
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            stale += [f"{path}:{number}: {m.group(0)}" for m in IMAGE_REFERENCE.finditer(line) if m.group(1) != RELEASE]
    assert stale == [], f"image references that do not name the release {RELEASE}: {stale}"


@pytest.mark.usefixtures("processes")  # git
def test_the_previous_release_is_a_revision_of_this_clone_that_calls_itself_another_release() -> None:
    revision = previous_revision()
    commit = git("rev-parse", "--verify", f"{revision}^{{commit}}").strip()
    previous = tomllib.loads(git("show", f"{commit}:pyproject.toml"))["project"]["version"]
    # The e2e harness tags the previous release's image with its version: the same version would replace ours.
    assert previous != RELEASE, f"the previous release ({commit[:12]}) and this tree both call themselves {RELEASE}"


def test_the_previous_revision_is_the_first_line_that_is_not_a_comment(tmp_path: Path) -> None:
    (tmp_path / "compat").mkdir()
    file = tmp_path / "compat" / "previous-release"
    file.write_text("# the previous release\n\n  # indented comment\n  abc1234  \ndef5678\n")
    assert previous_revision(tmp_path) == "abc1234"
    file.write_text("# only comments\n\n")
    with pytest.raises(ValueError, match="names no revision"):
        previous_revision(tmp_path)
