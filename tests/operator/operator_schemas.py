"""Offline JSON schemas for kubeconform, generated from files fetched through the Go module proxy.

- built-in kinds: from the Kubernetes OpenAPI v2 spec (`api/openapi-spec/swagger.json` of k8s.io/kubernetes);
- custom kinds: from CRD manifests (ours, and the Prometheus Operator's for the ServiceMonitor).

Files are written as `<kind>-<group prefix>-<version>.json` so kubeconform finds them with
`-schema-location 'DIR/{{ .ResourceKind }}{{ .KindSuffix }}.json'`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
SCHEMA_LOCATION_TEMPLATE = "{{ .ResourceKind }}{{ .KindSuffix }}.json"

INT_OR_STRING = {"oneOf": [{"type": "string"}, {"type": "integer"}]}
QUANTITY = {"oneOf": [{"type": "string"}, {"type": "number"}]}


def schema_file_name(api_version: str, kind: str) -> str:
    group, _, version = api_version.rpartition("/")
    suffix = f"-{group.split('.')[0].lower()}-{version}" if group else f"-{version}"
    return f"{kind.lower()}{suffix}.json"


def _strictify(schema: Any, *, nullable_key: bool) -> Any:
    """Closes objects (strict mode) and maps OpenAPI-only notions onto JSON Schema."""
    if isinstance(schema, list):
        return [_strictify(item, nullable_key=nullable_key) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if schema.get("format") == "int-or-string" or schema.get("x-kubernetes-int-or-string"):
        return dict(INT_OR_STRING)
    result = {key: _strictify(value, nullable_key=nullable_key) for key, value in schema.items()}
    if "properties" in schema and isinstance(schema["properties"], dict):
        result["properties"] = {
            name: _strictify(value, nullable_key=nullable_key) for name, value in schema["properties"].items()
        }
        if "additionalProperties" not in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
            result["additionalProperties"] = False
    if nullable_key and schema.get("nullable") and isinstance(schema.get("type"), str):
        result["type"] = [schema["type"], "null"]
    return result


def _references(schema: Any) -> Iterable[str]:
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/definitions/"):
            yield ref.removeprefix("#/definitions/")
        for value in schema.values():
            yield from _references(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _references(item)


def builtin_schemas(swagger: Mapping[str, Any], wanted: set[tuple[str, str]]) -> dict[str, Any]:
    """{file name: schema} for the wanted (apiVersion, kind) pairs found in the OpenAPI spec."""
    definitions = swagger["definitions"]
    converted: dict[str, Any] = {}
    for name, definition in definitions.items():
        for gvk in definition.get("x-kubernetes-group-version-kind", ()):
            api_version = f"{gvk['group']}/{gvk['version']}" if gvk["group"] else gvk["version"]
            if (api_version, gvk["kind"]) not in wanted:
                continue
            needed, queue = {name}, [name]
            while queue:
                for ref in _references(definitions[queue.pop()]):
                    if ref not in needed:
                        needed.add(ref)
                        queue.append(ref)
            local = {}
            for ref in needed:
                local[ref] = (
                    dict(QUANTITY)
                    if ref.endswith("api.resource.Quantity")
                    else _strictify(definitions[ref], nullable_key=False)
                )
            root = dict(local[name])
            root["definitions"] = local
            converted[schema_file_name(api_version, gvk["kind"])] = root
    return converted


def crd_schemas(crd_documents: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    converted = {}
    for crd in crd_documents:
        if not crd or crd.get("kind") != "CustomResourceDefinition":
            continue
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            schema = _strictify(version["schema"]["openAPIV3Schema"], nullable_key=True)
            # kubeconform checks the whole object; metadata is the API server's, left open.
            schema.setdefault("properties", {})["metadata"] = {"type": "object"}
            converted[schema_file_name(f"{group}/{version['name']}", kind)] = schema
    return converted


def load_yaml_documents(paths: Iterable[Path]) -> list[dict[str, Any]]:
    documents = []
    for path in paths:
        documents.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    return documents


def write_schemas(target: Path, schemas: Mapping[str, Any]) -> Path:
    target.mkdir(parents=True, exist_ok=True)
    for file_name, schema in schemas.items():
        (target / file_name).write_text(json.dumps(schema))
    return target
