"""The layering check: ``python -m edge_anime.devtools.layers`` exits 1 on an import that runs back up a layer
or on a cycle between modules, and prints each with the line that makes it.

Why a check and not a picture: a rule that only a diagram states drifts the first time someone needs a helper
from a room above (``video`` reaching into ``service`` for a log line, ``watch`` into ``video`` for an
extension). Imports are read from the source with ``ast``, lazy ones inside functions included: a lazy import
is still a dependency, it only hides it from Python's own cycle error.

The layers, lowest first. A module may import its own layer and any layer below, never one above; inside a
layer, modules must still not import each other in a circle.

The same map draws the layer table of docs/architecture.md: ``python -m edge_anime.devtools.layers --markdown``
writes it between the ``LAYERS_BEGIN`` and ``LAYERS_END`` marks there, and tests/test_layers.py fails while the
doc's table differs from ``markdown_table``, so the picture a newcomer reads is the one the check enforces
(before, the doc drew 12 layers by hand where the check had 13).
"""
from __future__ import annotations

import argparse
import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "edge_anime"
DOC = Path("docs") / "architecture.md"  # under the checkout's root
LAYERS_BEGIN = "<!-- layers: begin (python -m edge_anime.devtools.layers --markdown writes this table) -->"
LAYERS_END = "<!-- layers: end -->"


@dataclass(frozen=True)
class Layer:
    """One layer: its module prefixes under edge_anime (a prefix names a module or a whole subpackage; "" is
    the package itself, the public API), and what its rooms hold, for the doc's table."""

    name: str
    prefixes: tuple[str, ...]
    about: str


