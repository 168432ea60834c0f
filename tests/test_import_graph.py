"""The project's import graph: no cycle among its modules, and the layers DESIGN.md states.

Every `import` and `from ... import` of the project's packages counts, at module level or
inside a function (a lazy import still ties the two modules together); imports under
`if TYPE_CHECKING:` are left out (they never run).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("schedulers", "engines", "kernels", "experiments")

# Which top-level packages, and which subpackages of experiments/, each may import
# (DESIGN.md, "Layout"). A package may always import itself and anything it lists.
ALLOWED = {
    "schedulers": set(),
    "kernels": set(),
    "engines": {"schedulers", "kernels"},
    "experiments.paths": set(),
    "experiments.user_error": set(),
    "experiments.results": {"experiments.paths", "engines"},  # engines: the record columns
    "experiments.inputs": {"experiments.paths", "experiments.user_error", "experiments.results",
                           "schedulers", "engines"},
    "experiments.report": {"experiments.paths", "experiments.results", "schedulers"},
    "experiments.conformance": {"schedulers", "engines"},
    "experiments.run": {"experiments.paths", "experiments.user_error", "experiments.results",
                        "experiments.inputs",
                        "experiments.report", "schedulers", "engines", "kernels"},
    "experiments.capacity": {"experiments.user_error", "experiments.results", "experiments.run",
                             "experiments.report", "schedulers"},
    "experiments.cli": {"engines", "experiments.user_error", "experiments.run",
                        "experiments.report",
                        "experiments.conformance", "experiments.capacity"},
    "experiments": {"engines"},  # experiments/__init__.py: the compiled core's activation
}


def module_files() -> dict[str, Path]:
    """Every module of the project's packages, by dotted name."""
    out: dict[str, Path] = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        yield from _imports(node)


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules that `name` imports (a `from pkg import sub` names the submodule
    when there is one, else the package)."""
    out: set[str] = set()
    is_package = path.name == "__init__.py"
    for node in _imports(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                       for alias in node.names]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    known = set(files)
    return {name: imported_modules(name, path, known) for name, path in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def layer(module: str) -> str:
    """The key of ALLOWED a module belongs to."""
    parts = module.split(".")
    if parts[-1] == "__main__":
        return "experiments.cli"  # `python -m experiments.X` only calls experiments.cli
    if parts[0] != "experiments":
        return parts[0]
    return ".".join(parts[:2])


def test_the_graph_sees_the_imports() -> None:
    graph = import_graph()
    assert "experiments.run.main" in graph
    assert "engines.engine" in graph["experiments.run.main"]
    assert "schedulers.contract" in graph["engines.engine"]
    # a lazy import inside a function counts
    assert "experiments.report.tables" in graph["experiments.run.callbacks"]


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_among_the_project_modules() -> None:
    assert cycles(import_graph()) == []


def test_every_import_respects_the_layers() -> None:
    wrong = []
    for module, targets in sorted(import_graph().items()):
        own = layer(module)
        assert own in ALLOWED, f"{module}: no layer declared for {own!r} in ALLOWED"
        for target in sorted(targets):
            other = layer(target)
            if other != own and other not in ALLOWED[own]:
                wrong.append(f"{module} -> {target}")
    assert wrong == []
