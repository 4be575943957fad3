"""What a batch has to do: every input with its output path, split into done (the output exists) and to do.

Exactly once rests on two facts. An output's name is fixed by the input alone (``output.name_template``; the
input's extension joins its stem when another input of its folder would get the same name,
``naming.SourceNames``; and a ``-1`` suffix only for inputs of different folders given to the same run that
would share a name, in the order given), so a re-run or a retried Ray batch writes the same path. And every
output is written temp-then-rename (``fsutil.write_atomic``, the clip writer), so the path holds a whole
picture or nothing. An output that exists is therefore done: a re-run skips it, and so does an actor given an
input that a killed attempt already finished. What a killed attempt leaves is a hidden temp file beside the
output; ``leftover_temps`` finds those of this plan's outputs (and no one else's), and the command removes them
before and after a run.
"""
from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core import naming
from ..fsutil import TEMP_ID_CHARS, TEMP_PREFIX
from ..inputs import InputFilter, Source

if TYPE_CHECKING:
    from ..config import Config


@dataclass(frozen=True)
class Item:
    """One input and where its output goes; absolute paths as text, so a Ray worker on another node reads the
    same files through the shared filesystem. Photo or clip is the Stylizer's to tell (``submit_file``)."""

    src: str
    dst: str

    def row(self) -> dict[str, Any]:
        return {"src": self.src, "dst": self.dst}


@dataclass
class Plan:
    todo: list[Item] = field(default_factory=list)
    done: list[Item] = field(default_factory=list)  # the output exists: skipped
    # Outputs of an earlier run under a plain name that two inputs of one folder now share: whose it is cannot
    # be known, so neither is counted done by it; both get their own names and the file is left as it was.
    left: list[Path] = field(default_factory=list)

    @property
    def items(self) -> list[Item]:
        return self.todo + self.done


def make_plan(sources: Sequence[Source], out_dir: Path, config: Config, *, style: str,
              accept: InputFilter) -> Plan:
    """Each source's output path under ``out_dir`` (its sub-folder mirrored), by the template and the input's
    folder (``naming.SourceNames``, with ``accept`` the folder rule for inputs): a name on disk does not move
    it, it marks it done."""
    plan = Plan()
    taken: set[Path] = set()
    root = out_dir.resolve()
    names = naming.SourceNames(config.output.name_template, style=style,
                               ext_of=functools.partial(naming.output_extension, config),
                               is_input=accept.accepts, named=[source.path for source in sources])
    for source in sources:
        folder = root / source.subdir
        ext = naming.output_extension(config, source.path)
        source_name = names(source.path)
        name = naming.free_output_name(config.output.name_template, source_name=source_name, style=style,
                                       ext=ext, is_free=functools.partial(_untaken, folder, taken))
        dst = naming.child(folder, name)
        taken.add(dst)
        item = Item(str(source.path.resolve()), str(dst))
        (plan.done if os.path.lexists(dst) else plan.todo).append(item)
        if source_name != source.path.name and item in plan.todo:  # said on the run that writes its own name
            plain = folder / names.plain(source.path)
            if os.path.lexists(plain) and plain not in plan.left:
                plan.left.append(plain)
    return plan


def _untaken(folder: Path, taken: set[Path], name: str) -> bool:
    return folder / name not in taken


def leftover_temps(items: Sequence[Item]) -> list[Path]:
    """Temp files that an interrupted write of one of ``items``' outputs left (``fsutil.temp_path_for``'s
    names: the prefix, a 12-character id, a dash, the output's name)."""
    found: list[Path] = []
    by_folder: dict[Path, set[str]] = {}
    for item in items:
        dst = Path(item.dst)
        by_folder.setdefault(dst.parent, set()).add(dst.name)
    start = len(TEMP_PREFIX) + TEMP_ID_CHARS + 1
    for folder, names in by_folder.items():
        try:
            entries = list(os.scandir(folder))
        except FileNotFoundError:
            continue
        for entry in entries:
            if entry.name.startswith(TEMP_PREFIX) and entry.name[start:] in names and entry.is_file():
                found.append(Path(entry.path))
    return found


def remove_leftovers(items: Sequence[Item]) -> int:
    """Remove ``leftover_temps``; how many went. Run when no attempt of this plan is writing."""
    removed = 0
    for path in leftover_temps(items):
        try:
            path.unlink()
            removed += 1
        except FileNotFoundError:
            continue
    return removed
