"""The shape of the code under src/: the longest functions, the longest parameter lists, and the
loops and upward arrows of the import graph (issue 19's "before and after").

    python tools/code_shape.py            # the three tables
    python tools/code_shape.py --check    # exit 1 on an import loop or an arrow from the core up

An import is an edge from the importing module to the imported one, wherever it is written
(module level, inside a function, under ``TYPE_CHECKING``: a function-level import hides a loop,
it does not remove it). A module's edge to a package goes to the package's ``__init__``. Loops
are the strongly connected components of more than one module (Tarjan).
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "memcalc"

LAYERS = (
    (
        "memcalc.errors",
        "memcalc.units",
        "memcalc.validate",
        "memcalc.files",
        "memcalc.resources",
        "memcalc.install_hints",
        "memcalc.dtypes",
        "memcalc.periodic",
        "memcalc.alloc_conf",
    ),
    ("memcalc.spec", "memcalc.profiles", "memcalc.frameworks", "memcalc.configs"),
    ("memcalc.graph",),
    ("memcalc.params", "memcalc.optimizer", "memcalc.strategies"),
    ("memcalc.timeline", "memcalc.steptime", "memcalc.allocator"),
    ("memcalc.estimate", "memcalc.inputs"),
    ("memcalc.report", "memcalc.plot", "memcalc.plan", "memcalc.reference"),
    ("memcalc.api", "memcalc.quiz", "memcalc.measure", "memcalc"),
    ("memcalc.cli", "memcalc.__main__"),
)
"""The layers, lowest first: a module imports only its own layer and those below (the core,
layers 0-5, never imports torch or the rooms and commands above it)."""


def layer(module: str) -> int:
    best, depth = len(LAYERS), -1
    for i, names in enumerate(LAYERS):
        for p in names:
            if (module == p or module.startswith(p + ".")) and len(p) > depth:
                best, depth = i, len(p)
    return best


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(module: str, path: Path, known: dict[str, Path]) -> Iterator[tuple[str, bool]]:
    """(imported module, under TYPE_CHECKING only) for every import in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            for inner in node.body:
                for sub in ast.walk(inner):
                    typing_only.add(id(sub))
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")
                up = up[: len(up) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            names = [f"{base}.{a.name}" for a in node.names] or [base]
        for name in names:
            if not name.startswith(PACKAGE):
                continue
            target = _resolve(name, known)
            if target and target != module:
                yield target, id(node) in typing_only


def graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(every edge, the edges that run: not under TYPE_CHECKING)."""
    known = modules()
    edges: dict[str, set[str]] = {m: set() for m in known}
    running: dict[str, set[str]] = {m: set() for m in known}
    for m, path in known.items():
        for target, typing_only in imports(m, path, known):
            edges[m].add(target)
            if not typing_only:
                running[m].add(target)
    return edges, running


def loops(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            node, it = work[-1]
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(edges[nxt]))))
                    break
                if nxt in on:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        top = stack.pop()
                        on.discard(top)
                        comp.append(top)
                        if top == node:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def packages(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """The edges between the top-level parts (``memcalc.spec``, ``memcalc.profiles``, ...)."""

    def top(m: str) -> str:
        return ".".join(m.split(".")[:2])

    out: dict[str, set[str]] = {}
    for m, ts in edges.items():
        out.setdefault(top(m), set()).update(top(t) for t in ts if top(t) != top(m))
    return out


def upward(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Edges from a module to one of a higher layer (``LAYERS``)."""
    return sorted((m, t) for m, ts in edges.items() for t in ts if layer(t) > layer(m))


def functions() -> list[tuple[int, int, str]]:
    """(lines, parameters, where) of every function and method."""
    out = []
    for path in modules().values():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                params = [*a.posonlyargs, *a.args, *a.kwonlyargs]
                n = len([p for p in params if p.arg not in ("self", "cls")])
                n += bool(a.vararg) + bool(a.kwarg)
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                rel = path.relative_to(ROOT.parent)
                out.append((lines, n, f"{rel}:{node.lineno} {node.name}"))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 on a loop or an upward arrow")
    ap.add_argument("--top", type=int, default=10)
    args = ap.parse_args(argv)
    fns = functions()
    print(f"The {args.top} longest functions (lines):")
    for lines, _, where in sorted(fns, reverse=True)[: args.top]:
        print(f"  {lines:4d}  {where}")
    print(f"The {args.top} longest parameter lists:")
    for _, n, where in sorted(fns, key=lambda f: (f[1], f[0]), reverse=True)[: args.top]:
        print(f"  {n:4d}  {where}")
    edges, _ = graph()
    found = loops(edges)
    print(f"Import loops: {len(found)}")
    for comp in found:
        print("  " + " <-> ".join(comp))
    between = loops(packages(edges))
    print(f"Loops between top-level parts: {len(between)}")
    for comp in between:
        print("  " + " <-> ".join(comp))
    found += between
    up = upward(edges)
    print(f"Arrows up the layers (tools/code_shape.py LAYERS): {len(up)}")
    for m, t in up:
        print(f"  {m} -> {t}")
    return 1 if args.check and (found or up) else 0


if __name__ == "__main__":
    sys.exit(main())
