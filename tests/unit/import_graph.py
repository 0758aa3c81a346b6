"""The structure drawing: the import graph of the package (plugins/delivery_semantics) and of the
Spark application (spark_apps), read from the source with `ast`, imports inside functions (lazy)
told apart from those at import time. It names the arrows that run back up a floor, the imports
from the package into the application, and the import cycles.

    .venv/bin/python tests/unit/import_graph.py     # prints the drawing's numbers
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "delivery_semantics"

# Bottom to top. A module belongs to the floor of its longest prefix here.
FLOORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("records", ("records", "locations")),
    (
        "catalog",
        (
            "errors",
            "clients",
            "catalog",
            "rule_catalog",
            "client_settings",
            "mode_files",
            "modes",
            "files",
            "teams",
            "matrix",
            "forms",
        ),
    ),
    ("plumbing", ("plumbing",)),
    ("history", ("history",)),
    ("workload", ("workload", "faults")),
    ("audit", ("audit",)),
    ("reporting", ("reporting",)),
    ("entry", ("entry",)),
)


def modules() -> dict[str, Path]:
    found = {}
    for root in (REPO / "plugins", REPO / "spark_apps"):
        for path in root.rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            if root.name == "plugins" and not name.startswith(PACKAGE):
                continue
            found[name] = path
    return found


def edges(mods: dict[str, Path] | None = None) -> dict[str, dict[str, bool]]:
    """module -> {module it imports: True when every such import is lazy (inside a function)}."""
    mods = mods or modules()
    graph: dict[str, dict[str, bool]] = {}
    for name, path in mods.items():
        out = graph.setdefault(name, {})
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]

        def add(target: str, lazy: bool, out=out, name=name) -> None:
            while target and target not in mods:
                target = target.rpartition(".")[0]
            if target and target != name:
                out[target] = out.get(target, True) and lazy

        def visit(node: ast.AST, lazy: bool, package=package, add=add) -> None:
            for child in ast.iter_child_nodes(node):
                inner = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                    continue
                if isinstance(child, ast.Import):
                    for alias in child.names:
                        add(alias.name, inner)
                elif isinstance(child, ast.ImportFrom):
                    base = child.module or ""
                    if child.level:
                        parent = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                        base = ".".join([*parent, *([base] if base else [])])
                    for alias in child.names:
                        full = f"{base}.{alias.name}"
                        add(full if full in mods else base, inner)
                visit(child, inner)

        visit(ast.parse(path.read_text()), False)
    return graph


def floor(module: str) -> int | None:
    if not module.startswith(PACKAGE + "."):
        return None
    rest = module[len(PACKAGE) + 1 :]
    best: tuple[int, int] | None = None
    for i, (_, prefixes) in enumerate(FLOORS):
        for p in prefixes:
            if (rest == p or rest.startswith(p + ".")) and (best is None or len(p) > best[1]):
                best = (i, len(p))
    return best[0] if best else None


def upward(graph: dict[str, dict[str, bool]]) -> list[tuple[str, str, bool]]:
    """Imports from a floor to a higher one: (importer, imported, lazy)."""
    out = []
    for a, targets in graph.items():
        for b, lazy in targets.items():
            fa, fb = floor(a), floor(b)
            if fa is not None and fb is not None and fb > fa:
                out.append((a, b, lazy))
    return sorted(out)


def into_application(graph: dict[str, dict[str, bool]]) -> list[tuple[str, str]]:
    return sorted((a, b) for a, t in graph.items() if a.startswith(PACKAGE) for b in t if not b.startswith(PACKAGE))


def cycles(graph: dict[str, dict[str, bool]], lazy: bool) -> list[list[str]]:
    """The import cycles (strongly connected components of two or more modules), counting lazy
    imports or not (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root].items()))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w, is_lazy in it:
                if is_lazy and not lazy:
                    continue
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(graph[w].items())))
                    advanced = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
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
    return found


def main() -> None:
    graph = edges()
    short = lambda m: m.removeprefix(PACKAGE + ".")
    ups = upward(graph)
    print(f"arrows back up a floor: {len(ups)}")
    for a, b, lazy in ups:
        print(f"  {short(a)} ({FLOORS[floor(a)][0]}) -> {short(b)} ({FLOORS[floor(b)][0]}){' lazy' if lazy else ''}")
    print(f"package -> Spark application: {len(into_application(graph))}")
    for kind, lazy in (("at import time", False), ("with lazy imports", True)):
        found = cycles(graph, lazy)
        print(f"import cycles {kind}: {len(found)} ({', '.join(str(len(c)) + ' modules' for c in found) or 'none'})")
        for c in found:
            print("  " + ", ".join(map(short, c)))


if __name__ == "__main__":
    main()
