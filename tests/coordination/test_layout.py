"""The shape of the code, kept: no import cycle in the `coordinated` namespace, components that do not
import the coordinator, and a coordinator that stays the wiring."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from coordinated.coordination.coordinator import Coordinator

REPO = Path(__file__).resolve().parents[2]
ROOTS = ("core", "sidecar", "operator", "spark-jobs", "tools", "client")
CORE = REPO / "core" / "coordinated" / "coordination"


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for root in ROOTS:
        for path in (REPO / root).rglob("*.py"):
            parts = path.relative_to(REPO / root).with_suffix("").parts
            if parts[0] == "coordinated":
                found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The `coordinated` modules that a file imports anywhere in it (type-checking and late imports too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("coordinated"):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.add(full if full in known else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("coordinated"))
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
    for path in CORE.glob("*.py"):
        if path.name != "coordinator.py":
            assert "coordinated.coordination.coordinator" not in imports(path, known), path.name


def test_the_coordinator_stays_the_wiring_and_no_core_module_grows_past_600_lines() -> None:
    sizes = {path.name: len(path.read_text().splitlines()) for path in CORE.glob("*.py")}
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
    used = {path.name: sorted(stdlib_imports(path) & FORBIDDEN_IN_CORE) for path in CORE.glob("*.py")}
    assert {name: found for name, found in used.items() if found} == {}


# The sidecar's modules sit in subpackages by concern; at its top only the node's wiring and entry points.
SIDECAR_TOP_LEVEL = {"__init__.py", "node.py", "cli.py", "config.py", "node_tool.py", "event_loop.py"}
SIDECAR_CONCERNS = {"storage", "events", "peers", "web", "features", "s3", "observability"}


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
