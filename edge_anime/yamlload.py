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


def load_bounded(text: str, *, max_nodes: int = MAX_NODES) -> Any:
    """``yaml.safe_load`` that refuses, in milliseconds, a document larger than ``max_nodes`` expanded."""
    loader = _SAFE_LOADER(text)
    try:
        try:
            root = loader.get_single_node()
        except yaml.YAMLError as exc:
            raise YamlError(f"not valid YAML: {exc}") from None
        if root is None:
            return None
        if _expanded_size_exceeds(root, max_nodes):
            raise YamlError(f"refused: more than {max_nodes:,} values once its aliases (*name) are expanded; "
                            "a config or manifest needs a few hundred (an alias bomb?)")
        try:
            return loader.construct_document(root)
        except yaml.YAMLError as exc:
            raise YamlError(f"not valid YAML: {exc}") from None
    finally:
        loader.dispose()
