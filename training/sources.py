"""Real training photos with provenance: an explicit allow-list, each file's licence as its package states it.

Sources (training/DATA.md lists them with counts, and what was left out and why):
  * Debian packages, fetched with ``apt-get download`` (pinned versions) and unpacked with ``dpkg-deb -x``;
    the licence of each file was read from the package's ``/usr/share/doc/PKG/copyright``:
      - budgie-backgrounds 3.0-1 (Debian trixie): CC0-1.0 for every file;
      - lomiri-wallpapers-16.04 20.04.0-2 (Debian bookworm): per file, CC-BY-4.0 or CC0-1.0 kept here.
  * Photos inside wheels already installed by ``edge-anime[train]`` / ``[chart]``: scikit-image's bundled
    photos (licences from ``skimage.data``'s docstrings) and matplotlib's ``grace_hopper.jpg``.

Use::

    from training.sources import collect, holdout, load_rgb
    cache = Path("training/runs/sources")           # gitignored; about 30 MB of .deb files
    for src in collect(cache):                       # training photos (the holdout is never among them)
        rgb = load_rgb(src, long_side=1024)          # uint8 HxWx3 (grey files come back replicated)
    gallery = holdout(cache)                         # 4 photos kept out of training, for docs/gallery.md

Only files on the allow-list below are ever returned; each carries its licence and the attribution to keep.
Every file's SHA-256 (first 16 hex digits) is checked, so a pinned package that changed is noticed.
Fetching needs ``apt-get`` and ``dpkg-deb`` (Debian/Ubuntu) and the network once; later calls use the cache.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

# Licences a training photo may carry; anything else (GPL, LGPL, CC-BY-SA, NC) is left out (DATA.md).
ALLOWED_LICENCES: frozenset[str] = frozenset({"CC0-1.0", "public-domain", "CC-BY-4.0", "CC-BY-2.0"})

# A private apt configuration (lists under the cache) so the system's sources are neither needed nor changed.
_APT_SOURCES = (
    "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main\n"
    "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main\n"
)


@dataclass(frozen=True)
class Source:
    """One photo: where it is on disk, and what may be done with it."""

    path: Path  # the image file (inside the cache, or inside an installed wheel)
    name: str  # short unique name, e.g. "budgie/lake-sherburne"
    licence: str  # one of ALLOWED_LICENCES
    origin: str  # "debian:PKG=VERSION" or "wheel:DIST"
    attribution: str  # what to credit (author, title, licence)
    tags: tuple[str, ...] = ()  # what the photo shows: sky, sea, night, snow, backlight, city, people, ...
    grey: bool = False  # a single-channel photo (data.py tints these)


@dataclass(frozen=True)
class _Deb:
    package: str
    version: str
    copyright: str  # where the licence was read, inside the package


@dataclass(frozen=True)
class _Entry:
    deb: str  # key into _DEBS
    inner: str  # path inside the package
    sha16: str  # first 16 hex digits of the file's SHA-256
    licence: str
    attribution: str
    tags: tuple[str, ...] = field(default=())


_DEBS: dict[str, _Deb] = {
    "budgie": _Deb("budgie-backgrounds", "3.0-1", "usr/share/doc/budgie-backgrounds/copyright"),
    "lomiri": _Deb("lomiri-wallpapers-16.04", "20.04.0-2", "usr/share/doc/lomiri-wallpapers-16.04/copyright"),
}

_B = "usr/share/backgrounds/budgie/"
_BUDGIE_CREDIT = "Budgie Desktop Developers (budgie-backgrounds), CC0-1.0"
_L = "usr/share/backgrounds/"

# The allow-list. Left out of these packages (DATA.md): budgie ocean-waves (a woodblock print, not a photo),
# valley-midnight and waves-midnight (vector art); lomiri umang (a rendering) and the CC-BY-SA-4.0 files.
_ENTRIES: dict[str, _Entry] = {
    "budgie/abstract-spiral": _Entry("budgie", _B + "abstract-spiral.jpg", "10070d1f52c14561", "CC0-1.0", _BUDGIE_CREDIT, ("architecture", "grey")),
    "budgie/beacon-street-sunset": _Entry("budgie", _B + "beacon-street-sunset.jpg", "d77a97bfbb28fa6b", "CC0-1.0", _BUDGIE_CREDIT, ("city", "street", "backlight", "sunset")),
    "budgie/blue-periwinkle": _Entry("budgie", _B + "blue-periwinkle.jpg", "0b35d0e6e14766ec", "CC0-1.0", _BUDGIE_CREDIT, ("flowers", "nature")),
    "budgie/canyon-wren": _Entry("budgie", _B + "canyon-wren.jpg", "1576ed3332c11b81", "CC0-1.0", _BUDGIE_CREDIT, ("animal", "rock", "overcast")),
    "budgie/casa-mila": _Entry("budgie", _B + "casa-mila.jpg", "5c7b24e463e3ca90", "CC0-1.0", _BUDGIE_CREDIT, ("architecture", "backlight", "sky")),
    "budgie/extreme-desert-hike": _Entry("budgie", _B + "extreme-desert-hike.jpg", "beed5bc6a2c99b02", "CC0-1.0", _BUDGIE_CREDIT, ("sky", "desert", "people")),
    "budgie/high-trestle-trail": _Entry("budgie", _B + "high-trestle-trail.jpg", "3fa56b607d41e658", "CC0-1.0", _BUDGIE_CREDIT, ("night", "bridge", "blue")),
    "budgie/lake-sherburne": _Entry("budgie", _B + "lake-sherburne.jpg", "85881b53de866a52", "CC0-1.0", _BUDGIE_CREDIT, ("sky", "snow", "mountains", "lake")),
    "budgie/oakland-zoo-otters": _Entry("budgie", _B + "oakland-zoo-otters.jpg", "b7540dd5c076b5b3", "CC0-1.0", _BUDGIE_CREDIT, ("animal", "water")),
    "budgie/perched-osprey": _Entry("budgie", _B + "perched-osprey.jpg", "d57e8d13c898c8ab", "CC0-1.0", _BUDGIE_CREDIT, ("animal", "trees")),
    "budgie/piazza-gae-aulenti": _Entry("budgie", _B + "piazza-gae-aulenti.jpg", "f5a33cc32e1e3c45", "CC0-1.0", _BUDGIE_CREDIT, ("city", "architecture", "sky", "dark")),
    "budgie/roman-colosseum": _Entry("budgie", _B + "roman-colosseum.jpg", "3a085abab563afcd", "CC0-1.0", _BUDGIE_CREDIT, ("sky", "architecture", "clouds")),
    "budgie/saturnian-profile": _Entry("budgie", _B + "saturnian-profile.jpg", "37b2812d5e772481", "CC0-1.0", _BUDGIE_CREDIT, ("night", "space", "dark")),
    "budgie/singaporean-cityscape": _Entry("budgie", _B + "singaporean-cityscape.jpg", "f636392cae58e2cf", "CC0-1.0", _BUDGIE_CREDIT, ("night", "city", "water", "lights")),
    "budgie/tea-gardens": _Entry("budgie", _B + "tea-gardens.jpg", "1d7377e9903b29a3", "CC0-1.0", _BUDGIE_CREDIT, ("landscape", "green", "haze", "backlight")),
    "lomiri/aitzgorri": _Entry("lomiri", _L + "aitzgorri_by_Aitzol_Berasategi.jpg", "66268e7b48f8854d", "CC-BY-4.0", "\"aitzgorri\" by Aitzol Berasategi (2018), CC BY 4.0", ("sky", "mountains", "autumn", "landscape")),
    "lomiri/friends": _Entry("lomiri", _L + "friends_by_Aitzol_Berasategi.jpg", "cc40e313c74e421e", "CC-BY-4.0", "\"friends\" by Aitzol Berasategi (2018), CC BY 4.0", ("animal", "white", "house")),
    "lomiri/life": _Entry("lomiri", _L + "life_by_Aitzol_Berasategi.jpg", "4c119350ead80201", "CC-BY-4.0", "\"life\" by Aitzol Berasategi (2018), CC BY 4.0", ("forest", "stream", "rock")),
    "lomiri/picosdeeuropa": _Entry("lomiri", _L + "picosdeeuropa_by_Aitzol_Berasategi.jpg", "414d0072b2f6f2c5", "CC-BY-4.0", "\"picosdeeuropa\" by Aitzol Berasategi (2018), CC BY 4.0", ("sky", "clouds", "snow", "mountains")),
    "lomiri/picture-0b": _Entry("lomiri", _L + "Picture_0B_by_freespace.jpg", "c8c0ab18e48d9e04", "CC-BY-4.0", "\"Picture 0B\" by Trevor \"Freespace\" (2018), CC BY 4.0", ("food", "grey", "red")),
    "lomiri/picture-1a": _Entry("lomiri", _L + "Picture_1A_by_freespace.jpg", "89e86af38d04daae", "CC-BY-4.0", "\"Picture 1A\" by Trevor \"Freespace\" (2018), CC BY 4.0", ("objects", "vivid")),
    "lomiri/sunset": _Entry("lomiri", _L + "sunset_by_Aitzol_Berasategi.jpg", "474dab6a4b9f94dc", "CC-BY-4.0", "\"sunset\" by Aitzol Berasategi (2018), CC BY 4.0", ("sky", "sunset", "backlight", "mountains")),
    "lomiri/wine": _Entry("lomiri", _L + "Wine_by_Jakkub_Mede.jpg", "d2e96e6d4da40dd8", "CC-BY-4.0", "\"Wine\" by Jakub Mede (2018), CC BY 4.0", ("indoor", "warm")),
    "lomiri/seeding": _Entry("lomiri", _L + "seeding_by_Clements_Engelhardt.jpg", "a5634d1ab5e41a35", "CC0-1.0", "\"seeding\" by Clemens Engelhardt (2018), CC0-1.0", ("backlight", "grass", "nature")),
}

# Photos inside installed wheels: (distribution, path inside the package, sha16, licence, attribution, tags, grey).
_WHEEL_PHOTOS: dict[str, tuple[str, str, str, str, str, tuple[str, ...], bool]] = {
    # scikit-image (skimage/data/*, shipped in the wheel; licences as skimage.data's docstrings state them)
    "skimage/astronaut": ("skimage", "data/astronaut.png", "", "public-domain", "Eileen Collins, NASA (public domain), via scikit-image", ("people", "skin"), False),
    "skimage/chelsea": ("skimage", "data/chelsea.png", "", "CC0-1.0", "Stefan van der Walt (CC0), via scikit-image", ("animal",), False),
    "skimage/coffee": ("skimage", "data/coffee.png", "", "CC0-1.0", "Rachel Michetti (CC0), via scikit-image", ("food", "indoor"), False),
    "skimage/rocket": ("skimage", "data/rocket.jpg", "", "public-domain", "SpaceX (public domain), via scikit-image", ("sky", "night", "lights"), False),
    "skimage/hubble_deep_field": ("skimage", "data/hubble_deep_field.jpg", "", "public-domain", "NASA/ESA Hubble eXtreme Deep Field (public domain), via scikit-image", ("night", "space", "dark"), False),
    "skimage/camera": ("skimage", "data/camera.png", "", "CC0-1.0", "Lav Varshney (CC0), via scikit-image", ("people", "grey"), True),
    "skimage/grass": ("skimage", "data/grass.png", "", "CC0-1.0", "CC0Textures (CC0), via scikit-image", ("texture",), True),
    "skimage/brick": ("skimage", "data/brick.png", "", "CC0-1.0", "CC0Textures (CC0), via scikit-image", ("texture",), True),
    "skimage/gravel": ("skimage", "data/gravel.png", "", "CC0-1.0", "CC0Textures (CC0), via scikit-image", ("texture",), True),
    # matplotlib's sample data: the official US Navy portrait of Grace Hopper (1984), a work of the US federal
    # government (public domain); the file's JPEG comment names its source, Wikimedia Commons File:Grace_Hopper.jpg.
    "matplotlib/grace_hopper": ("matplotlib", "mpl-data/sample_data/grace_hopper.jpg", "a8ca6d734765703b", "public-domain", "US Navy official photograph of Grace M. Hopper (public domain), via matplotlib", ("people", "portrait", "skin"), False),
}

# Kept out of training: they illustrate docs/gallery.md (../shared/photos may not be committed).
HOLDOUT: tuple[str, ...] = (
    "budgie/extreme-desert-hike",  # sky-dominated (blue sky over an orange dune, tiny hikers)
    "matplotlib/grace_hopper",  # a person
    "budgie/beacon-street-sunset",  # a street / city, backlit
    "budgie/singaporean-cityscape",  # night
)


def _run(cmd: list[str], cwd: Path | None = None) -> None:
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()[-600:]}")


def _apt_options(cache_dir: Path) -> list[str]:
    apt = cache_dir / "apt"
    return [
        "-o", f"Dir::Etc::SourceList={apt / 'sources.list'}", "-o", "Dir::Etc::SourceParts=/dev/null",
        "-o", f"Dir::State::Lists={apt / 'lists'}", "-o", f"Dir::Cache={apt / 'cache'}",
        "-o", "APT::Sandbox::User=root",
    ]


def _fetch_deb(cache_dir: Path, deb: _Deb) -> Path:
    """The unpacked package folder; downloads and unpacks only what is missing.

    Safe when several processes (two trainings) share one cache: the fetch holds an exclusive lock on
    ``cache_dir/.fetch.lock``, and a package folder appears only once it is complete (unpacked beside, renamed).
    """
    root = cache_dir / "x" / f"{deb.package}_{deb.version}"
    if (root / deb.copyright).is_file():
        return root
    import fcntl

    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / ".fetch.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (root / deb.copyright).is_file():  # another process finished it while this one waited
            return root
        return _fetch_deb_locked(cache_dir, deb, root)


def _fetch_deb_locked(cache_dir: Path, deb: _Deb, root: Path) -> Path:
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"{tool} is needed to fetch {deb.package} (a Debian or Ubuntu system)")
    debs = cache_dir / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    have = [p for p in debs.glob(f"{deb.package}_*.deb") if p.name.split("_")[1].replace("%3a", ":") == deb.version]
    if not have:
        apt = cache_dir / "apt"
        (apt / "lists" / "partial").mkdir(parents=True, exist_ok=True)
        (apt / "cache" / "archives" / "partial").mkdir(parents=True, exist_ok=True)
        (apt / "sources.list").write_text(_APT_SOURCES)
        if not any((apt / "lists").glob("*_Packages*")):
            _run(["apt-get", *_apt_options(cache_dir), "update"])
        _run(["apt-get", *_apt_options(cache_dir), "download", f"{deb.package}={deb.version}"], cwd=debs)
        have = sorted(debs.glob(f"{deb.package}_*.deb"))
    tmp = root.with_name(f"{root.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    _run(["dpkg-deb", "-x", str(have[0]), str(tmp)])
    shutil.rmtree(root, ignore_errors=True)
    tmp.rename(root)
    return root


def _sha16(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _check(path: Path, sha16: str, deb: _Deb, allow_list: str) -> None:
    """Refuse a file that is not the one whose licence was read (a pinned package rebuilt with other bytes)."""
    if _sha16(path) != sha16:
        raise RuntimeError(f"{path} is not the file the allow-list was checked on (sha256 {_sha16(path)}..., "
                           f"expected {sha16}...): re-read {deb.copyright} and update {allow_list}")


def _wheel_root(dist: str) -> Path:
    import importlib

    return Path(importlib.import_module(dist).__file__ or "").parent


def _all_sources(cache_dir: Path, *, wheels: bool = True) -> list[Source]:
    cache_dir = Path(cache_dir).resolve()
    out: list[Source] = []
    roots = {key: _fetch_deb(cache_dir, deb) for key, deb in _DEBS.items()}
    for name, e in _ENTRIES.items():
        deb = _DEBS[e.deb]
        path = roots[e.deb] / e.inner
        _check(path, e.sha16, deb, "training/sources.py")
        out.append(Source(path=path, name=name, licence=e.licence, origin=f"debian:{deb.package}={deb.version}",
                          attribution=e.attribution, tags=e.tags))
    if wheels:
        for name, (dist, inner, sha16, licence, credit, tags, grey) in _WHEEL_PHOTOS.items():
            try:
                path = _wheel_root(dist) / inner
            except ImportError:
                continue  # the wheel is not installed: its photos are simply not part of the pool
            if not path.is_file() or (sha16 and _sha16(path) != sha16):
                continue
            out.append(Source(path=path, name=name, licence=licence, origin=f"wheel:{dist}", attribution=credit,
                              tags=tags, grey=grey))
    return out


def collect(cache_dir: Path, *, wheels: bool = True) -> list[Source]:
    """Every allow-listed training photo, holdout excluded; fetches the Debian packages into ``cache_dir`` once.

    ``wheels=False`` leaves out the photos from installed wheels (scikit-image, matplotlib). The order is fixed
    (allow-list order), so a seeded sampler over the list is reproducible. Raises RuntimeError when apt-get is
    missing or the download fails, naming the command.
    """
    return [s for s in _all_sources(cache_dir, wheels=wheels) if s.name not in HOLDOUT]


def holdout(cache_dir: Path) -> list[Source]:
    """The 4 photos kept out of training (sky, person, street at sunset, night city), in ``HOLDOUT`` order."""
    by_name = {s.name: s for s in _all_sources(cache_dir)}
    return [by_name[n] for n in HOLDOUT if n in by_name]


def load_rgb(source: Source | Path, *, long_side: int | None = None) -> NDArray[np.uint8]:
    """uint8 RGB HxWx3 of a source; ``long_side`` downsizes (never enlarges) with a Lanczos filter.

    JPEGs are decoded at a reduced scale first when that is still >= 2x ``long_side`` (fast on 4K wallpapers).
    """
    from PIL import Image

    path = source.path if isinstance(source, Source) else Path(source)
    with Image.open(path) as im:
        if long_side is not None and im.format == "JPEG":
            scale = max(im.size) / (2 * long_side)
            if scale >= 2:
                im.draft("RGB", (im.size[0] // int(scale), im.size[1] // int(scale)))
        im = im.convert("RGB")
        if long_side is not None and max(im.size) > long_side:
            k = long_side / max(im.size)
            im = im.resize((max(1, round(im.size[0] * k)), max(1, round(im.size[1] * k))), Image.Resampling.LANCZOS)
        return np.asarray(im, dtype=np.uint8).copy()


if __name__ == "__main__":  # python -m training.sources [CACHE_DIR]: fetch everything, list it
    import sys

    cache = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent / "runs" / "sources"
    train, held = collect(cache), holdout(cache)
    for s in train:
        print(f"train    {s.licence:14s} {s.origin:44s} {s.name}")
    for s in held:
        print(f"holdout  {s.licence:14s} {s.origin:44s} {s.name}  {s.path}")
    print(f"{len(train)} training photos, {len(held)} held out")
