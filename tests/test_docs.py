"""Docs that cannot drift (issue 44 item 9): every relative link and #anchor in README.md and docs/ resolves,
every `edge-anime COMMAND --flag` they show exists in the parser, and every `section.key` that
configs/default.yaml's comments name is a key of the schema.

Read as text: no network, no subprocess; a fast test.
"""
from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from conftest import REPO_ROOT
from edge_anime.cli import COMMANDS, build_parser
from edge_anime.config import Config, _key_paths

DOCS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```")
FILE_SUFFIXES = {"md", "xml", "yaml", "json", "py", "bin", "jpg", "png"}
COMMAND = re.compile(r"edge-anime[ \t]+([a-z][a-z-]*)((?:[ \t]+[^\s`|;&)\]]+)*)")  # one line's words
KEY = re.compile(r"\b((?:model|device|image|output|pipeline|watch|service|http|video|ray|logging|faces)"
                 r"\.[a-z_]+(?:\.[a-z_]+)*)\b")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (but - and _), spaces to -."""
    text = re.sub(r"[`*_]{1,2}(?=\S)|(?<=\S)[`*_]{1,2}", "", heading.strip()).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    found: set[str] = set()
    counts: dict[str, int] = {}
    in_fence = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
        if in_fence or not line.startswith("#"):
            continue
        slug = _slug(line.lstrip("#"))
        n = counts.get(slug, 0)
        counts[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(REPO_ROOT).as_posix())
def test_every_relative_link_and_anchor_resolves(doc: Path) -> None:
    broken = []
    for target in LINK.findall(doc.read_text(encoding="utf-8")):
        if re.match(r"^[a-z][a-z+.-]*:", target):  # http:, https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        dest = (doc.parent / path_part).resolve() if path_part else doc
        if not dest.exists():
            broken.append(f"{target}: no {dest.relative_to(REPO_ROOT) if dest.is_relative_to(REPO_ROOT) else dest}")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.name}")
    assert broken == [], f"{doc.name}: {broken}"


def _options(parser: argparse.ArgumentParser) -> set[str]:
    """Every option string of ``parser`` and of its sub-commands (``models pull --name``)."""
    found: set[str] = set()
    for action in parser._actions:
        found.update(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= _options(sub)
    return found


def _commands_in(text: str) -> list[tuple[str, list[str]]]:
    """Every `edge-anime COMMAND ...` in the text, with the options it shows (words that start with -)."""
    found = []
    for match in COMMAND.finditer(text):
        try:
            words = shlex.split(match.group(2), posix=True)
        except ValueError:
            words = match.group(2).split()
        flags = [w.split("=", 1)[0] for w in words if w.startswith("--") and len(w) > 2]
        found.append((match.group(1), flags))
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(REPO_ROOT).as_posix())
def test_every_command_and_flag_shown_exists(doc: Path) -> None:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command")
    choices = subparsers.choices  # type: ignore[attr-defined]
    wrong = []
    for command, flags in _commands_in(doc.read_text(encoding="utf-8")):
        if command not in COMMANDS:
            continue  # prose ("edge-anime is ..."), not a command line
        known = _options(choices[command])
        wrong += [f"edge-anime {command} {flag}" for flag in flags if flag not in known]
    assert wrong == [], f"{doc.name}: options the parser does not have: {sorted(set(wrong))}"


def test_every_key_the_default_configs_comments_name_exists() -> None:
    keys = set(_key_paths(Config))
    text = (REPO_ROOT / "configs" / "default.yaml").read_text(encoding="utf-8")
    named = {m for line in text.splitlines() if "#" in line for m in KEY.findall(line.split("#", 1)[1])
             if m.rsplit(".", 1)[1] not in FILE_SUFFIXES}  # faces.md, model.xml: files, not keys
    assert named, "the pattern found no key at all: the test is wrong, not the file"
    missing = sorted(k for k in named if k not in keys)
    assert missing == [], f"configs/default.yaml's comments name keys the schema does not have: {missing}"


def test_the_checks_see_what_they_check() -> None:
    """The patterns find the docs' commands and would catch a wrong one (a test that finds nothing passes
    whatever the docs say)."""
    shown = [c for doc in DOCS for c in _commands_in(doc.read_text(encoding="utf-8")) if c[0] in COMMANDS]
    assert len(shown) >= 20 and sum(bool(flags) for _, flags in shown) >= 10, len(shown)
    parser = build_parser()
    stylize = next(a for a in parser._actions if a.dest == "command").choices["stylize"]  # type: ignore[attr-defined]
    assert "--output" in _options(stylize) or "-o" in _options(stylize)
    assert _commands_in("run `edge-anime stylize in -o out --nope` then") == [("stylize", ["--nope"])]
    assert "--nope" not in _options(stylize)
    assert _slug("Limits and timeouts") == "limits-and-timeouts" and _slug("`GET /v1/live`") == "get-v1live"
