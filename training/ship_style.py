"""Put a trained style into ``models/STYLE/``: FP16 IR with its tiling pair, the INT8 variant, the manifest.

    python -m training.ship_style training/runs/cel/cel.pt --style cel [--calib ../shared/photos]

Why a script and not just ``edge-anime convert`` twice: the checkpoint is kept in ``training/checkpoints/``
(not in ``models/``: two styles' checkpoints would take ``models/`` past its 24 MB budget, and the runtime
never reads them); the converter's ``verify.png`` (4 rows of noisy synthetic images, ~1.8 MB) is re-encoded
as a 32-colour palette PNG (~0.2 MB; 64 colours until toon3 took models/ past 24 MiB): it is a picture for a person, not data, and nothing hashes it;
the INT8 variants' side-by-sides show the calibration photos and are not kept (``drop_photo_pictures``); and
the INT8 variant needs calibration photos, which ``--calib`` names (NNCF PTQ on real photos; without them
the style ships FP16 only and says so).

Re-running it on a shipped checkpoint rebuilds the IRs in place (the same weights: ``converters.variants``).
"""
from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Any

import yaml
from PIL import Image

from edge_anime.models import MANIFEST_NAME, FaceSpec, InkSpec, PaletteSpec
from edge_anime_converters.manifest import write_manifest
from edge_anime_converters.quantize import DECODER_FLOAT3_SETUPS, INT8_CANDIDATES

VERIFY_PNG = "verify.png"
VERIFY_PNG_COLOURS = 32
MODELS_BUDGET_BYTES = 24 * 1024 * 1024  # issue 27; tests/test_toon.py pins the same
CHECKPOINTS = Path(__file__).resolve().parent / "checkpoints"


def shrink_png(path: Path) -> None:
    with Image.open(path) as im:
        palette = im.convert("RGB").quantize(colors=VERIFY_PNG_COLOURS, method=Image.Quantize.MEDIANCUT)
    tmp = path.with_name(f".{path.name}.tmp")
    palette.save(tmp, format="PNG", optimize=True)
    tmp.replace(path)


def drop_photo_pictures(folder: Path, manifest: dict[str, Any]) -> None:
    """Delete the side-by-side pictures of the variants verified on photos, keeping their figures.

    Why: an INT8 variant is verified on the calibration photos (``--calib``, ../shared/photos), and its
    side-by-side shows them, faces of real people among them; those photos are read where they are and never
    copied into the repository, pictures of them included. The per-photo figures stay in the manifest.
    """
    for entry in [manifest, *(manifest.get("variants") or {}).values()]:
        verification = entry.get("verification") or {}
        if str(verification.get("image_source", "")).startswith("photos") and verification.get("side_by_side"):
            (folder / str(verification["side_by_side"])).unlink(missing_ok=True)
            verification["side_by_side"] = None


# The styles shipped with ink lines (edge_anime.imaging.ink): toon, whose network smooths thin structure away (issue
# 41's raters: "loses thin lines like power wires"). cel draws bold black ink of its own, and its pictures with
# lines added have not been rated: it ships without.
INKED = frozenset({"toon"})
# toon3 through the default settings (INT8, ink on) measured look.py's chroma median 0.99 at 1.05, 1.00 at 1.08 and
# 1.03 at 1.12 (issue 41's bound: >= 1.0; casts 4.8 -> 4.9, under 6): its network and the ink paint a little paler
PALETTE_CHROMA = {"toon": 1.12}
# The palette sharpens the model's edges first (edge_anime.imaging.palette, step 0), which adds colours along them:
# toon at 256 entries measured look.py's colours median 0.64, at 160 0.60, at 112 0.57 (the bound: <= 0.6); cel at
# 256 0.599, at 224 0.59, at 192 0.57
PALETTE_COLOURS = {"toon": 112, "cel": 192}
# toon's INT8 keeps three decoder convolutions float: its all-INT8 holds the floor but draws grain
# (edge_anime_converters.quantize.DECODER_FLOAT3_SETUPS); cel's is chosen from every candidate, first that holds.
INT8_SETUPS = {"toon": DECODER_FLOAT3_SETUPS}
# The train_style recipe a shipped style comes from, where it is not the style's own name
TRAINED_AS = {"toon": "toon4"}
# What a style's critic saw as drawn, beside the photos (training/DATA.md, "Illustrations"): the licence names it.
CRITIC_DATA = {"toon": (
    "\n\n**Illustrations.** A critic that scored the network's pictures during training also saw patches of 16\n"
    "cel-shaded illustrations from Debian's `renpy-thequestion` and `renpy-demo` as examples of drawing (MIT;\n"
    "Ren'Py artwork, Copyright 2004-2022 Tom Rothamel and the artists of the Ren'Py tutorial and of \"The\n"
    "Question\"). Nothing is rendered from them, and no picture of them is in the model.")}
