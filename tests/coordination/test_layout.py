"""The shape of the code, kept: no import cycle in the `coordinated` namespace, components that do not
import the coordinator, a coordinator that stays the wiring, one declaration per route, deployables that import
only lower layers (key_names < core < s3 < sidecar, audit < operator, tools < bench, chaos) and read the sidecar
only through its light settings modules, and no loop between the parts of the sidecar or the operator."""

from __future__ import annotations

import ast
import inspect
import sys
from pathlib import Path

from coordinated.coordination.coordinator import Coordinator

REPO = Path(__file__).resolve().parents[2]
ROOTS = ("core", "s3", "sidecar", "operator", "spark-jobs", "tools", "client")
CORE = REPO / "core" / "coordinated" / "coordination"


TOP_PACKAGES = ("bench", "chaos")  # run from the checkout, above every deployable
OWN = ("coordinated", *TOP_PACKAGES)


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for root in ROOTS:
        for path in (REPO / root).rglob("*.py"):
            parts = path.relative_to(REPO / root).with_suffix("").parts
            if parts[0] == "coordinated":
                found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    for package in TOP_PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The tree's modules that a file imports anywhere in it (type-checking and late imports too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(OWN):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.add(full if full in known else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith(OWN))
    return {name for name in found if name in known}


def test_no_import_cycle_in_the_coordinated_namespace() -> None:
    known = modules()
    graph = {name: imports(path, known) - {name} for name, path in known.items()}
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            raise AssertionError("import cycle: " + " -> ".join([*path[path.index(name) :], name]))
        if name in done:
            return
        for imported in sorted(graph[name]):
            visit(imported, [*path, name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])
    assert len(known) > 50, "the namespace was not found"


def test_components_do_not_import_the_coordinator() -> None:
    known = modules()
    for path in CORE.rglob("*.py"):
        if path.name != "coordinator.py":
            assert "coordinated.coordination.coordinator" not in imports(path, known), path.name


def test_the_coordinator_stays_the_wiring_and_no_core_module_grows_past_600_lines() -> None:
    sizes = {str(path.relative_to(CORE)): len(path.read_text().splitlines()) for path in CORE.rglob("*.py")}
    assert sizes["coordinator.py"] <= 800, sizes["coordinator.py"]
    assert all(size <= 600 for name, size in sizes.items() if name != "coordinator.py"), sizes


# What a shell may use of the coordinator: its public methods (events in, `status()` and `next_deadline()` out),
# read off the class so that a new method is allowed and a field or property never is. Its fields (`mode`,
# `applied_state`, ...) and components (`peer_finder`, `lag_detector`, ...) stay behind `status()` and the effects.
COORDINATOR_SHELL_API = {
    name for name, value in vars(Coordinator).items() if not name.startswith("_") and inspect.isfunction(value)
}
SHELL = REPO / "sidecar" / "coordinated" / "sidecar"
SHELLS = (SHELL, REPO / "operator", REPO / "tools", REPO / "bench", REPO / "chaos")
COORDINATOR_NAMES = {"coordinator", "_coordinator"}


def _names_coordinator(node: ast.expr, aliases: set[str]) -> bool:
    """`coordinator`, `_coordinator`, `x.coordinator`, `self._coordinator`, a simulated node's `x.running()`, or
    a name bound to one of them."""
    if isinstance(node, ast.Name):
        return node.id in COORDINATOR_NAMES or node.id in aliases
    if isinstance(node, ast.Call):
        return isinstance(node.func, ast.Attribute) and node.func.attr == "running" and not node.args
    return isinstance(node, ast.Attribute) and node.attr in COORDINATOR_NAMES


def coordinator_attributes(path: Path) -> set[str]:
    """The attributes a file reads off a coordinator: off anything named `coordinator` or `_coordinator`, a
    name assigned one (`core = node.coordinator`), or a name annotated `Coordinator`."""
    tree = ast.parse(path.read_text())
    aliases: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None and "Coordinator" in ast.unparse(node.annotation):
            aliases.add(node.arg)
        elif (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and "Coordinator" in ast.unparse(node.annotation)
        ):
            aliases.add(node.target.id)
    changed = True
    while changed:  # aliases of aliases
        changed = False
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and _names_coordinator(node.value, aliases):
                for target in node.targets:
                    if isinstance(target, ast.Name) and target.id not in aliases:
                        aliases.add(target.id)
                        changed = True
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and _names_coordinator(node.value, aliases)
    }


