"""The image's two recipes (the Dockerfile, and e2e/lib/image.sh that mirrors it without a Docker daemon) install
every deployable the docs promise in the image, the Python client included, and rebuild on any of its sources."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
# Everything but the dev and bench tooling: the sidecar, operator and audit job. The application client is a
# distribution of its own (client/), installed beside the project from the same checkout.
EXTRAS = {"operator", "audit"}
CLIENT_FOLDER = "client"


def wheel_folders() -> set[str]:
    """The top-level folders the project wheel's packages come from (core, sidecar, ... tools)."""
    packages = PYPROJECT["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    return {package.split("/", 1)[0] for package in packages}


def test_the_dockerfile_installs_every_runtime_extra_and_copies_every_package() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    assert set(re.findall(r"extras\['(\w+)'\]", dockerfile)) == EXTRAS
    copied = set(re.findall(r"^COPY (\S+)/ \1/$", dockerfile, re.MULTILINE))
    assert wheel_folders() | {CLIENT_FOLDER} <= copied, (wheel_folders() | {CLIENT_FOLDER}) - copied
    assert re.search(rf"pip install --no-deps \./{CLIENT_FOLDER} \.", dockerfile)  # httpx and tenacity with it


def test_the_harness_image_installs_the_same_extras_and_is_rebuilt_when_any_package_changes() -> None:
    script = (REPO / "e2e" / "lib" / "image.sh").read_text()
    extras = re.search(r"^IMAGE_EXTRAS=(\S+)$", script, re.MULTILINE)
    sources = re.search(r'^IMAGE_SOURCES="([^"]+)"$', script, re.MULTILINE)
    assert extras is not None and sources is not None
    assert set(extras.group(1).split(",")) == EXTRAS
    assert f'"${{src}}/{CLIENT_FOLDER}" "${{src}}[$IMAGE_EXTRAS]"' in script  # the client's wheel: the same resolve
    # The cache key hashes these folders: a change to one that is missing (core/ was) kept a stale image.
    assert set(sources.group(1).split()) == wheel_folders() | {CLIENT_FOLDER}
