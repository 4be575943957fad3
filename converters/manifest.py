"""Write ``manifest.yaml`` as docs/contracts.md section 1 pins it (the reader is ``edge_anime.models``).

Versions are read from package metadata, not by importing: the manifest of an fp32 IR should not pay for
importing NNCF, and a version string is all it needs.
"""
from __future__ import annotations

import datetime as dt
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from edge_anime.models import MANIFEST_FORMAT, MANIFEST_NAME, PaletteSpec, ToneSpec, sha256_file

from .ir import INPUT_NAME, OUTPUT_NAME
from .sources import Source
from .verify import Verification

SIZE_MULTIPLE = 4  # two stride-2 convolutions, and paprika's scale_factor=2 upsampling, need H, W % 4 == 0


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def build_manifest(*, name: str, style: str | None, precision: str, source: Source, source_sha256: str,
                   xml: Path, bin_path: Path, verification: Verification,
                   quantization: dict[str, Any] | None = None,
                   quality: dict[str, Any] | None = None) -> dict[str, Any]:
    """The manifest mapping; the digests are computed here from the files that will be renamed into place."""
    manifest: dict[str, Any] = {
        "format": MANIFEST_FORMAT,
        "name": name,
        "style": style or name,
        "precision": precision,
        "upsample_align": source.upsample_align,
        "source": {"file": source.path.name, "sha256": source_sha256, "kind": source.kind,
                   "layout": source.layout},
        "ir": {"xml": xml.name, "bin": bin_path.name, "xml_sha256": sha256_file(xml),
               "bin_sha256": sha256_file(bin_path)},
        "input": {"name": INPUT_NAME, "layout": "NHWC", "dtype": "u8", "color": "RGB",
                  "shape": [1, -1, -1, 3], "size_multiple": SIZE_MULTIPLE},
        "output": {"name": OUTPUT_NAME, "layout": "NHWC", "dtype": "u8", "color": "RGB"},
        # the tone guard after inference (edge_anime.imaging.tone): written out so a person sees it and edits it
        "tone": ToneSpec().to_manifest(),
        # the cel palette (edge_anime.imaging.palette): off for a converted checkpoint, whose gradients are its look
        "palette": PaletteSpec().to_manifest(),
        "versions": {pkg: package_version(pkg) for pkg in ("openvino", "torch", "nncf")},
        "verification": verification.to_manifest(),
        "created": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    if quantization is not None:
        manifest["quantization"] = quantization
    if quality is not None:
        manifest["quality"] = quality
    return manifest


class _PlainDumper(yaml.SafeDumper):
    """No ``&id001`` / ``*id001`` anchors where two entries share a dict (the pair's ``versions``): a person
    reads and diffs the manifest, and each entry should say its own values."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def write_manifest(directory: Path, manifest: dict[str, Any]) -> Path:
    """Temp then rename, like every artefact (the folder itself is renamed into place later)."""
    path = directory / MANIFEST_NAME
    tmp = directory / f".{MANIFEST_NAME}.tmp"
    tmp.write_text(yaml.dump(manifest, Dumper=_PlainDumper, sort_keys=False, default_flow_style=None, width=120),
                   encoding="utf-8")
    tmp.replace(path)
    return path