LAYERS: tuple[Layer, ...] = (
    Layer("base", ("errors", "fsutil", "yamlload", "locations", "logs", "ticking", "progressbar", "rayaddress",
                   "_bundled"),
          "the error taxonomy and exit statuses, temp+rename writes, YAML reading, where things live, the log "
          "format every command shares, a ticking thread, the progress bar, the Ray address, the bundled data"),
    Layer("settings", ("config", "inputs", "preflight"),
          "the config schema with key-path errors; which files are inputs; filesystem checks before a start"),
    Layer("imaging", ("imaging",),
          "decode (allow-list, guards, EXIF, modes, ICC), target/geometry/fullres (sizes), planner, encoder (one "
          "encoder for files, HTTP and the API), tone, palette, guided upscale"),
    Layer("styles", ("models",), "manifests, digests, variants: a style name -> its verified IR files"),
    Layer("runtime", ("runtime",),
          "the OpenVINO side: engine (compile, shape cache), choice (the measured variant and precision), "
          "shortlist, timing, isolated (a function in a child process), readback, two_pass (full resolution in "
          "tiles), host (cores, huge pages)"),
    Layer("faces", ("faces",),
          "the face detector, the aligned crop and the feathered paste, the pass in the pipeline, faces followed "
          "across a clip's frames; the face mesh and the drawn anime features (portrait)"),
    Layer("core", ("core", "video"),
          "core/: stylizer (the one door: styles -> variant -> engine -> pipeline, one verb for a file, photo or "
          "clip), pipeline (decode threads -> async inference -> encode threads, bounded), naming (the one "
          "naming rule); video/: a clip's header limits, frames through the same pipeline, writer, flicker blend"),
    Layer("watch", ("watch",), "the folder state machine: detect, settle, claim, commit, recover (core + handler)"),
    Layer("batch", ("batch",), "a batch's plan (exactly once) and its work, on this box or on Ray actors"),
    Layer("http", ("http",), "the ASGI app: admission, bodies, connections, the page, the booth, live frames"),
    Layer("measure", ("measure",),
          "throughput (bench: a Stylizer measured on real files), sweep (tune: coordinate descent)"),
    Layer("service", ("service",),
          "the process shell: signals, sd_notify, reload, status file, metrics, accounting, the clips' side"),
    Layer("entry", ("commands", "cli", "__main__", "devtools", ""),
          "the command line (cli, commands/), the developer checks (devtools/), and edge_anime itself: the "
          "Python API"),
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
    for index, layer in enumerate(LAYERS):
        for prefix in layer.prefixes:
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
        lines.append(f"{e.path.relative_to(root)}:{e.line}: edge_anime.{e.source} ({LAYERS[layer_of(e.source)].name}) "
                     f"imports edge_anime.{e.target or '(package)'} ({LAYERS[layer_of(e.target)].name}), a layer above")
    for group in cycles(all_edges):
        names = " -> ".join(f"edge_anime.{m}" for m in group)
        lines.append(f"cycle: {names}")
    known = modules(root)
    for layer in LAYERS:
        for prefix in layer.prefixes:
            if prefix not in known:  # a room moved or gone: the map (and the doc's table) would name it still
                lines.append(f"layer {layer.name}: edge_anime.{prefix} is no module or package; update LAYERS "
                             f"in {Path(__file__).name}")
    return lines


def rooms(root: Path, layer: Layer) -> list[str]:
    """The layer's rooms as the tree has them: ``name/`` for a package, ``name`` for a module, ``edge_anime``
    for the package itself."""
    found = modules(root)
    shown = []
    for prefix in layer.prefixes:
        if prefix not in found:
            continue
        if prefix == "":
            shown.append(PACKAGE)
        else:
            shown.append(f"{prefix}/" if found[prefix].name == "__init__.py" else prefix)
    return shown


def markdown_table(root: Path) -> str:
    """docs/architecture.md's layer table, from ``LAYERS`` and the tree: the top layer first, as the doc reads
    (an entry point at the top, the base at the bottom)."""
    lines = ["| layer | rooms | what they hold |", "| --- | --- | --- |"]
    for layer in reversed(LAYERS):
        names = ", ".join(f"`{room}`" for room in rooms(root, layer))
        lines.append(f"| {layer.name} | {names} | {layer.about} |")
    return "\n".join(lines) + "\n"


def doc_table(text: str) -> str | None:
    """The table between the marks of docs/architecture.md's text; None when the marks are missing."""
    begin, end = text.find(LAYERS_BEGIN), text.find(LAYERS_END)
    if begin < 0 or end < begin:
        return None
    return text[begin + len(LAYERS_BEGIN):end].strip("\n") + "\n"


def write_doc(root: Path) -> bool:
    """Put ``markdown_table`` between the marks of docs/architecture.md; True when the file changed."""
    path = root / DOC
    text = path.read_text(encoding="utf-8")
    if doc_table(text) is None:
        raise SystemExit(f"layers: {path} has no {LAYERS_BEGIN!r} ... {LAYERS_END!r} block to write the table into")
    begin, end = text.index(LAYERS_BEGIN) + len(LAYERS_BEGIN), text.index(LAYERS_END)
    new = f"{text[:begin]}\n{markdown_table(root)}{text[end:]}"
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text


def main(argv: list[str] | None = None) -> int:
    """Exit 0 when the layers hold, 1 with the findings otherwise; ``--markdown`` writes the doc's table too."""
    parser = argparse.ArgumentParser(prog="python -m edge_anime.devtools.layers", description=__doc__.split("\n")[0])
    parser.add_argument("root", nargs="?", type=Path, default=Path(__file__).resolve().parents[2],
                        help="the checkout's root (the folder that holds edge_anime/)")
    parser.add_argument("--markdown", action="store_true",
                        help=f"write the layer table into {DOC} (between its marks) from the same map")
    args = parser.parse_args(argv)
    root: Path = args.root
    findings = check(root)
    for line in findings:
        print(line)
    count = len(modules(root))
    print(f"layers: {count} modules in {len(LAYERS)} layers, {len(findings)} finding(s)")
    if args.markdown:
        changed = write_doc(root)
        print(f"layers: {root / DOC} {'updated' if changed else 'already current'}")
    return 1 if findings else 0


if __name__ == "__main__":
    raise SystemExit(main())
