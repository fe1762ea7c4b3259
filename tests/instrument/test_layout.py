"""The instrumentation's shape: no import cycle inside it, hooks on the core only, aliases retired."""

from __future__ import annotations

import ast
import importlib
import sys
import warnings
from pathlib import Path

import pytest

import otel_blame

PACKAGE_ROOT = Path(otel_blame.__file__).parent
INSTRUMENTATION = PACKAGE_ROOT / "instrumentation"
ALIASES = ("otel_blame.instrument", "otel_blame.spans_to_trajectory")
# still on the alias: inject/ belongs to other branches this round (one import line each, to move
# to otel_blame.instrumentation when they merge)
NOT_YET_MOVED: set[str] = set()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, known: set[str]) -> set[str]:
    """Every module ``path`` imports, at the top or inside a function (a lazy import is an import)."""
    found: set[str] = set()
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in known else base)
    return found


def _graph() -> dict[str, set[str]]:
    paths = {_module_name(p): p for p in INSTRUMENTATION.rglob("*.py")}
    known = set(paths)
    return {name: {m for m in _imports(path, known) if m in known} for name, path in paths.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return path[path.index(target) :] + [target]
            if target not in state and (found := visit(target)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_no_import_cycle_inside_the_instrumentation():
    graph = _graph()
    assert "otel_blame.instrumentation.core" in graph
    assert _cycle(graph) is None


def test_the_cycle_check_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_hooks_use_the_core_not_the_public_api():
    graph = _graph()
    hooks = [name for name in graph if name.rpartition(".")[2] in ("_hooks", "_middleware", "_handler")]
    assert len(hooks) == 6
    for name in hooks:
        assert "otel_blame.instrumentation.core" in graph[name], name
        assert not graph[name] & {"otel_blame.instrumentation.api", "otel_blame.instrumentation"}, name


def test_nothing_in_the_package_imports_the_aliases():
    importers = []
    for path in PACKAGE_ROOT.rglob("*.py"):
        if _module_name(path) in ALIASES:
            continue
        if set(ALIASES) & _imports(path, set()):
            importers.append(_module_name(path))
    assert set(importers) <= NOT_YET_MOVED


def test_the_project_s_own_tests_and_benchmarks_import_no_alias():
    """Only this file imports them (to check that they still warn); the rest use the public modules."""
    repo = PACKAGE_ROOT.parent
    importers = [
        str(path.relative_to(repo))
        for directory in (repo / "tests", repo / "bench")
        for path in sorted(directory.rglob("*.py"))
        if path != Path(__file__).resolve() and _aliases_imported(path)
    ]
    assert importers == []


def _aliases_imported(path: Path) -> set[str]:
    """The aliases ``path`` imports, whole (``import otel_blame.instrument``) or in part (``from ...``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found & set(ALIASES)


@pytest.mark.parametrize(
    "alias, public", [(ALIASES[0], "otel_blame.instrumentation"), (ALIASES[1], "otel_blame.conventions")]
)
def test_the_aliases_still_import_and_warn(alias, public, monkeypatch):
    monkeypatch.delitem(sys.modules, alias, raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(alias)
    assert any(issubclass(w.category, DeprecationWarning) and public in str(w.message) for w in caught)
    public_module = importlib.import_module(public)
    for name in module.__all__:
        assert getattr(module, name) is getattr(public_module, name), name
