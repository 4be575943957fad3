"""Write the README's hero pictures: one held-out CC0 photo through every bundled style at the default size.

What a user gets is what the README must show, so the pictures come from the product's own core
(``edge_anime.Stylizer`` with the bundled default config: its variant choice, ``image.max_side`` 1024 and the
tone guard), not from a bare IR call at a flattering size. The photo is held out of training
(``training.sources.holdout``) and CC0, since only a permissively licensed photo may go into the repository
(never one from ../shared/photos). The JPEGs are written at the size the product wrote them.

    python -m training.readme_hero --out docs/img
    python -m training.readme_hero --out docs/img --portrait   # docs/faces.md: a portrait, drawn or not
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
PORTRAIT_PHOTO = "grace_hopper"  # the held-out portrait (public domain)
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
    p.add_argument("--portrait", action="store_true", help="the held-out portrait with image.portrait off and on")
    a = p.parse_args(argv)
    if a.portrait:
        write_portrait(next(s for s in holdout(a.sources_cache) if Path(s.path).stem == PORTRAIT_PHOTO), a.out)
        return 0
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


def write_portrait(source: Source, out_dir: Path) -> None:
    """The portrait at the default settings with ``image.portrait`` off (faces only restyled) and on."""
    from edge_anime.config import Config

    for setting in ("off", "auto"):
        with Stylizer(Config.model_validate({"image": {"portrait": setting}})) as stylizer:
            out = stylizer.stylize(str(source.path))
        name = f"portrait_{'drawn' if setting == 'auto' else 'restyled'}.jpg"
        print(f"{out_dir / name}: {out.size[0]}x{out.size[1]}, {write_jpeg(out, out_dir / name)} bytes")
    with Image.open(source.path) as im:
        photo = im.convert("RGB").resize(out.size, Image.Resampling.LANCZOS)
    print(f"{out_dir / 'portrait_photo.jpg'}: {write_jpeg(photo, out_dir / 'portrait_photo.jpg')} bytes ({source.licence})")


if __name__ == "__main__":
    raise SystemExit(main())