def shell_files() -> list[Path]:
    return [path for root in SHELLS for path in root.rglob("*.py")]


def test_the_shells_read_the_coordinator_only_through_its_public_methods() -> None:
    assert {"start", "handle_message", "tick", "submit", "stop", "status", "next_deadline"} <= COORDINATOR_SHELL_API
    assert not {"mode", "leader", "applied_state", "settings", "current_term"} & COORDINATOR_SHELL_API
    reached = {
        str(path.relative_to(REPO)): coordinator_attributes(path) - COORDINATOR_SHELL_API for path in shell_files()
    }
    assert {name: sorted(attrs) for name, attrs in reached.items() if attrs} == {}
    assert any(coordinator_attributes(path) for path in shell_files()), "the scan found no coordinator use"


def test_the_scan_catches_a_shell_reading_a_field_or_a_component(tmp_path: Path) -> None:
    sample = tmp_path / "shell.py"
    sample.write_text(
        "def f(node, core: Coordinator | None):\n"
        "    a = node.coordinator.peer_finder.peers, node.coordinator.status(), self._coordinator.mode\n"
        "    c = node.coordinator\n"
        "    d = c\n"
        "    return d.applied_state, core.settings, c.tick(0), sim_node.running().publication\n"
    )
    found = coordinator_attributes(sample) - COORDINATOR_SHELL_API
    assert found == {"peer_finder", "mode", "applied_state", "settings", "publication"}


# -- the sidecar's Node: a boundary like the core's ------------------------------------------------------------
# The client API (web/), its health and the metrics (observability/) read a node through its frozen `status()`,
# `call()` and its key services (`keys`), and through the few services and commands named here; never through its
# fields (its store, history, core, event loop, config): those stay behind `status()`.
NODE_CLIENT_API = {
    "status": "the frozen snapshot of the node (`NodeStatus`)",
    "call": "a client request to the core",
    "keys": "the key services: the applied state they serve, the change log, watch hubs, listings, read barrier",
    "problems": "health's checks, which look at the data directory and so are not part of the snapshot",
    "hooks": "the node's local hooks, which their API registers and lists",
    "metrics": "the Prometheus page, and the request counts the access check adds",
    "record_history": "the history events of the snapshots this node takes and restores",
    "snapshot_secret": "the key that seals this node's snapshots",
    "snapshot_bucket": "a snapshot repository's bucket, on the node's object store",
    "authentication": "who a request is made as, and the tokens file's admins",
    "permissions": "what a principal may do, by the applied roles and role mappings",
    "access_control_off": "why what needs access control is refused now",
}
NODE_SERVICES = {"keys", "hooks", "metrics", "authentication"}  # attributes; every other name above is a method
NODE_READERS = (SHELL / "web", SHELL / "observability")


def _names_node(node: ast.expr, aliases: set[str]) -> bool:
    """A name bound to a Node, `node_of(...)`, or `request.app[NODE_KEY]`."""
    if isinstance(node, ast.Name):
        return node.id in aliases
    if isinstance(node, ast.Call):
        return isinstance(node.func, ast.Name) and node.func.id == "node_of"
    return isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Name) and node.slice.id == "NODE_KEY"


def node_attributes(path: Path) -> set[str]:
    """The attributes a file reads off a sidecar Node, function by function: off a parameter or variable annotated
    `Node`, a name assigned `node_of(request)` (or `request.app[NODE_KEY]`, or such a name), or those calls."""
    found: set[str] = set()
    tree = ast.parse(path.read_text())

    def scan(scope: ast.AST, inherited: set[str]) -> None:
        aliases = set(inherited)
        for node in ast.walk(scope):
            annotation = node.annotation if isinstance(node, ast.arg | ast.AnnAssign) else None
            if annotation is not None and ast.unparse(annotation).strip("'\"").split(" |")[0] == "Node":
                aliases.add(node.arg if isinstance(node, ast.arg) else ast.unparse(node.target))  # type: ignore[union-attr]
        changed = True
        while changed:  # aliases of aliases
            changed = False
            for node in ast.walk(scope):
                if isinstance(node, ast.Assign) and _names_node(node.value, aliases):
                    for target in node.targets:
                        if isinstance(target, ast.Name) and target.id not in aliases:
                            aliases.add(target.id)
                            changed = True
        for node in ast.walk(scope):
            if isinstance(node, ast.Attribute) and _names_node(node.value, aliases):
                found.add(node.attr)

    for statement in tree.body:
        scan(statement, set())
    return found


