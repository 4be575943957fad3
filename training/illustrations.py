"""Anime illustrations with provenance: what the anime critic (train_toon.AnimeCritic) learns "drawn" from.

Why: every style so far learnt from a filter of the photo (training/target.py), and raters kept calling its
scenes "a painted photo": no filter draws like an animator. A critic that has seen real cel-shaded drawing
(flat fills, clean lines, no photo grain) can push the generator toward it, as AnimeGAN's discriminator does,
while the L1 term onto the target keeps the picture's content.

The only permissively licensed anime art reachable here is Ren'Py's (Debian trixie ``renpy-demo`` and
``renpy-thequestion``, 8.3.4+dfsg-2+deb13u1). Their ``/usr/share/doc/*/copyright`` puts ``Files: *`` under
Expat (MIT), and Ren'Py's own licence page (``renpy-doc``: ``html/_sources/license.rst.txt``) says "The
artwork in the demo is released by various copyright holders, under the same terms". So each file is MIT:
usable commercially, its notice kept (training/DATA.md). Only drawn pictures are allow-listed: the demo's
photo backgrounds (cave, Washington, the White House, the panorama), its GUI and its symbols are not.

Sprites are RGBA on transparency: a patch is only taken where every pixel is opaque.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from training.sources import _check, _Deb, _fetch_deb

LICENCE = "MIT"
_VERSION = "8.3.4+dfsg-2+deb13u1"
_DEBS: dict[str, _Deb] = {
    "question": _Deb("renpy-thequestion", _VERSION, "usr/share/doc/renpy-thequestion/copyright"),
    "demo": _Deb("renpy-demo", _VERSION, "usr/share/doc/renpy-demo/copyright"),
}
_Q = "usr/share/games/renpy/the_question/game/images/"
_D = "usr/share/games/renpy/demo/game/images/"
_CREDIT = "Ren'Py {} artwork (Tom Rothamel and contributors), MIT licence, via Debian {}"

# name -> (deb key, path inside the package, first 16 hex digits of its SHA-256)
_ENTRIES: dict[str, tuple[str, str, str]] = {
    "question/bg-club": ("question", _Q + "bg club.jpg", "e7452b6f41d9ecda"),
    "question/bg-lecturehall": ("question", _Q + "bg lecturehall.jpg", "d8f477d6022ec8d4"),
    "question/bg-meadow": ("question", _Q + "bg meadow.jpg", "c6d77eb070edb216"),
    "question/bg-uni": ("question", _Q + "bg uni.jpg", "f1198e9a72940a65"),
    "question/sylvie-blue-giggle": ("question", _Q + "sylvie blue giggle.png", "c616319c2c5e3c70"),
    "question/sylvie-blue-normal": ("question", _Q + "sylvie blue normal.png", "6cb15da37a4ca7db"),
    "question/sylvie-blue-smile": ("question", _Q + "sylvie blue smile.png", "fc6f484ee02c329c"),
    "question/sylvie-blue-surprised": ("question", _Q + "sylvie blue surprised.png", "8a83e8416f326539"),
    "question/sylvie-green-giggle": ("question", _Q + "sylvie green giggle.png", "d5cfce89dc35b93c"),
    "question/sylvie-green-normal": ("question", _Q + "sylvie green normal.png", "55c3bf369385c2ca"),
    "question/sylvie-green-smile": ("question", _Q + "sylvie green smile.png", "c1b06fcc5d59c6f2"),
    "question/sylvie-green-surprised": ("question", _Q + "sylvie green surprised.png", "d0ef4b9fabbad470"),
    "demo/concert1": ("demo", _D + "concert1.png", "e0216c8fabbfcc08"),
    "demo/concert2": ("demo", _D + "concert2.png", "e143f0ddef3fdbdc"),
    "demo/concert3": ("demo", _D + "concert3.png", "e32419aab2450dcc"),
    "demo/eileen-concerned": ("demo", _D + "eileen concerned.png", "48d6f42c49088707"),
    "demo/eileen-happy": ("demo", _D + "eileen happy.png", "536f034b266f735c"),
    "demo/eileen-vhappy": ("demo", _D + "eileen vhappy.png", "7abdf5e1f46f0d2e"),
    "demo/lucy-happy": ("demo", _D + "lucy happy.png", "ac261f664a67f942"),
    "demo/lucy-mad": ("demo", _D + "lucy mad.png", "6362abbedd4db0fc"),
}

BACKGROUNDS = frozenset(name for name in _ENTRIES if "/bg-" in name)


@dataclass(frozen=True)
class Illustration:
    """One drawn picture: RGB u8 and where it is opaque (all True for a background)."""

    name: str
    rgb: NDArray[np.uint8]
    opaque: NDArray[np.bool_]
    attribution: str


def collect(cache_dir: Path, *, long_side: int = 1280, backgrounds: bool = True) -> list[Illustration]:
    """Every allow-listed illustration, fetched into ``cache_dir`` once (as training/sources.py fetches photos),
    each checked against the SHA-256 its licence was read on, and scaled down to at most ``long_side``.

    ``backgrounds=False`` leaves out The Question's four backgrounds: rendered from 3D scenes, they carry brick,
    tile and wood texture, and a critic shown them taught the generator grit ("scratchy flecks", "wormy
    foliage": docs/styles.md, toon4). The sprites and concert pictures left are cel shading: flat fills, clean
    lines."""
    from PIL import Image

    roots = {key: _fetch_deb(Path(cache_dir).resolve(), deb) for key, deb in _DEBS.items()}
    out = []
    for name, (key, inner, sha16) in _ENTRIES.items():
        if not backgrounds and name in BACKGROUNDS:
            continue
        path = roots[key] / inner
        _check(path, sha16, _DEBS[key], "training/illustrations.py")
        with Image.open(path) as im:
            rgba = im.convert("RGBA")
        if max(rgba.size) > long_side:
            k = long_side / max(rgba.size)
            rgba = rgba.resize((round(rgba.width * k), round(rgba.height * k)), Image.Resampling.LANCZOS)
        pixels = np.asarray(rgba)
        deb = _DEBS[key]
        out.append(Illustration(name, np.ascontiguousarray(pixels[..., :3]), pixels[..., 3] == 255,
                                _CREDIT.format(key, f"{deb.package}={deb.version}")))
    return out


def patches(pictures: list[Illustration], *, crop_px: int, batch: int, seed: int,
            scales: tuple[float, float] = (0.5, 1.0), tries: int = 50) -> Iterator[NDArray[np.uint8]]:
    """Endless u8 [B, crop, crop, 3] batches of opaque crops, each at a random scale in ``scales`` and flipped
    at random. A picture is chosen by its opaque area, so the 20 backgrounds and sprites count by what they
    hold. Scales below 1 give the critic thinner lines as well as the sprites' own (drawn ~2x a photo's)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    weights = np.array([float(p.opaque.sum()) for p in pictures])
    weights /= weights.sum()
    while True:
        out = []
        while len(out) < batch:
            pic = pictures[int(rng.choice(len(pictures), p=weights))]
            k = float(rng.uniform(*scales))
            h, w = pic.rgb.shape[:2]
            size = (max(crop_px, round(w * k)), max(crop_px, round(h * k)))
            rgb = np.asarray(Image.fromarray(pic.rgb).resize(size, Image.Resampling.BOX))
            opaque = np.asarray(Image.fromarray(pic.opaque).resize(size, Image.Resampling.NEAREST))
            for _ in range(tries):
                top, left = int(rng.integers(size[1] - crop_px + 1)), int(rng.integers(size[0] - crop_px + 1))
                if opaque[top:top + crop_px, left:left + crop_px].all():
                    crop = rgb[top:top + crop_px, left:left + crop_px]
                    out.append(crop[:, ::-1] if rng.random() < 0.5 else crop)
                    break
        yield np.ascontiguousarray(np.stack(out))
