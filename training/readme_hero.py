"""Write the README's hero pictures: one held-out CC0 photo through every bundled style at the default size.

What a user gets is what the README must show, so the pictures come from the product's own core
(``edge_anime.Stylizer`` with the bundled default config: its variant choice, ``image.max_side`` 1024 and the
tone guard), not from a bare IR call at a flattering size. The photo is held out of training
(``training.sources.holdout``) and CC0, since only a permissively licensed photo may go into the repository
(never one from ../shared/photos). The JPEGs are written at the size the product wrote them.

    python -m training.readme_hero --out docs/img
"""
from __future__ import annotations

import argparse
import io
import tempfile
from pathlib import Path

import yaml
from PIL import Image

from edge_anime import Stylizer
from training.sources import Source

HERO_PHOTO = "extreme-desert-hike"  # sky-dominated: the kind of photo the first toon washed out
JPEG_QUALITY = 85
MAX_JPEG_BYTES = 400 * 1024


def write_jpeg(image: Image.Image, path: Path) -> int:
    """Temp-then-rename, and refuse to write a file the README budget does not allow."""
    buf = io.BytesIO()
    image.convert("RGB").save(buf, format="JPEG", quality=JPEG_QUALITY, optimize=True)
    if buf.tell() > MAX_JPEG_BYTES:
        raise ValueError(f"{path}: {buf.tell()} bytes, over the {MAX_JPEG_BYTES} byte budget")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(buf.getvalue())
    tmp.replace(path)
    return buf.tell()


def main(argv: list[str] | None = None) -> int:
    from edge_anime.locations import bundled_models_dir
    from training.sources import holdout

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("docs/img"))
    p.add_argument("--sources-cache", type=Path, default=Path("training/runs/sources"))
    a = p.parse_args(argv)
    source = next(s for s in holdout(a.sources_cache) if Path(s.path).stem == HERO_PHOTO)
    bundled = sorted(p.parent.name for p in bundled_models_dir().glob("*/manifest.yaml"))
    with tempfile.TemporaryDirectory() as tmp:  # the bundled defaults, serving every bundled style
        config = Path(tmp) / "hero.yaml"
        config.write_text(yaml.safe_dump({"model": {"path": "toon", "styles": [s for s in bundled if s != "toon"]}}))
        write_all(Stylizer(config=str(config)), source, a.out)
    return 0


def write_all(stylizer: Stylizer, source: Source, out_dir: Path) -> None:
    """Every style the stylizer serves, then the photo at the same size."""
    with stylizer:
        for style in stylizer.styles:
            out = stylizer.stylize(str(source.path), style=style)
            size = write_jpeg(out, out_dir / f"hero_{style}.jpg")
            print(f"{out_dir / f'hero_{style}.jpg'}: {out.size[0]}x{out.size[1]}, {size} bytes")
        with Image.open(source.path) as im:
            photo = im.convert("RGB").resize(out.size, Image.Resampling.LANCZOS)
        print(f"{out_dir / 'hero_photo.jpg'}: {write_jpeg(photo, out_dir / 'hero_photo.jpg')} bytes ({source.licence})")


if __name__ == "__main__":
    raise SystemExit(main())