def node_reader_files() -> list[Path]:
    return [path for root in NODE_READERS for path in sorted(root.rglob("*.py"))]


def test_the_client_api_health_and_metrics_read_the_node_only_through_its_status_call_and_key_services() -> None:
    import dataclasses

    from coordinated.sidecar.node import Node
    from coordinated.sidecar.observability.node_status import NodeStatus

    methods = set(NODE_CLIENT_API) - NODE_SERVICES
    assert all(inspect.isfunction(vars(Node).get(name)) for name in methods), "an allowed method is no method"
    assert all(f"self.{name} = " in inspect.getsource(Node.__init__) for name in NODE_SERVICES)
    assert NodeStatus.__dataclass_params__.frozen and dataclasses.is_dataclass(NodeStatus)  # type: ignore[attr-defined]
    assert inspect.signature(Node.status).return_annotation in (NodeStatus, "NodeStatus")
    reached = {
        str(path.relative_to(REPO)): node_attributes(path) - set(NODE_CLIENT_API) for path in node_reader_files()
    }
    assert {name: sorted(attrs) for name, attrs in reached.items() if attrs} == {}
    used = set().union(*(node_attributes(path) for path in node_reader_files()))
    assert {"status", "call", "keys"} <= used, "the scan found no use of the node"


def test_the_node_scan_catches_a_field_read_through_each_kind_of_name(tmp_path: Path) -> None:
    sample = tmp_path / "handler.py"
    sample.write_text(
        "async def handler(request, query):\n"
        "    node = node_of(request)\n"
        "    same = node\n"
        "    return node.applied_state, same.coordinator.status(), node_of(request).loop, node.status().core\n"
        "def helper(node: Node, other: Node | None) -> None:\n"
        "    node.config.settings, other.persisted, node.keys.listings\n"
        "def middleware(request):\n"
        "    return request.app[NODE_KEY].metrics, request.app[NODE_KEY].history\n"
        "def unrelated(node):\n"
        "    return node.name\n"
    )
    found = node_attributes(sample) - set(NODE_CLIENT_API)
    assert found == {"applied_state", "coordinator", "loop", "config", "persisted", "history"}


# The core does no I/O and holds no shared state: no threads, locks, clocks, sockets, files or processes.
FORBIDDEN_IN_CORE = {"threading", "asyncio", "socket", "time", "os", "subprocess", "pathlib", "multiprocessing"}


def stdlib_imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def test_the_core_imports_no_threading_clock_or_io() -> None:
    used = {
        str(path.relative_to(CORE)): sorted(stdlib_imports(path) & FORBIDDEN_IN_CORE) for path in CORE.rglob("*.py")
    }
    assert {name: found for name, found in used.items() if found} == {}


# The sidecar's modules sit in subpackages by concern; at its top only the node's wiring and entry points.
SIDECAR_TOP_LEVEL = {
    "__init__.py",
    "node.py",
    "cli.py",
    "commands.py",
    "config.py",
    "node_settings.py",
    "node_tool.py",
    "event_loop.py",
    "event_loop_settings.py",
}
SIDECAR_CONCERNS = {"storage", "events", "peers", "web", "features", "observability", "auth"}


def test_the_sidecar_is_grouped_by_concern() -> None:
    top = {path.name for path in SHELL.glob("*.py")}
    folders = {path.name for path in SHELL.iterdir() if path.is_dir() and (path / "__init__.py").exists()}
    assert top - SIDECAR_TOP_LEVEL == set(), "put a new sidecar module in the subpackage of its concern"
    assert folders == SIDECAR_CONCERNS


# -- the client API: one declaration per route ---------------------------------------------------------------
# Each route's facts (method, path, parameters, privilege, body, answer, errors) are written once, in its
# `Route` declaration beside its handler; registration, the parameter check, the access rule and the OpenAPI
# document are derived from the declarations. The rules below keep it so.

