"""YAML for files a person or another program wrote (configs, manifests): bounded before it is built.

PyYAML's aliases let a few hundred bytes stand for billions of values (the "billion laughs" alias bomb):
``safe_load`` itself only shares references, but everything that walks the result afterwards (validation,
error messages, ``config show``) expands it, and a reload took 2.2 GB before this. The document is composed
into its node graph first (aliases still shared), every node is counted as often as aliases repeat it, and
the document is refused past ``MAX_NODES`` before any Python object is built. A real config has a few
hundred nodes; a manifest a few hundred more.
"""
from __future__ import annotations

from typing import Any

import yaml

MAX_NODES = 100_000
# libyaml's parser when PyYAML was built with it (its wheels are): the same safe constructor, ~7x faster.
# Every start reads the style's manifest (per-photo quality figures, ~900 nodes): 41 ms in Python, 6 in C.
_SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class YamlError(ValueError):
    """Not YAML, or YAML too large once its aliases are expanded; the message says which."""


def _expanded_size_exceeds(root: yaml.Node, limit: int) -> bool:
    """Count nodes as the expanded document would hold them, stopping as soon as ``limit`` is passed."""
    count = 0
    stack: list[yaml.Node] = [root]
    while stack:
        node = stack.pop()
        count += 1
        if count > limit:
            return True
        if isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                stack.extend((key, value))
    return False


def _describe(exc: yaml.YAMLError, text: str) -> str:
    """PyYAML's error as one line a person can act on: where (line and column, 1-based), what, and for the
    usual cause of "found character that cannot start any token" the character itself: a tab (issue 42:
    the message never said it was a tab, and a tab looks like spaces in most editors)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    if mark is None:
        return f"not valid YAML: {problem}"
    where = f"line {mark.line + 1}, column {mark.column + 1}"
    lines = text.splitlines()
    line = lines[mark.line] if mark.line < len(lines) else ""
    if "\t" in line[: mark.column + 1]:
        return f"not valid YAML: a tab at {where}: YAML indents with spaces, never tabs"
    context = getattr(exc, "context", None)
    return f"not valid YAML at {where}: {problem}" + (f" ({context})" if context else "")


def load_bounded(text: str, *, max_nodes: int = MAX_NODES) -> Any:
    """``yaml.safe_load`` that refuses, in milliseconds, a document larger than ``max_nodes`` expanded."""
    loader = _SAFE_LOADER(text)
    try:
        try:
            root = loader.get_single_node()
        except yaml.YAMLError as exc:
            raise YamlError(_describe(exc, text)) from None
        if root is None:
            return None
        if _expanded_size_exceeds(root, max_nodes):
            raise YamlError(f"refused: more than {max_nodes:,} values once its aliases (*name) are expanded; "
                            "a config or manifest needs a few hundred (an alias bomb?)")
        try:
            return loader.construct_document(root)
        except yaml.YAMLError as exc:
            raise YamlError(_describe(exc, text)) from None
    finally:
        loader.dispose()
