"""Add a freshly converted IR to an existing style folder as a variant (docs/contracts.md section 1).

The merged style is assembled in a hidden temp folder beside the target (a copy of the style, the new IR's
files, the merged manifest) and the caller renames it into place with ``replace_dir``, so a reader sees the
old style or the new one, never a manifest naming files that are not there yet.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from edge_anime.errors import ModelError
from edge_anime.models import MANIFEST_NAME, VARIANT_KEYS, read_manifest

from .manifest import write_manifest
from .verify import SIDE_BY_SIDE_NAME


def same_weights(target: Path, built: Path) -> bool:
    """Whether ``target`` is a readable style converted from the checkpoint ``built`` was converted from."""
    if not (target / MANIFEST_NAME).is_file():
        return False
    try:
        existing = read_manifest(target)
    except ModelError:
        return False  # a broken folder is replaced, as any older model would be
    new = read_manifest(built)
    old_sha = (existing.get("source") or {}).get("sha256")
    return bool(old_sha) and old_sha == (new.get("source") or {}).get("sha256")


def variant_files(name: str) -> tuple[str, str, str]:
    """The xml, bin and side-by-side PNG names of variant ``name`` (the bin must share the xml's stem:
    OpenVINO finds an IR's weights by it)."""
    return f"model_{name}.xml", f"model_{name}.bin", f"verify_{name}.png"


def add_variant(target: Path, built: Path, *, name: str | None = None) -> Path:
    """A temp folder holding ``target``'s style with ``built``'s IR added as variant ``name`` (default: its
    precision), or, when that is the default's precision and no other name is given, put in place of the
    default's IR with the other variants kept. Returns the folder to rename into place.

    A name other than the precision keeps two IRs of one precision side by side (``int8`` with three
    convolutions float, ``int8_qat`` all-INT8 from a QAT fine-tune): which is faster depends on the box (the
    float parts run at bf16 where the CPU has it), so both ship and the variant choice measures them."""
    style = read_manifest(target)
    new = read_manifest(built)
    merged = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".merging", dir=target.parent))
    try:
        merged.chmod(target.stat().st_mode & 0o7777)
        for item in target.iterdir():
            if item.is_file() and item.name != MANIFEST_NAME:
                shutil.copy2(item, merged / item.name)
        precision = str(new["precision"])
        variant = name or precision
        replaces_default = variant == str(style["precision"])
        names = ((str(style["ir"]["xml"]), str(style["ir"]["bin"]), SIDE_BY_SIDE_NAME) if replaces_default
                 else variant_files(variant))
        built_bin = str(new["ir"]["bin"])
        _move_ir(built, merged, new, names)
        variants = style.setdefault("variants", {})
        for name in [n for n, e in variants.items() if e.get("role") and str(e["ir"]["bin"]) == names[1]]:
            del variants[name]  # a pair on the replaced bin's weights: stale (rebuilt below, if it was)
        for name, entry in (new.get("variants") or {}).items():  # the tiling pair built with it (two_pass_ir)
            if entry.get("role"):
                if str(entry["ir"]["bin"]) == built_bin:  # its weights are the new IR's bin, renamed above
                    entry["ir"] = {**entry["ir"], "bin": names[1]}
                for key in ("xml", "bin"):
                    if (built / str(entry["ir"][key])).is_file():
                        (built / str(entry["ir"][key])).replace(merged / str(entry["ir"][key]))
                style.setdefault("variants", {})[name] = entry
        fields = {key: new[key] for key in VARIANT_KEYS if key in new}
        if replaces_default:  # assigned in place, so the manifest keeps its key order
            for key in VARIANT_KEYS:
                if key in fields:
                    style[key] = fields[key]
                else:
                    style.pop(key, None)
        else:
            variants[variant] = fields
        if not variants:
            style.pop("variants")
        _drop_unlisted_irs(merged, style)
        write_manifest(merged, style)
        return merged
    except BaseException:
        shutil.rmtree(merged, ignore_errors=True)
        raise


def _drop_unlisted_irs(folder: Path, style: dict[str, Any]) -> None:
    """Remove IR files (``*.xml``, ``*.bin``) no entry of ``style`` names any more (a replaced pair's)."""
    listed = {str(style["ir"][k]) for k in ("xml", "bin")}
    listed |= {str(e["ir"][k]) for e in (style.get("variants") or {}).values() for k in ("xml", "bin")}
    for item in folder.iterdir():
        if item.suffix in (".xml", ".bin") and item.name not in listed:
            item.unlink()


def _move_ir(built: Path, merged: Path, new: dict[str, Any], names: tuple[str, str, str]) -> None:
    """Move the new IR's files under their names in the style and point the manifest at them."""
    xml_name, bin_name, png_name = names
    (built / str(new["ir"]["xml"])).replace(merged / xml_name)
    (built / str(new["ir"]["bin"])).replace(merged / bin_name)
    new["ir"] = {**new["ir"], "xml": xml_name, "bin": bin_name}
    png = built / SIDE_BY_SIDE_NAME
    verification = new.get("verification") or {}
    if png.is_file():
        png.replace(merged / png_name)
        verification["side_by_side"] = png_name
