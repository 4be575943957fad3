"""The layering check: ``python -m edge_anime.devtools.layers`` exits 1 on an import that runs back up a layer
or on a cycle between modules, and prints each with the line that makes it.

Why a check and not a picture: a rule that only a diagram states drifts the first time someone needs a helper
from a room above (``video`` reaching into ``service`` for a log line, ``watch`` into ``video`` for an
extension). Imports are read from the source with ``ast``, lazy ones inside functions included: a lazy import
is still a dependency, it only hides it from Python's own cycle error.

The layers, lowest first. A module may import its own layer and any layer below, never one above; inside a
layer, modules must still not import each other in a circle.
"""
from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "edge_anime"

# (layer, module prefixes under edge_anime). A prefix names a module or a whole subpackage.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("errors", "fsutil", "yamlload", "locations", "logs", "ticking", "progressbar", "rayaddress", "_bundled")),
    ("settings", ("config", "inputs", "preflight")),
    ("imaging", ("imaging",)),
    ("styles", ("models",)),
    ("runtime", ("runtime",)),
    ("faces", ("faces",)),
    ("core", ("pipeline", "video", "naming", "stylizer")),
    ("watch", ("watch",)),
    ("batch", ("batch",)),
    ("http", ("http",)),
    ("measure", ("measure",)),
    ("service", ("service",)),
    ("entry", ("commands", "cli", "__main__", "devtools", "")),  # "" is the package itself: the public API
)


@dataclass(frozen=True)
class Edge:
    """One import of one module by another, where it is written."""

    source: str
    target: str
    path: Path
    line: int


def modules(root: Path) -> dict[str, Path]:
    """Dotted name (without the package) -> file, for every module of the package under ``root``."""
    found: dict[str, Path] = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = path.relative_to(root / PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def layer_of(module: str) -> int:
    """Index of the module's layer in ``LAYERS``; the longest matching prefix wins."""
    best, best_len = -1, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            matches = module == prefix or (prefix and module.startswith(prefix + "."))
            if matches and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    if best < 0:
        raise SystemExit(f"layers: module edge_anime.{module} is in no layer: add it to LAYERS in {__file__}")
    return best


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: set[str]) -> Iterator[str]:
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        if node.level:
            package = module.split(".") if is_package else module.split(".")[:-1]
            package = [p for p in package if p]
            base_parts = package[: len(package) - node.level + 1]
            base = ".".join([PACKAGE, *base_parts, *([node.module] if node.module else [])])
        else:
            base = node.module or ""
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}"[len(PACKAGE) + 1:] in known else base
                 for alias in node.names]
    for name in names:
        if name != PACKAGE and not name.startswith(PACKAGE + "."):
            continue
        short = name[len(PACKAGE) + 1:]
        while short and short not in known:
            short = short.rpartition(".")[0]
        yield short


def edges(root: Path) -> list[Edge]:
    """Every import between two modules of the package, lazy ones included."""
    found = modules(root)
    known = set(found)
    result: list[Edge] = []
    for module, path in found.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _targets(node, module, path.name == "__init__.py", known):
                    if target != module:
                        result.append(Edge(module, target, path, node.lineno))
    return result


def upward(all_edges: Iterable[Edge]) -> list[Edge]:
    """Imports of a layer above the importer's."""
    return [e for e in all_edges if layer_of(e.target) > layer_of(e.source)]


def cycles(all_edges: Iterable[Edge]) -> list[list[str]]:
    """Groups of modules that reach each other through imports (Tarjan's strongly connected components).

    A package's ``__init__`` importing its own submodules is not a cycle with them: re-exporting is what an
    ``__init__`` is for, so those edges are left out."""
    graph: dict[str, set[str]] = {}
    for e in all_edges:
        if e.target and e.source.startswith(e.target + "."):
            continue  # a submodule importing its package's __init__ (a shared helper there)
        if e.source == "" or (e.target.startswith(e.source + ".") and e.source):
            continue  # an __init__ re-exporting its own submodules
        graph.setdefault(e.source, set()).add(e.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def check(root: Path) -> list[str]:
    """The findings, one line each; empty when the house keeps its layers."""
    all_edges = edges(root)
    lines = []
    for e in upward(all_edges):
        lines.append(f"{e.path.relative_to(root)}:{e.line}: edge_anime.{e.source} ({LAYERS[layer_of(e.source)][0]}) "
                     f"imports edge_anime.{e.target or '(package)'} ({LAYERS[layer_of(e.target)][0]}), a layer above")
    for group in cycles(all_edges):
        names = " -> ".join(f"edge_anime.{m}" for m in group)
        lines.append(f"cycle: {names}")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Exit 0 when the layers hold, 1 with the findings otherwise."""
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0]) if args else Path(__file__).resolve().parents[2]
    findings = check(root)
    for line in findings:
        print(line)
    count = len(modules(root))
    print(f"layers: {count} modules in {len(LAYERS)} layers, {len(findings)} finding(s)")
    return 1 if findings else 0


if __name__ == "__main__":
    raise SystemExit(main())
