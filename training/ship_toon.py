"""Put a trained toon checkpoint into ``models/toon/``: converter IR + manifest, the checkpoint beside them.

Why a script and not just ``edge-anime convert``: the checkpoint has to be copied in after the converter
renamed the folder into place; and the converter's ``verify.png`` (4 rows of noisy synthetic images at
352x480, ~1.8 MB) would eat too much of ``models/``'s 16 MB budget (the 4.3 MB checkpoint, the FP16 IR with
the tiling pair of ``image.resize: full`` sharing its ``.bin``, the INT8 IR), so it is re-encoded as a
64-colour palette PNG (~0.25 MB): it is a picture for a person, not data, and nothing hashes it.

Re-running it on the shipped checkpoint (``models/toon/toon.pt``) rebuilds the FP16 IR and its tiling pair
in place and keeps the other variants (the same weights: ``converters.variants.add_variant``).

    python -m training.ship_toon training/runs/toon/toon.pt
"""
from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from PIL import Image

MODEL_NAME = "toon"
VERIFY_PNG = "verify.png"
VERIFY_PNG_COLOURS = 64
MODELS_BUDGET_BYTES = 16 * 1024 * 1024  # tests/test_toon.py pins the same


def shrink_png(path: Path) -> None:
    with Image.open(path) as im:
        palette = im.convert("RGB").quantize(colors=VERIFY_PNG_COLOURS, method=Image.Quantize.MEDIANCUT)
    tmp = path.with_name(f".{path.name}.tmp")
    palette.save(tmp, format="PNG", optimize=True)
    tmp.replace(path)


def ship(checkpoint: Path, *, models_dir: Path) -> Path:
    """Convert (fp16, align_corners decoder), copy the checkpoint in, shrink verify.png; returns the folder."""
    from edge_anime_converters.convert import convert

    folder = convert(checkpoint, name=MODEL_NAME, precision="fp16", output_dir=models_dir, upsample_align=True)
    tmp = folder / f".{checkpoint.name}.tmp"
    shutil.copyfile(checkpoint, tmp)
    tmp.replace(folder / checkpoint.name)
    if (folder / VERIFY_PNG).is_file():
        shrink_png(folder / VERIFY_PNG)
    total = sum(p.stat().st_size for p in models_dir.rglob("*") if p.is_file())
    if total >= MODELS_BUDGET_BYTES:
        raise SystemExit(f"{models_dir}: {total} bytes, over the {MODELS_BUDGET_BYTES} byte budget")
    return folder


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", type=Path, help="fp16 state dict written by train_toon --out (named toon.pt)")
    p.add_argument("--models-dir", type=Path, default=Path("models"))
    a = p.parse_args(argv)
    if a.checkpoint.name != f"{MODEL_NAME}.pt":
        p.error(f"checkpoint: expected a file named {MODEL_NAME}.pt (the manifest records the name), got {a.checkpoint.name}")
    folder = ship(a.checkpoint, models_dir=a.models_dir)
    print(f"{folder}: " + ", ".join(f"{f.name} {f.stat().st_size}" for f in sorted(folder.iterdir())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