WEB = SHELL / "web"
REGISTRATION = WEB / "app.py"  # the one place routes are registered and their parameters checked
ROUTER_CALLS = {"add_get", "add_put", "add_post", "add_delete", "add_patch", "add_head", "add_route", "add_view"}
PRIVILEGE_HOMES = {WEB / "privileges.py", REGISTRATION}  # the privileges' definitions; the no-route default


def calls_named(path: Path, names: set[str]) -> list[str]:
    """The calls in a file to a function or method of one of `names`, each as `name:line`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in names:
                found.append(f"{name}:{node.lineno}")
    return found


def web_files() -> list[Path]:
    return sorted(WEB.glob("*.py"))


def test_client_routes_are_registered_and_their_parameters_checked_only_from_their_declarations() -> None:
    def calls_by_file(names: set[str]) -> dict[str, list[str]]:
        found = {str(path.relative_to(REPO)): calls_named(path, names) for path in web_files()}
        return {name: [call.split(":")[0] for call in calls] for name, calls in found.items() if calls}

    registration = str(REGISTRATION.relative_to(REPO))
    assert calls_by_file(ROUTER_CALLS) == {registration: ["add_get", "add_route"]}
    assert calls_by_file({"check_params"}) == {registration: ["check_params"]}


def string_constants(path: Path) -> list[str]:
    return [
        node.value
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]


def test_each_route_path_is_written_once() -> None:
    """No second table keyed by path (a role table, a list of documented operations, a registration list):
    each declared path appears as a string once in the sidecar, in its declaration."""
    from coordinated.sidecar.web.route_table import ENDPOINTS

    paths = {endpoint.route.path for endpoint in ENDPOINTS if endpoint.route.path != "/"}
    written = [value for path in SHELL.rglob("*.py") for value in string_constants(path) if value in paths]
    declared = [endpoint.route.path for endpoint in ENDPOINTS if endpoint.route.path != "/"]
    assert sorted(written) == sorted(declared), "a route path is written outside its declaration"
    assert len(paths) > 20, "the route table was not found"


def privileges_outside_declarations(path: Path) -> list[int]:
    """The lines where a file names a `Privilege.X` other than as an argument of a `Route(...)` declaration."""
    tree = ast.parse(path.read_text())
    in_routes = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Route"
        for inner in ast.walk(node)
    }
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "Privilege"
        and id(node) not in in_routes
    ]


def test_a_routes_access_rule_is_its_declared_privilege() -> None:
    found = {
        str(path.relative_to(REPO)): privileges_outside_declarations(path)
        for path in SHELL.rglob("*.py")
        if path not in PRIVILEGE_HOMES
    }
    assert {name: lines for name, lines in found.items() if lines} == {}


def query_reads(paths: list[Path]) -> dict[str, set[str]]:
    """The query parameters each module-level function of `paths` reads by name itself: `query["x"]`,
    `query.get("x")`, `"x" in query`, `request.query.getall("x")`, or `f(query, "x")` (as `param_bool` reads).
    A shared helper that reads a choice of names (`timeout_of`: `timeout` or `master_timeout`) is not counted
    for its callers, since a route may take only one of them."""
    found: dict[str, set[str]] = {}
    for path in paths:
        for function in ast.parse(path.read_text()).body:
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            reads = found.setdefault(function.name, set())
            for node in ast.walk(function):
                if isinstance(node, ast.Subscript) and _is_query(node.value) and _text(node.slice):
                    reads.add(_text(node.slice))
                elif isinstance(node, ast.Compare) and _text(node.left) and any(map(_is_query, node.comparators)):
                    reads.add(_text(node.left))
                elif isinstance(node, ast.Call):
                    func, args = node.func, node.args
                    if isinstance(func, ast.Attribute) and _is_query(func.value) and args and _text(args[0]):
                        reads.add(_text(args[0]))
                    elif len(args) > 1 and _is_query(args[0]) and _text(args[1]):
                        reads.add(_text(args[1]))
    return found


def _is_query(node: ast.expr) -> bool:
    """`query`, or `request.query`."""
    return (isinstance(node, ast.Name) and node.id == "query") or (
        isinstance(node, ast.Attribute) and node.attr == "query"
    )


def _text(node: ast.expr) -> str:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ""


def test_every_handler_is_declared_and_reads_only_the_parameters_its_routes_declare() -> None:
    from coordinated.sidecar.web.route_table import ENDPOINTS, RESOURCES

    reads = query_reads(web_files())
    declared: dict[str, set[str]] = {}
    for endpoint in ENDPOINTS:
        params = {param.name for param in endpoint.route.params} if endpoint.route.check_params else set()
        name = endpoint.handler.__name__
        declared[name] = declared.get(name, params) & params  # a handler of several routes: what all declare
    undeclared = {name: sorted(reads[name] - params) for name, params in declared.items() if reads[name] - params}
    assert undeclared == {}, "a handler reads a query parameter that its route does not declare"
    handlers = {
        function.name
        for module in RESOURCES
        for function in ast.parse(Path(str(module.__file__)).read_text()).body
        if isinstance(function, ast.AsyncFunctionDef)
        and [arg.arg for arg in function.args.args] == ["request", "query"]
    }
    assert handlers == set(declared), "a handler without a declaration, or a declared handler outside a resource"
    assert {"metadata_put", "metadata_watch", "snapshot_restore"} <= handlers


def test_the_route_scans_catch_a_second_table_an_undeclared_parameter_and_a_privilege_outside_a_route(
    tmp_path: Path,
) -> None:
    sample = tmp_path / "resource.py"
    sample.write_text(
        "RULES = {('GET', '/_cluster/health'): Privilege.MONITOR}\n"
        "@routes.add(Route('GET', '/x', 's', Privilege.READ, T, params=(LOCAL,)))\n"
        "async def handler(request, query):\n"
        "    router.add_get('/y', handler)\n"
        "    check_params(request, {'local'})\n"
        "    a, b = query.get('local'), timeout_of(query)\n"
        "    return param_bool(query, 'stream', False), 'prefix' in query, request.query.getall('after')\n"
        "def timeout_of(query):\n"
        "    return query['timeout']\n"
    )
    assert calls_named(sample, ROUTER_CALLS) == ["add_get:4"]
    assert calls_named(sample, {"check_params"}) == ["check_params:5"]
    assert "/_cluster/health" in string_constants(sample)
    assert privileges_outside_declarations(sample) == [1]
    assert query_reads([sample])["handler"] == {"local", "stream", "prefix", "after"}


# -- the core: one descriptor per client request -------------------------------------------------------------
# Each request type is declared beside what the core does with it (its `Action`, in the same module of
# `coordination/requests/`); the routing, the master's check, the priorities, the executors and the wire's union
# of request types are read from the registry. So no other core module names a request type.

REQUESTS = CORE / "requests"
# The session leases tell an ended session from an expired one by the task that ended it.
NAMES_A_REQUEST_TYPE = {CORE / "sessions.py": {"SessionEnd"}}


def request_classes(path: Path) -> set[str]:
    """The classes a file declares as client requests (`class X(ClientRequest[...])`)."""
    return {
        node.name
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and any(ast.unparse(base).startswith("ClientRequest[") for base in node.bases)
    }


def imported_names(path: Path, module_prefix: str) -> set[str]:
    return {
        alias.name
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(module_prefix)
        for alias in node.names
    }


def test_every_request_type_is_registered_with_its_action_beside_it() -> None:
    from coordinated.coordination.client import answer_types
    from coordinated.coordination.requests import ACTIONS, DOMAINS

    declared = {(path.stem, name) for path in CORE.rglob("*.py") for name in request_classes(path)}
    registered = {
        (domain.__name__.rsplit(".", 1)[1], action.request.__name__) for domain in DOMAINS for action in domain.ACTIONS
    }
    assert declared == registered, "a request type without an Action in its own module, or one elsewhere"
    assert all(action.request.__module__ == domain.__name__ for domain in DOMAINS for action in domain.ACTIONS)
    assert len(ACTIONS) == len(registered) >= 15
    assert all(answer_types(request) for request in ACTIONS)


def test_no_core_module_outside_the_requests_names_a_request_type() -> None:
    from coordinated.coordination.requests import ACTIONS

    types = {request.__name__ for request in ACTIONS}
    named = {
        path: imported_names(path, "coordinated.coordination.requests") & types
        for path in CORE.rglob("*.py")
        if REQUESTS not in path.parents
    }
    assert {str(path.relative_to(CORE)): sorted(names) for path, names in named.items() if names} == {
        str(path.relative_to(CORE)): sorted(names) for path, names in NAMES_A_REQUEST_TYPE.items()
    }


def test_a_shells_call_is_one_signature_typed_by_the_request() -> None:
    import typing

    from coordinated.sidecar.node import Node

    assert typing.get_overloads(Node.call) == []
    assert "ClientRequest[R]" in str(inspect.signature(Node.call).parameters["request"].annotation)


def test_the_request_scans_catch_an_unregistered_type_and_a_type_named_outside(tmp_path: Path) -> None:
    sample = tmp_path / "elsewhere.py"
    sample.write_text(
        "from coordinated.coordination.requests.keys import KvPut, barrier_answer\n"
        "class KvTouch(ClientRequest[Committed], frozen=True, tag='touch'):\n"
        "    key: str\n"
        "class Other(msgspec.Struct):\n"
        "    pass\n"
    )
    assert request_classes(sample) == {"KvTouch"}
    assert imported_names(sample, "coordinated.coordination.requests") == {"KvPut", "barrier_answer"}


# -- the layers between deployables ---------------------------------------------------------------------------
# Each module belongs to one deployable, by the folder it is in; the key-name rules, which the client's
# distribution ships so that it installs alone, are a layer of their own. A module imports modules of its own
# deployable or of lower layers only; the deployables of one layer are independent of each other, but for the
# deliberate edges named below. Late and type-checking imports count too.
FOLDER_DEPLOYABLES = {
    "core": "core",
    "client": "client",
    "s3": "s3",
    "sidecar": "sidecar",
    "spark-jobs": "audit",
    "operator": "operator",
    "tools": "tools",
    "bench": "bench",
    "chaos": "chaos",
}
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"key_names"}),
    frozenset({"core", "client"}),
    frozenset({"s3"}),  # the S3 client of the sidecar and the audit
    frozenset({"sidecar", "audit"}),
    frozenset({"operator", "tools"}),
    frozenset({"bench", "chaos"}),
)
# (importing module or package, imported module or package) -> why the edge is there.
DELIBERATE_EDGES = {
    ("coordinated.kubectl", "coordinated.operator"): (
        "the kubectl plugin works on CoordinatedCluster resources with the operator's own types: the CRD's group, "
        "version and annotations, ClusterSpec, the snapshot volume's mount path and the S3 connection"
    ),
}


def deployable_of(name: str, path: Path) -> str:
    if name == "coordinated.key_names":
        return "key_names"
    return FOLDER_DEPLOYABLES[path.relative_to(REPO).parts[0]]


def layer_of(deployable: str) -> int:
    return next(index for index, layer in enumerate(LAYERS) if deployable in layer)


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def layer_violations(
    graph: dict[str, set[str]], deployables: dict[str, str], deliberate: dict[tuple[str, str], str]
) -> list[str]:
    """Each import of a higher layer, or of another deployable of the same layer that is no deliberate edge."""
    found = []
    for name, imported in sorted(graph.items()):
        for other in sorted(imported):
            mine, theirs = deployables[name], deployables[other]
            if mine == theirs or layer_of(theirs) < layer_of(mine):
                continue
            if layer_of(theirs) == layer_of(mine) and any(
                _within(name, source) and _within(other, target) for source, target in deliberate
            ):
                continue
            kind = "a higher layer" if layer_of(theirs) > layer_of(mine) else "a sibling"
            found.append(f"{name} ({mine}) imports {other} ({theirs}, {kind})")
    return found


def import_graph() -> tuple[dict[str, set[str]], dict[str, str]]:
    """Each module's imports of the tree, and each module's deployable."""
    known = modules()
    graph = {name: imports(path, known) - {name} for name, path in known.items()}
    return graph, {name: deployable_of(name, path) for name, path in known.items()}


def test_no_deployable_imports_a_higher_layer_or_a_sibling() -> None:
    graph, deployables = import_graph()
    assert set(deployables.values()) == {name for layer in LAYERS for name in layer}, "a deployable without a layer"
    assert layer_violations(graph, deployables, DELIBERATE_EDGES) == []


def test_each_deliberate_edge_is_used() -> None:
    graph, _ = import_graph()
    for source, target in DELIBERATE_EDGES:
        assert any(
            _within(name, source) and any(_within(other, target) for other in imported)
            for name, imported in graph.items()
        ), f"{source} no longer imports {target}: remove the edge"


def part_edges(graph: dict[str, set[str]], part_of: dict[str, str]) -> set[tuple[str, str]]:
    """The imports between the parts of a package (its subpackages, and each module at its top), as a drawing of
    it by folder shows them."""
    return {
        (part_of[name], part_of[other])
        for name, imported in graph.items()
        if name in part_of
        for other in imported
        if other in part_of and part_of[other] != part_of[name]
    }


def loops(edges: set[tuple[str, str]]) -> list[list[str]]:
    """Loops of `edges`, each as the parts along it (at least one per set of parts that import each other)."""
    found, done = [], set()

    def visit(part: str, path: list[str]) -> None:
        if part in path:
            found.append([*path[path.index(part) :], part])
            return
        if part in done:
            return
        for source, target in sorted(edges):
            if source == part:
                visit(target, [*path, part])
        done.add(part)

    for part in sorted({source for source, _ in edges}):
        visit(part, [])
    return found


def parts_of(package: str, known: dict[str, Path]) -> dict[str, str]:
    """Module -> its part of `package`: `web/` for coordinated.sidecar.web.keys, `node.py` for the node."""
    prefix = package + "."
    found = {}
    for name, path in known.items():
        if name.startswith(prefix):
            rest = name[len(prefix) :].split(".")
            found[name] = f"{rest[0]}/" if len(rest) > 1 or path.name == "__init__.py" else f"{rest[0]}.py"
    return found


# Imports between the sidecar's parts that run against the others, until the tokens move to the access control's
# own package: these and no other. (The store no longer imports the history: the node hands the history's reader
# to its store, so `storage/` -> `events/` would close a loop with the history's use of the durable files.)
KNOWN_SIDECAR_BACK_EDGES = {
    ("node.py", "web/"): "the node reads the tokens file (web/access) and frames streamed watches (web/http_chunks)",
}


def test_the_sidecar_and_the_operator_have_no_loop_between_their_parts() -> None:
    known = modules()
    graph = {name: imports(path, known) - {name} for name, path in known.items()}
    operator = part_edges(graph, parts_of("coordinated.operator", known))
    assert len(operator) > 20 and loops(operator) == []
    sidecar = part_edges(graph, parts_of("coordinated.sidecar", known))
    assert len(sidecar) > 20 and loops(sidecar - set(KNOWN_SIDECAR_BACK_EDGES)) == []
    gone = set(KNOWN_SIDECAR_BACK_EDGES) - sidecar
    assert gone == set(), f"{gone} no longer import: remove them from KNOWN_SIDECAR_BACK_EDGES"


def test_the_layer_and_loop_scans_catch_an_upward_import_a_sibling_and_a_loop() -> None:
    deployables = {"core.a": "core", "sidecar.b": "sidecar", "audit.c": "audit", "operator.d": "operator"}
    graph = {"core.a": {"sidecar.b"}, "sidecar.b": {"audit.c", "core.a"}, "audit.c": set(), "operator.d": {"audit.c"}}
    assert layer_violations(graph, deployables, {}) == [
        "core.a (core) imports sidecar.b (sidecar, a higher layer)",
        "sidecar.b (sidecar) imports audit.c (audit, a sibling)",
    ]
    assert layer_violations(graph, deployables, {("sidecar", "audit.c"): "why"})[1:] == []
    parts = {"p.web.x": "web/", "p.web.y": "web/", "p.node": "node.py", "p.config": "config.py"}
    graph = {"p.web.x": {"p.node", "p.web.y"}, "p.node": {"p.config"}, "p.config": {"p.web.y"}, "p.web.y": set()}
    edges = part_edges(graph, parts)
    assert edges == {("web/", "node.py"), ("node.py", "config.py"), ("config.py", "web/")}
    assert loops(edges) == [["config.py", "web/", "node.py", "config.py"]]
    assert loops(edges - {("config.py", "web/")}) == []


# -- what other deployables read of the sidecar: its settings --------------------------------------------------
# Every setting of the sidecar and the S3 client is declared in a light `*_settings` module (`node_settings`
# collects them), so that the operator validates and documents them, and writes them into pods, without importing
# the sidecar. A light module imports the core, other light modules of the tree, and the standard library but for
# its network, event-loop, thread and process modules: no third-party package, none of the node's I/O.
IO_MODULES = frozenset(
    {"asyncio", "socket", "selectors", "threading", "multiprocessing", "concurrent", "subprocess", "http", "urllib"}
)
SETTINGS_PACKAGES = ("coordinated.sidecar", "coordinated.s3")
SETTING_MAKERS = frozenset(
    {"Setting", "SettingsRule", "time_setting", "size_setting", "int_setting", "bool_setting", "enum_setting"}
)


# (operator module, sidecar module) -> why the operator reads more of the sidecar than its settings.
OPERATOR_READS_OF_THE_SIDECAR = {
    ("coordinated.operator.reconcile.service_account_keys", "coordinated.sidecar.auth.service_accounts"): (
        "the operator checks the signing-keys file it writes with the parser the sidecars read it with"
    ),
}


def outside_imports(path: Path) -> set[str]:
    """The top-level names of what a file imports (anywhere in it) from outside the tree."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return {name for name in found if name not in OWN and name != "__future__"}


