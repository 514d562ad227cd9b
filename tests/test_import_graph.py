"""No import cycles among the modules of src/inferplex (issue 20).

A cycle means neither module can be read, tested or replaced without the other, and a runtime import
that closes one fails with a half-initialised module depending on which side is imported first. The
graph is built from the source with `ast`, so it sees every import, wherever it is written:
- module level and inside functions alike: an import deferred into a function is still a dependency,
  only one that fails later;
- under `if TYPE_CHECKING:` too: such an import hides a cycle from the interpreter, not from the design,
  and the first runtime use of the name brings it back;
- importing `a.b.c` also imports the packages `a` and `a.b` (their `__init__` runs), so it is an edge to
  each of them as well.

No import is excused: the last two that closed a cycle (the config's check of provider kinds, and the
capability matrix listing every provider) moved to `provider_kinds` and `providers.matrix`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import inferplex

ROOT = Path(inferplex.__file__).parent


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in ROOT.rglob("*.py")}


def _absolute(importer: str, is_package: bool, level: int, module: str | None) -> str:
    """The absolute name a (possibly relative) `from ... import` refers to."""
    if level == 0:
        return module or ""
    base = importer.split(".")
    if not is_package:
        base.pop()
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, module] if module else base)


def _with_parents(name: str, known: dict[str, Path]) -> set[str]:
    """`name` and each package above it, as far as they are modules of ours."""
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & known.keys()


def _nodes(tree: ast.AST, in_function: bool = False) -> list[tuple[ast.AST, bool]]:
    """Every node of `tree`, with whether it sits inside a function."""
    found = []
    for child in ast.iter_child_nodes(tree):
        found.append((child, in_function))
        nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        found += _nodes(child, nested)
    return found


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ours that importing `name` imports, directly."""
    found: set[str] = set()
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    for node, _ in _nodes(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found |= _with_parents(alias.name, known)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(name, is_package, node.level, node.module)
            found |= _with_parents(base, known)
            for alias in node.names:  # `from pkg import submodule`
                if f"{base}.{alias.name}" in known:
                    found.add(f"{base}.{alias.name}")
    found.discard(name)
    # A module's own packages are already being imported when it runs: not edges of its own.
    return found - _with_parents(name, known)


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(name, path, known) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected component of more than one module (Tarjan's algorithm), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
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

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(found)


def test_the_graph_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The builder itself: module-level, function-level, TYPE_CHECKING, relative and package imports."""
    known = {"inferplex.a": Path("a.py"), "inferplex.b": Path("b.py"), "inferplex.p": Path("p/__init__.py")}
    known |= {"inferplex.p.c": Path("p/c.py"), "inferplex": Path("__init__.py")}
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from inferplex.b import X\n"
        "def f():\n    from . import p\n"
        "import inferplex.p.c\n"
    )
    probe = tmp_path / "a.py"
    probe.write_text(source)
    assert imports_of("inferplex.a", probe, known) == {"inferplex.b", "inferplex.p", "inferplex.p.c"}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_there_are_no_import_cycles_in_src() -> None:
    found = cycles(graph())
    assert not found, "import cycles among src/inferplex modules:\n" + "\n".join(" <-> ".join(c) for c in found)
