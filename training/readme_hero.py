"""Write the README's before/after pair from a CC0 scikit-image photo through the shipped toon IR.

Only a permissively licensed photo may go into the repository (never one from ../shared/photos), so the
pair is made from skimage's ``chelsea`` (CC0, Stefan van der Walt). It is one of the training photos:
the README shows what the style looks like, the held-out figures live in docs/toon.md.

    python -m training.readme_pair --model-dir models/toon --out docs/img
"""
from __future__ import annotations

import argparse
import io
from pathlib import Path

import numpy as np
from PIL import Image

from training.data import COLOUR_PHOTOS, load_photo
from training.target import resize_long_side

README_PHOTO = "chelsea"
LONG_SIDE_PX = 448  # multiple of 4 on both sides after the crop below; keeps each JPEG well under 150 KB
JPEG_QUALITY = 85
MAX_JPEG_BYTES = 150 * 1024


def stylize_with_ir(rgb: np.ndarray, model_dir: Path) -> np.ndarray:
    import openvino as ov

    compiled = ov.Core().compile_model(model_dir / "model.xml", "CPU")
    return np.asarray(compiled({0: rgb[None]})[0][0])


def write_jpeg(rgb: np.ndarray, path: Path) -> int:
    """Temp-then-rename, and refuse to write a file the README budget does not allow."""
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="JPEG", quality=JPEG_QUALITY, optimize=True)
    if buf.tell() > MAX_JPEG_BYTES:
        raise ValueError(f"{path}: {buf.tell()} bytes, over the {MAX_JPEG_BYTES} byte budget")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(buf.getvalue())
    tmp.replace(path)
    return buf.tell()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", type=Path, default=Path("models/toon"))
    p.add_argument("--out", type=Path, default=Path("docs/img"))
    a = p.parse_args(argv)
    photo = resize_long_side(load_photo(README_PHOTO), LONG_SIDE_PX)
    h, w = photo.shape[:2]
    photo = np.ascontiguousarray(photo[: h - h % 4, : w - w % 4])
    toon = stylize_with_ir(photo, a.model_dir)
    for name, img in (("toon_before.jpg", photo), ("toon_after.jpg", toon)):
        size = write_jpeg(img, a.out / name)
        print(f"{a.out / name}: {img.shape[1]}x{img.shape[0]}, {size} bytes ({COLOUR_PHOTOS[README_PHOTO]})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