def light_modules(graph: dict[str, set[str]], outside: dict[str, set[str]]) -> set[str]:
    """The modules that import, also through the tree's modules they import, no I/O and no third-party package
    (the core's own packages aside: it is the layer below)."""
    light = {
        name
        for name in graph
        if _within(name, "coordinated.coordination")
        or all(module in sys.stdlib_module_names and module not in IO_MODULES for module in outside[name])
    }
    changed = True
    while changed:
        heavy = {name for name in light if not _within(name, "coordinated.coordination") and not graph[name] <= light}
        light -= heavy
        changed = bool(heavy)
    return light


def declared_settings(path: Path) -> list[str]:
    """The names a module assigns a setting or a rule between settings to, at its top level."""
    found: list[str] = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign):
            value, targets = node.value, node.targets
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            value, targets = node.value, [node.target]
        else:
            continue
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in SETTING_MAKERS:
            found.extend(target.id for target in targets if isinstance(target, ast.Name))
    return found


def is_settings_module(name: str) -> bool:
    return name.rsplit(".", 1)[-1].endswith("_settings")


def test_settings_are_declared_in_light_settings_modules_and_the_operator_reads_only_those() -> None:
    known = modules()
    graph = {name: imports(path, known) - {name} for name, path in known.items()}
    light = light_modules(graph, {name: outside_imports(path) for name, path in known.items()})
    ours = [name for name in known if any(_within(name, package) for package in SETTINGS_PACKAGES)]
    outside_settings = {
        name: declared for name in ours if not is_settings_module(name) and (declared := declared_settings(known[name]))
    }
    assert outside_settings == {}, "declare a setting in the *_settings module beside its reader"
    heavy = sorted(name for name in ours if is_settings_module(name) and name not in light)
    assert heavy == [], "a settings module imports I/O or a third-party package, itself or through another"
    read = {
        (name, other)
        for name in known
        if _within(name, "coordinated.operator")
        for other in graph[name]
        if any(_within(other, package) for package in SETTINGS_PACKAGES) and not is_settings_module(other)
    }
    assert read == set(OPERATOR_READS_OF_THE_SIDECAR), (
        "the operator reads the sidecar's and the S3 client's settings modules only"
    )
    assert {"coordinated.sidecar.node_settings", "coordinated.sidecar.peers.tls_settings"} <= light


def test_the_settings_scans_catch_a_setting_elsewhere_and_a_heavy_settings_module(tmp_path: Path) -> None:
    sample = tmp_path / "transport.py"
    sample.write_text(
        "import aiohttp\nfrom x import Setting\nLIMIT: Setting[int] = Setting('a', T, 1, 'd')\n"
        "TIMEOUT = time_setting('b', '1s', doc='d')\nRULE = SettingsRule('d', check)\nOTHER = max(1, 2)\n"
    )
    assert declared_settings(sample) == ["LIMIT", "TIMEOUT", "RULE"]
    assert outside_imports(sample) == {"aiohttp", "x"}
    graph = {"a_settings": {"b_settings"}, "b_settings": {"c"}, "c": set(), "d_settings": set()}
    outside = {"a_settings": {"re"}, "b_settings": {"dataclasses"}, "c": {"asyncio"}, "d_settings": {"yaml"}}
    assert light_modules(graph, outside) == set()
    assert light_modules(graph, {**outside, "c": {"os"}}) == {"a_settings", "b_settings", "c"}
