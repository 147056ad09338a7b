"""The Kubernetes side of the plugin: the kubeconfig (`--kubeconfig`, `--context`, `-n/--namespace`, as kubectl
takes them), a CoordinatedCluster, its pods and its token Secrets, and the one-line message and exit code for
every way the API can refuse."""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import click
import urllib3
import urllib3.exceptions
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from coordinated.ctl.failures import BadInput, Failed, Unreachable, one_line
from coordinated.operator import GROUP, PLURAL, VERSION

R = TypeVar("R")

# The token Secret each kind of command reads: the smallest role that does the job.
READER, WRITER, ADMIN = "reader", "client", "admin"


class NotFound(Failed):
    """An object that does not exist (a cluster, a Secret, a pod): exit 1."""


def api_message(error: ApiException) -> str:
    """The API server's own message (a Status object's `message`), else its reason."""
    try:
        message = json.loads(error.body or "")["message"]
    except (ValueError, KeyError, TypeError):
        message = error.reason or f"HTTP {error.status}"
    return one_line(str(message))


@contextlib.contextmanager
def as_exit_codes(what: str) -> Iterator[None]:
    """Turns an API failure while doing `what` into one line and the documented exit code: 404 exits 1, 401
    and 403 (RBAC) and an unreachable API server exit 3, a refused request (400, 409, 422) exits 1."""
    try:
        yield
    except ApiException as error:
        if error.status == 404:
            raise NotFound(f"{what}: not found ({api_message(error)})") from error
        if error.status in (401, 403):
            raise Unreachable(f"{what}: not allowed: {api_message(error)}") from error
        if error.status == 0 or error.status >= 500:
            raise Unreachable(f"{what}: the Kubernetes API failed: {api_message(error)}") from error
        raise Failed(f"{what}: refused: {api_message(error)}") from error
    except (urllib3.exceptions.HTTPError, OSError) as error:
        raise Unreachable(f"{what}: cannot reach the Kubernetes API: {one_line(str(error))}") from error


@dataclass
class Kube:
    """The API client of one kubeconfig context, and the namespace the commands work in."""

    api: client.ApiClient
    namespace: str

    @classmethod
    def load(cls, kubeconfig: str | None, context: str | None, namespace: str | None) -> Kube:
        try:
            api = config.new_client_from_config(config_file=kubeconfig, context=context)  # type: ignore[no-untyped-call]
            contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)  # type: ignore[no-untyped-call]
        except ConfigException as error:
            if kubeconfig is None and context is None and os.environ.get(config.incluster_config.SERVICE_HOST_ENV_NAME):
                return cls.in_cluster(namespace, error)
            raise BadInput(f"kubeconfig: {one_line(str(error))}") from error
        if not api.configuration.verify_ssl:
            # The kubeconfig's own choice (insecure-skip-tls-verify); kubectl does not warn on every call either.
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        chosen = next((c for c in contexts if c["name"] == context), active) if context else active
        default = (chosen.get("context") or {}).get("namespace") or "default"
        return cls(api, namespace or default)

    @classmethod
    def in_cluster(cls, namespace: str | None, kubeconfig_error: Exception) -> Kube:
        """In a pod with a service account and no kubeconfig, as kubectl does."""
        try:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
        except ConfigException as error:
            raise BadInput(f"no kubeconfig ({one_line(str(kubeconfig_error))}) and not in a pod") from error
        with open(config.incluster_config.SERVICE_TOKEN_FILENAME.replace("token", "namespace")) as file:
            return cls(client.ApiClient(), namespace or file.read().strip())

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def apps(self) -> client.AppsV1Api:
        return client.AppsV1Api(self.api)

    @property
    def batch(self) -> client.BatchV1Api:
        return client.BatchV1Api(self.api)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    def cluster(self, name: str) -> dict[str, Any]:
        with as_exit_codes(f"CoordinatedCluster {self.namespace}/{name}"):
            found = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)
        assert isinstance(found, dict)
        return found

    def patch_cluster(self, name: str, patch: dict[str, Any]) -> None:
        with as_exit_codes(f"CoordinatedCluster {self.namespace}/{name}"):
            self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name, patch)

    def pod_names(self, cluster: str) -> list[str]:
        """The cluster's sidecar pods (voters and non-voters), by ordinal."""
        selector = f"app.kubernetes.io/instance={cluster},app.kubernetes.io/name=coordinated-cluster"
        with as_exit_codes(f"the pods of {self.namespace}/{cluster}"):
            pods = self.core.list_namespaced_pod(self.namespace, label_selector=selector).items
        return sorted((pod for pod in names_of(pods) if is_sidecar_pod(cluster, pod)), key=ordinal_key)

    def token(self, cluster: str, suffix: str) -> str:
        """The token in the Secret `<cluster>-<suffix>` (key `token`)."""
        secret_name = f"{cluster}-{suffix}"
        with as_exit_codes(f"Secret {self.namespace}/{secret_name}"):
            secret = self.core.read_namespaced_secret(secret_name, self.namespace)
        encoded = (secret.data or {}).get("token")
        if not encoded:
            raise Failed(f"Secret {self.namespace}/{secret_name} has no `token` key")
        return base64.b64decode(encoded).decode().strip()


def names_of(items: Iterable[Any]) -> list[str]:
    """The names of listed objects (the generated models type every field as optional)."""
    return [item.metadata.name for item in items if item.metadata is not None and item.metadata.name]


def is_sidecar_pod(cluster: str, pod: str) -> bool:
    return re.fullmatch(rf"{re.escape(cluster)}(-nonvoter)?-\d+", pod) is not None


def ordinal_key(pod: str) -> tuple[int, int]:
    """Voters (`NAME-N`) before non-voters (`NAME-nonvoter-N`), each by ordinal."""
    non_voter, ordinal = "-nonvoter-" in pod, int(pod.rsplit("-", 1)[1])
    return (int(non_voter), ordinal)


# kubectl's connection flags, as (declarations, attributes) of click options.
KUBE_FLAGS: tuple[tuple[tuple[str, ...], dict[str, Any]], ...] = (
    (("--kubeconfig",), {"envvar": "KUBECONFIG", "help": "the kubeconfig file (default: $KUBECONFIG, ~/.kube/config)"}),
    (("--context", "kube_context"), {"help": "the kubeconfig context (default: its current context)"}),
    (("-n", "--namespace"), {"help": "the namespace (default: the context's)"}),
)


def kube_parameters() -> list[click.Parameter]:
    return [click.Option(list(declarations), **attributes) for declarations, attributes in KUBE_FLAGS]


def with_kube(function: Callable[..., R]) -> Callable[..., R]:
    """`function(kube=..., ...)`, called with kubectl's flags instead of `kube`."""

    @functools.wraps(function)
    def wrapper(kubeconfig: str | None, kube_context: str | None, namespace: str | None, **kwargs: Any) -> R:
        # KUBECONFIG may list several files; the library reads one: the first, as kubectl does for writes.
        first = kubeconfig.split(os.pathsep)[0] if kubeconfig else None
        return function(kube=Kube.load(first, kube_context, namespace), **kwargs)

    return wrapper


def kube_options(function: Callable[..., R]) -> Callable[..., R]:
    """kubectl's flags on a click command's function, which gets them as `kube`."""
    wrapper = with_kube(function)
    for declarations, attributes in reversed(KUBE_FLAGS):
        wrapper = click.option(*declarations, **attributes)(wrapper)
    return wrapper
