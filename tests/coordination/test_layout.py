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
