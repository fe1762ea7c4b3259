"""Layers point one way: no import cycle between the top-level parts of ``otel_blame``, and the
processor imports neither the UI nor the store (the ``serve`` command plugs them in).

Every ``import`` in the package counts, lazy ones inside functions and ``TYPE_CHECKING`` ones
too. ``otel_blame.commands`` and the top-level command group are the composition root: they
may import anything, and nothing imports them."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import otel_blame

PACKAGE = Path(otel_blame.__file__).parent
ROOTS = {"commands", "cli", "console_script", "__main__"}

# Edges that still exist on this branch and are being removed on others (merge them, then delete
# the entry: a stale entry fails the test too).
BEING_MOVED = {
    # the calibration's lazy import of the inject report (attribution's owner)
    ("attribution", "inject"): "attribution/calibration.py",
}


def _part(path: Path) -> str:
    relative = path.relative_to(PACKAGE).parts
    return relative[0] if len(relative) > 1 else relative[0].removesuffix(".py")


def _imported_modules(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
            found += [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
    return found


def import_graph() -> dict[str, dict[str, set[str]]]:
    """part -> imported part -> the files (relative to the package) that import it."""
    graph: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for path in sorted(PACKAGE.rglob("*.py")):
        source = _part(path)
        for module in _imported_modules(ast.parse(path.read_text(encoding="utf-8"))):
            names = module.split(".")
            if names[0] != "otel_blame" or len(names) < 2 or names[1] == source:
                continue
            if (PACKAGE / names[1]).is_dir() or (PACKAGE / f"{names[1]}.py").is_file():
                graph[source][names[1]].add(str(path.relative_to(PACKAGE)))
    return graph


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one part (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(set(edges) | {t for targets in edges.values() for t in targets}):
        if node not in index:
            visit(node)
    return groups


def test_the_graph_sees_lazy_imports() -> None:
    # the ``serve`` command imports the UI inside a function: the walk must see it
    assert "ui" in import_graph()["commands"]


def test_no_cycle_between_the_parts_of_the_package() -> None:
    graph = import_graph()
    for source, target in BEING_MOVED:
        assert target in graph[source], f"{source} -> {target} is gone: delete it from BEING_MOVED"
    edges = {
        source: {target for target in targets if target not in ROOTS and (source, target) not in BEING_MOVED}
        for source, targets in graph.items()
        if source not in ROOTS
    }
    cycles = _cycles(edges)
    detail = {
        " <-> ".join(group): {
            f"{a} -> {b}": sorted(graph[a][b]) for a in group for b in group if b in edges.get(a, ())
        }
        for group in cycles
    }
    assert not cycles, f"import cycles between parts of otel_blame: {detail}"


def test_nothing_below_imports_the_commands() -> None:
    graph = import_graph()
    offenders = {
        source: sorted(targets["commands"]) for source, targets in graph.items() if "commands" in targets
    }
    assert set(offenders) <= ROOTS, offenders


def test_the_processor_imports_neither_the_ui_nor_the_store() -> None:
    graph = import_graph()
    assert not {
        name: sorted(graph["processor"][name]) for name in ("ui", "store") if name in graph["processor"]
    }