DESCRIPTIONS = {
    "toon": "soft painted cel bands, thin dark ink and a gently simplified palette: a storybook cartoon",
    "cel": "anime cel shading: few hard tone steps, a coarse palette, vivid colour and bold black ink",
}
LICENSE_TEMPLATE = """\
# The bundled `{style}` style: licence and provenance

**Licence: MIT**, the same as the project's code (`LICENSE` at the top of the repository): use it, ship it
and sell pictures made with it, commercially included.

**What it is.** {description}. The AnimeGANv2 generator architecture (77 tensors, 2,143,552 parameters, the
layout of the MIT-licensed bryandlee/animegan2-pytorch `Generator`) with weights trained by this project on
2 CPU cores. No published AnimeGANv2 weights were used or fine-tuned: nothing in it descends from the
`paprika`, `face_paint_512_*` or `celeba_distill` checkpoints or from TachibanaYoshino/AnimeGANv2, so their
terms do not apply.

**Training data.** Only pictures whose licence allows it: CC0 and public-domain photos from Debian's
`budgie-backgrounds` and scikit-image's wheel, CC BY 4.0 photos from Debian's `lomiri-wallpapers-16.04`
(Aitzol Berasategi; Trevor "Freespace"; Jakub Mede; attribution as listed in `training/DATA.md`), and
procedural scenes made by `training/synth.py`. The targets are rendered from those photos by the project's
own cartoon filter (`training/target.py`, style `{trained}`). Evaluation photos (`../shared/photos`) were never
trained on.{critic}

**How to rebuild it.** `python -m training.train_style --style {trained}` then
`python -m training.ship_style training/runs/{trained}/{trained}.pt --style {style} --calib PHOTOS`
(`docs/styles.md`: recipe, seeds, figures).

**Files.** `model.xml` + `model.bin` (fp16 OpenVINO IR; `model_fp16_pass1.xml` / `model_fp16_pass2.xml`, the
tiling pair of `image.resize: full`, share its `.bin`), `model_int8.*` (the INT8 variant), `manifest.yaml`
(digests and verification; the runtime refuses an IR that does not match it). The repository also keeps
`training/checkpoints/{style}.pt` (the PyTorch checkpoint the IRs were converted from) and `verify.png`; the
runtime wheel leaves them out.
"""


def ship(checkpoint: Path, *, style: str, models_dir: Path, calib_dir: Path | None,
         int8_ir: Path | None = None, checkpoints_dir: Path = CHECKPOINTS) -> Path:
    """Convert fp16 (align_corners decoder, tiling pair) and int8, keep the checkpoint; returns the folder.

    ``checkpoints_dir``: where the checkpoint is kept as ``STYLE.pt`` (a trial build into a scratch
    ``models_dir`` keeps it there too, so the shipped ``training/checkpoints/STYLE.pt`` is not replaced).
    """
    from edge_anime_converters.convert import convert

    kept = checkpoints_dir / f"{style}.pt"
    if checkpoint.resolve() != kept.resolve():
        kept.parent.mkdir(parents=True, exist_ok=True)
        tmp = kept.with_name(f".{kept.name}.tmp")
        shutil.copyfile(checkpoint, tmp)
        tmp.replace(kept)
    folder = convert(kept, name=style, precision="fp16", output_dir=models_dir, upsample_align=True)
    if calib_dir is not None:
        folder = convert(kept, name=style, precision="int8", output_dir=models_dir, upsample_align=True,
                         calib_dir=calib_dir, quantized_ir=int8_ir, int8_setups=INT8_SETUPS.get(style, INT8_CANDIDATES))
    manifest = yaml.safe_load((folder / MANIFEST_NAME).read_text(encoding="utf-8"))
    # both bundled styles are cel looks; toon's network paints a little paler than its target (docs/styles.md)
    manifest["palette"] = PaletteSpec(enabled=True, colours=PALETTE_COLOURS.get(style, 256),
                                      chroma=PALETTE_CHROMA.get(style, 1.0)).to_manifest()
    if style in INKED:
        manifest["ink"] = InkSpec(enabled=True).to_manifest()
    # Faces (image.faces: auto) at 320 px, not the published face styles' 512: a 4-face group at 1024 px then takes
    # 1.31x the picture's time (the bound is 1.5x; 512 px took 1.78x, 384 px 1.40x), and a face is still sharp
    # (benchmarks/faces.py, docs/faces.md).
    manifest["faces"] = FaceSpec(crop_px=320).to_manifest()
    drop_photo_pictures(folder, manifest)
    write_manifest(folder, manifest)
    for png in sorted(folder.glob("verify*.png")):  # verify.png: the synthetic images of the FP16 check
        shrink_png(png)
    (folder / "LICENSE.md").write_text(LICENSE_TEMPLATE.format(style=style, description=DESCRIPTIONS.get(
        style, f"The {style} style").rstrip(".").capitalize(), critic=CRITIC_DATA.get(style, ""),
        trained=TRAINED_AS.get(style, style)), encoding="utf-8")
    total = sum(p.stat().st_size for p in models_dir.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    if total >= MODELS_BUDGET_BYTES:
        raise SystemExit(f"{models_dir}: {total} bytes, over the {MODELS_BUDGET_BYTES} byte budget")
    return folder


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", type=Path, help="fp16 state dict written by training.train_style")
    p.add_argument("--style", required=True, help="the style's name: models/STYLE/, training/checkpoints/STYLE.pt")
    p.add_argument("--models-dir", type=Path, default=Path("models"))
    p.add_argument("--calib", type=Path, default=None, help="photos for the INT8 variant (e.g. ../shared/photos)")
    p.add_argument("--checkpoints-dir", type=Path, default=CHECKPOINTS,
                   help="where STYLE.pt is kept (default training/checkpoints; a scratch folder for a trial build)")
    p.add_argument("--int8-ir", type=Path, default=None,
                   help="the style's QAT INT8 IR (training.qat_toon) to ship instead of quantizing; needs --calib")
    a = p.parse_args(argv)
    folder = ship(a.checkpoint, style=a.style, models_dir=a.models_dir, calib_dir=a.calib, int8_ir=a.int8_ir,
                  checkpoints_dir=a.checkpoints_dir)
    print(f"{folder}: " + ", ".join(f"{f.name} {f.stat().st_size}" for f in sorted(folder.iterdir())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
