"""What the docs show of `kubectl get ccl` is what the CRD prints: README's line once lacked VOTERS."""

from __future__ import annotations

import re

import yaml
from operator_schemas import REPO

CRD = REPO / "crds" / "coordinatedclusters.coordinated.dev.yaml"


def printer_columns(wide: bool) -> list[str]:
    (version,) = yaml.safe_load(CRD.read_text())["spec"]["versions"]
    columns = [c for c in version["additionalPrinterColumns"] if wide or not c.get("priority")]
    return ["NAME", *(column["name"].upper() for column in columns)]


def test_the_documented_kubectl_get_ccl_columns_are_the_crds() -> None:
    readme = (REPO / "README.md").read_text()
    (line,) = re.findall(r"^kubectl get ccl +# (NAME .*)$", readme, re.MULTILINE)
    assert line.split() == printer_columns(wide=False)
    operator_doc = (REPO / "docs" / "operator.md").read_text()
    headers = re.findall(r"^kubectl get ccl( -o wide)?\n# (NAME .*)$", operator_doc, re.MULTILINE)
    assert headers, "docs/operator.md shows no `kubectl get ccl` output"
    for wide, header in headers:
        assert header.split() == printer_columns(wide=bool(wide)), header
