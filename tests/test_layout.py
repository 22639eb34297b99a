"""The layout holds: installed names are the layout's own, and imports point one way."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYOUT = {"ga", "agent_loop", "llmcore", "tools", "memory", "sop", "frontends"}  # SPEC §1


def test_installed_top_level_names_are_the_layouts_only():
    tomllib = pytest.importorskip("tomllib")
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    installed = set(setup["py-modules"]) | {p.split(".")[0] for p in setup["packages"]}
    assert installed == LAYOUT


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def our_modules() -> dict[str, Path]:
    found = {}
    for top in LAYOUT:
        single = ROOT / f"{top}.py"
        paths = [single] if single.exists() else sorted((ROOT / top).rglob("*.py"))
        found.update({module_name(p): p for p in paths})
    return found


def runs_on_import(node: ast.stmt) -> bool:
    """Not ``if __name__ == "__main__":`` (a script's entry) nor ``if TYPE_CHECKING:``
    (read by type checkers only)."""
    if not isinstance(node, ast.If):
        return True
    test = node.test.left if isinstance(node.test, ast.Compare) else node.test
    return not (isinstance(test, ast.Name) and test.id in ("__name__", "TYPE_CHECKING"))


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Our modules that ``name`` imports anywhere (functions included), as written."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    body = [node for node in tree.body if runs_on_import(node)]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in (n for top in body for n in ast.walk(top)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                      for a in node.names}
    return {m for m in found if m in modules and m != name}


def test_no_module_imports_one_that_imports_it_back():
    modules = our_modules()
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            current = todo.pop()
            if current == goal:
                return True
            if current not in seen:
                seen.add(current)
                todo.extend(graph[current])
        return False

    circles = sorted(f"{a} -> {b} -> … -> {a}" for a, deps in graph.items() for b in deps
                     if reaches(b, a))
    assert len(graph) > 40 and any(graph.values())  # the walk found the code and its imports
    assert circles == []
