"""The IR contract between converters and runtime: ``models/<name>/{model.xml, model.bin, manifest.yaml}``.

A style folder may hold more than one verified IR of the same weights (``variants:`` in the manifest, e.g.
an INT8 IR beside the FP16 one). The top-level keys stay the default variant's, so a format-1 manifest
written before variants existed reads as a style with one variant, named by its precision.

The converter writes the manifest (``edge_anime_converters.manifest``, from the repository's ``converters/``);
the runtime reads it here and refuses an IR whose ``.xml`` or ``.bin`` does not hash to what the manifest
says, so a half-copied, edited or swapped model never serves.
Hashing 4-8 MB takes ~10 ms; the result is cached per (path, size, mtime) so reloads stay cheap.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.fields import FieldInfo

from .config import LIVE_QUALITY_FLOOR_DB, close_matches, did_you_mean
from .errors import ConfigError, ModelError
from .imaging.palette import MAX_CHROMA, MAX_COLOURS, MIN_CHROMA, MIN_COLOURS
from .locations import bundled_models_dir
from .yamlload import YamlError, load_bounded

MANIFEST_NAME = "manifest.yaml"
MANIFEST_FORMAT = 1
VARIANT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$")
# What a variant entry may replace of the top-level keys; everything else (input, output, style) is shared.
VARIANT_KEYS = ("precision", "ir", "verification", "quantization", "quality", "versions", "created", "role", "tiling",
                "uses", "distilled")
# What a variant is for (``uses:``; ``pictures`` when absent). A generator distilled from the style's own (issue
# 43: half the width, ~3x the frames) holds the look at the live booth's frame size, where it was measured
# against its teacher, and not a photo's: it serves ``live`` only, and the pictures' start-up choice passes it by.
VARIANT_USES = ("pictures", "live")
HASH_CHUNK_BYTES = 1 << 20
# Variant entries with a ``role`` are the two IRs of tiled full-resolution inference (pass 1 returns each
# GroupNorm's statistics, pass 2 takes them; docs/contracts.md), in the order they run.
TILING_ROLES = ("gn_stats_out", "gn_stats_in")

MAX_SIBLINGS = 10_000  # entries of a folder compared with a misspelt model path: a huge folder is not read whole

_hash_cache: dict[tuple[str, int, int], str] = {}



class ManifestSection(BaseModel):
    """One optional style-wide mapping of the manifest (``KEY:``), its keys, their types, bounds and defaults.

    The schema is written once, as the class's fields: ``section`` reads a manifest's mapping into it (the
    defaults for what it leaves out) and, on a bad value, says the file, the key and what the field takes;
    ``to_manifest`` is what the converter writes."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    KEY: ClassVar[str]

    def to_manifest(self) -> dict[str, Any]:
        return self.model_dump()


class ToneSpec(ManifestSection):
    """The style's ``tone:`` mapping: the tone guard after inference (``edge_anime.imaging.tone``).

    A manifest without ``tone`` gets these defaults: the guard is for every style, published checkpoints
    converted before the key existed too, because a washed-out or colour-cast picture is never a style's
    intent and the guard leaves a picture with enough contrast and grey greys as it is. A style whose tint
    of whites is the point sets ``neutral: false``; one that must come out exactly as the IR gives it sets
    ``enabled: false``."""

    KEY: ClassVar[str] = "tone"
    enabled: bool = True  # run the guard at all
    strength: Annotated[float, Field(ge=0, le=1)] = 1.0  # how far the range stretch and the pull toward grey go
    neutral: bool = True  # also pull the output to grey where the photo is neutral


class PaletteSpec(ManifestSection):
    """The style's ``palette:`` mapping: the cel palette after the tone guard (``edge_anime.imaging.palette``).

    Off unless the manifest turns it on: unlike the tone guard it is a look, not a repair, and a published
    checkpoint's painterly gradients are its look."""

    KEY: ClassVar[str] = "palette"
    enabled: bool = False
    colours: Annotated[int, Field(ge=MIN_COLOURS, le=MAX_COLOURS)] = 256  # at most this many flat colours a picture
    chroma: Annotated[float, Field(ge=MIN_CHROMA, le=MAX_CHROMA)] = 1.0  # the entries' chroma times this


class InkSpec(ManifestSection):
    """The style's ``ink:`` mapping: lines from the photo's structure inked over the picture
    (``edge_anime.imaging.ink``). Off unless the manifest turns it on: a look, as the palette is, and a published
    checkpoint's pictures are its own look."""

    KEY: ClassVar[str] = "ink"
    enabled: bool = False
    strength: Annotated[float, Field(ge=0, le=1)] = 0.8  # how dark the lines: 1 darkens to 0.15 of the colour


class FaceSpec(ManifestSection):
    """The style's ``faces:`` mapping: how ``image.faces: auto`` crops a face for this style (``edge_anime.faces``).

    ``crop_px`` is the side of the square the face is stylized at: the style's native face scale, 512 for the
    published face styles, which were trained on 512 px aligned face crops. ``scale`` is the crop's side in face
    boxes: at 2.0 the detector's box (brows to chin) fills half of it, as a face fills an aligned training crop."""

    KEY: ClassVar[str] = "faces"
    crop_px: Annotated[int, Field(ge=64, le=1024, multiple_of=4)] = 512  # an input side the IR takes
    scale: Annotated[float, Field(ge=1.2, le=4.0)] = 2.0


# The style-wide mappings after inference, in the order read_manifest checks them.
SECTIONS: tuple[type[ManifestSection], ...] = (ToneSpec, PaletteSpec, InkSpec, FaceSpec)


@dataclass(frozen=True)
class VariantSpec:
    """One IR of a style, as its manifest lists it (not yet hash-checked)."""

    name: str
    precision: str
    xml: Path
    bin: Path
    quality_db: float | None  # worst image's PSNR against FP32, as the converter measured it; None: unknown
    default: bool  # the manifest's top-level IR: what serves when nothing else is chosen
    uses: tuple[str, ...] = ("pictures",)  # VARIANT_USES: what the variant may be chosen for
    quality_mean_db: float | None = None  # its mean PSNR against its reference (FP32, or the teacher)


@dataclass(frozen=True)
class ModelInfo:
    """A resolved, checked model: where its files are and what the manifest promises.

    ``manifest`` is the view of the variant this info points to: the style's manifest with that variant's
    keys (precision, ir, verification, quantization, quality) in place of the default's, so readers of the
    manifest see the IR they run."""

    name: str
    xml: Path
    bin: Path
    precision: str
    manifest: dict[str, Any] = field(repr=False)
    variant: str = ""  # the variant's name; "" is read as the default's (its precision)
    style_manifest: dict[str, Any] | None = field(default=None, repr=False, compare=False)  # the file as read

    @property
    def directory(self) -> Path:
        return self.xml.parent

    @property
    def style(self) -> str:
        """The word used in output names (``{style}``); the model name unless the manifest says otherwise."""
        return str(self.manifest.get("style") or self.name)

    @property
    def size_multiple(self) -> int:
        """Smallest multiple H and W must have for the output to come back at the input size."""
        return int(self.manifest.get("input", {}).get("size_multiple", 4))

    @property
    def tone(self) -> ToneSpec:
        """The style's tone guard settings (``tone:`` in the manifest, checked when it was read)."""
        return section(self.style_manifest or self.manifest, ToneSpec, path=self.directory / MANIFEST_NAME)

    @property
    def faces(self) -> FaceSpec:
        """How this style stylizes a face on its own (``faces:`` in the manifest, checked when it was read)."""
        return section(self.style_manifest or self.manifest, FaceSpec, path=self.directory / MANIFEST_NAME)

    @property
    def palette(self) -> PaletteSpec:
        """The style's cel palette settings (``palette:`` in the manifest, checked when it was read)."""
        return section(self.style_manifest or self.manifest, PaletteSpec, path=self.directory / MANIFEST_NAME)

    @property
    def ink(self) -> InkSpec:
        """The style's ink lines (``ink:`` in the manifest, checked when it was read)."""
        return section(self.style_manifest or self.manifest, InkSpec, path=self.directory / MANIFEST_NAME)

    @property
    def bin_sha256(self) -> str:
        return str(self.manifest["ir"]["bin_sha256"])

    @property
    def variant_name(self) -> str:
        return self.variant or self.precision

    @property
    def quality_db(self) -> float | None:
        """This IR's worst PSNR against FP32 (see ``quality_of``)."""
        return quality_of(self.manifest)

    def variants(self) -> list[VariantSpec]:
        """Every IR of the style that runs a picture on its own, the default first (one entry for a manifest
        without ``variants``). The tiling pair (entries with a ``role``) is not among them: ``tiling_pair``."""
        base = self.style_manifest or self.manifest
        directory = self.directory
        default_name = str(base["precision"])
        found = [VariantSpec(default_name, default_name, directory / base["ir"]["xml"],
                             directory / base["ir"]["bin"], quality_of(base), True)]
        for name, entry in (base.get("variants") or {}).items():
            if entry.get("role"):
                continue
            found.append(VariantSpec(str(name), str(entry["precision"]), directory / entry["ir"]["xml"],
                                     directory / entry["ir"]["bin"], quality_of(entry), False,
                                     tuple(entry.get("uses") or ("pictures",)), quality_of(entry, figure="mean")))
        return found

    def tiling_pair(self, *, verify: bool = True) -> tuple[ModelInfo, ModelInfo] | None:
        """(pass 1, pass 2) of tiled full-resolution inference (``image.resize: full``), hash-checked with
        ``verify``; None when the style has none. The pair at this IR's precision is preferred, else the first
        listed (an int8 style tiles with its float pair: the statistics need float)."""
        base = self.style_manifest or self.manifest
        entries = base.get("variants") or {}
        pairs: dict[str, dict[str, str]] = {}
        for name, entry in entries.items():
            if entry.get("role") in TILING_ROLES:
                pairs.setdefault(str(entry["precision"]), {})[str(entry["role"])] = str(name)
        complete = {p: names for p, names in pairs.items() if len(names) == len(TILING_ROLES)}
        if not complete:
            return None
        names = complete.get(self.precision) or next(iter(complete.values()))
        first, second = (_info_for(self.directory, base, entries[names[role]], variant=names[role], verify=verify)
                         for role in TILING_ROLES)
        return first, second

    def variant_names(self) -> list[str]:
        return [v.name for v in self.variants()]

    def live_variant(self) -> str | None:
        """The style's first IR made for live frames (``uses: [live]``) that holds LIVE_QUALITY_FLOOR_DB mean
        against its teacher; None when it has none. One rule for every place that runs "the live variant"
        (``http.live.variant: auto``, ``video.variant: live``), so the booth's mirror and a clip never disagree
        on which student is good enough."""
        for spec in self.variants():
            if "live" in spec.uses and (spec.quality_mean_db or 0.0) >= LIVE_QUALITY_FLOOR_DB:
                return spec.name
        return None

    def with_variant(self, name: str, *, verify: bool = True) -> ModelInfo:
        """The same style pointed at variant ``name`` (its files hash-checked with ``verify``).

        An unknown name is a ``ConfigError`` naming ``model.variant`` and listing what the style has: the
        operator pinned it, and the fix is in the config."""
        base = self.style_manifest or self.manifest
        names = self.variant_names()
        if name not in names:
            raise ConfigError(
                f"model.variant: '{name}' is not a variant of style {self.name} "
                f"({self.directory / MANIFEST_NAME}); expected one of: {', '.join(names)}, or auto")
        if name == names[0]:
            return _info_for(self.directory, base, base, variant="", verify=verify)
        entry = base["variants"][name]
        return _info_for(self.directory, base, entry, variant=name, verify=verify)


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in chunks so a large checkpoint never sits in memory twice."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(HASH_CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _cached_sha256(path: Path) -> str:
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _hash_cache:
        _hash_cache[key] = sha256_file(path)
    return _hash_cache[key]


REINSTALL_HINT = "the bundled style is damaged: reinstall the package (pip install --force-reinstall edge-anime)"


def repair_hint(directory: Path) -> str:
    """What fixes a broken model folder: a reinstall for the bundled style, a new copy or conversion otherwise."""
    try:
        Path(directory).resolve().relative_to(bundled_models_dir().resolve())
    except ValueError:
        return "copy the model folder again or re-run 'edge-anime convert'"
    return REINSTALL_HINT


def read_manifest(directory: Path) -> dict[str, Any]:
    """Parse ``manifest.yaml`` in ``directory``; a missing or malformed one is a ``ModelError``."""
    path = directory / MANIFEST_NAME
    if not path.is_file():
        raise ModelError(f"{path}: no manifest.yaml; convert the model with 'edge-anime convert' to get one")
    try:
        data = load_bounded(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ModelError(f"{path}: cannot read it ({exc.strerror}); {repair_hint(directory)}") from None
    except YamlError as exc:
        raise ModelError(f"{path}: {exc}") from None
    if not isinstance(data, dict):
        raise ModelError(f"{path}: expected a mapping, got {type(data).__name__}")
    for key in ("name", "precision", "ir"):
        if key not in data:
            raise ModelError(f"{path}: missing key '{key}'")
    ir = data["ir"]
    if not isinstance(ir, dict) or not all(k in ir for k in ("xml", "bin", "bin_sha256")):
        raise ModelError(f"{path}: 'ir' must have xml, bin, xml_sha256 and bin_sha256")
    if "xml_sha256" not in ir:
        # The graph decides what the weights do (an edited Clamp serves black pictures): it is pinned too.
        raise ModelError(
            f"{path}: 'ir' has no xml_sha256 (written before the graph was pinned): {repair_hint(directory)}"
        )
    _check_variants(path, data)
    for spec in SECTIONS:
        section(data, spec, path=path)
    return data


S = TypeVar("S", bound=ManifestSection)


def section(manifest: dict[str, Any], spec: type[S], *, path: Path) -> S:
    """The manifest's ``spec.KEY:`` mapping as ``spec`` (its defaults for what the mapping leaves out; all of
    them when the key is absent). A bad value is a ``ModelError`` naming ``path``, the key and what it takes."""
    mapping = manifest.get(spec.KEY)
    if mapping is None:
        return spec()
    if not isinstance(mapping, dict):
        example = ", ".join(f"{key}: {_yaml_word(value)}" for key, value in spec().to_manifest().items())
        raise ModelError(f"{path}: {spec.KEY}: expected a mapping like {{{example}}}, got {mapping!r}")
    try:
        return spec.model_validate(mapping)
    except ValidationError as exc:
        error = exc.errors()[0]
        key = str(error["loc"][0]) if error["loc"] else ""
        where = f"{path}: {spec.KEY}.{key}"
        if error["type"] == "extra_forbidden":
            raise ModelError(f"{where}: unknown key; expected one of: {', '.join(spec.model_fields)}") from None
        raise ModelError(f"{where}: expected {_takes(spec.model_fields[key])}, got {error['input']!r}") from None


def _takes(field: FieldInfo) -> str:
    """What a section's field takes, in the manifest's words: "true or false", "a number from 0 to 1"..."""
    if field.annotation is bool:
        return "true or false"
    bounds = {type(m).__name__: m for m in field.metadata}
    low, high = getattr(bounds.get("Ge"), "ge", None), getattr(bounds.get("Le"), "le", None)
    step = getattr(bounds.get("MultipleOf"), "multiple_of", None)
    kind = f"a multiple of {step}" if step else "a whole number" if field.annotation is int else "a number"
    return f"{kind} from {low} to {high}"


def _yaml_word(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _check_variants(path: Path, data: dict[str, Any]) -> None:
    """``variants:`` is optional; when present, each entry names an IR in this folder with both digests."""
    variants = data.get("variants")
    if variants is None:
        return
    if not isinstance(variants, dict):
        raise ModelError(f"{path}: 'variants' must map a variant name to its IR, got {type(variants).__name__}")
    for name, entry in variants.items():
        where = f"{path}: variants.{name}"
        if not isinstance(name, str) or not VARIANT_NAME.match(name) or name == str(data["precision"]):
            raise ModelError(f"{where}: expected a name of letters, digits, '.', '_' or '-' other than the "
                             f"default's ({data['precision']})")
        if not isinstance(entry, dict) or "precision" not in entry or not isinstance(entry.get("ir"), dict):
            raise ModelError(f"{where}: expected a mapping with precision and ir")
        role = entry.get("role")
        if role is not None and role not in TILING_ROLES:
            raise ModelError(f"{where}.role: expected one of {', '.join(TILING_ROLES)}, got {role!r}")
        if role:  # reach_px is optional: manifests written before the blend margin have only margin_px
            tiling = entry.get("tiling") or {}
            for key, value in (("margin_px", tiling.get("margin_px")), ("reach_px", tiling.get("reach_px", 0))):
                if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                    raise ModelError(f"{where}.tiling.{key}: expected a whole number of pixels >= 0, got {value!r}")
        uses = entry.get("uses", ["pictures"])
        if not isinstance(uses, list) or not uses or any(u not in VARIANT_USES for u in uses):
            raise ModelError(f"{where}.uses: expected a list of {', '.join(VARIANT_USES)}, got {uses!r}")
        ir = entry["ir"]
        if not all(k in ir for k in ("xml", "bin", "xml_sha256", "bin_sha256")):
            raise ModelError(f"{where}.ir: must have xml, bin, xml_sha256 and bin_sha256")
        for key in ("xml", "bin"):
            if Path(str(ir[key])).name != str(ir[key]):
                raise ModelError(f"{where}.ir.{key}: expected a file name in the style's folder, got {ir[key]!r}")


def quality_of(entry: dict[str, Any], *, figure: str = "min") -> float | None:
    """An IR's worst-image PSNR (dB) against FP32: ``quality.psnr_db.min`` when the converter wrote it
    (``figure="mean"``: the mean instead; a distilled variant's reference is its teacher, the style's default).

    Manifests written before ``quality`` existed still carry the figure: an INT8 IR's
    ``quantization.psnr_vs_fp32_db`` (vs the FP32 IR on photos), a float IR's ``verification.psnr_db``
    against PyTorch (FP32 weights). None when neither is there: such a variant is never chosen by measure."""
    candidates = [(entry.get("quality") or {}).get("psnr_db")]
    if str(entry.get("precision")) == "int8":
        candidates.append((entry.get("quantization") or {}).get("psnr_vs_fp32_db"))
    else:
        verification = entry.get("verification") or {}
        if verification.get("reference") in ("pytorch", "onnx", "torchscript"):
            candidates.append(verification.get("psnr_db"))
    for found in candidates:
        value = found.get(figure) if isinstance(found, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def _info_for(directory: Path, style: dict[str, Any], entry: dict[str, Any], *, variant: str,
              verify: bool) -> ModelInfo:
    """A ModelInfo for one IR of ``style`` (``entry`` is the style itself for the default)."""
    view = dict(style)
    if entry is not style:
        for key in VARIANT_KEYS:
            view.pop(key, None)
        view.update({k: v for k, v in entry.items() if k in VARIANT_KEYS})
    xml = directory / str(entry["ir"]["xml"])
    bin_path = directory / str(entry["ir"]["bin"])
    for path in (xml, bin_path):
        if not path.is_file():
            raise ModelError(f"{path}: missing; the manifest in {directory} names it; {repair_hint(directory)}")
    info = ModelInfo(name=str(style["name"]), xml=xml, bin=bin_path, precision=str(entry["precision"]),
                     manifest=view, variant=variant, style_manifest=style)
    if verify:
        for path, expected in ((xml, str(entry["ir"]["xml_sha256"])), (bin_path, str(entry["ir"]["bin_sha256"]))):
            _check_digest(path, expected, directory=directory)
    return info


def load_model_info(directory: Path, *, verify: bool = True) -> ModelInfo:
    """Read a model folder's manifest and, with ``verify``, check the default IR against its digests.

    Other variants are checked when chosen (``ModelInfo.with_variant``): a start hashes only what it serves."""
    manifest = read_manifest(directory)
    return _info_for(directory, manifest, manifest, variant="", verify=verify)


def _check_digest(path: Path, expected: str, *, directory: Path) -> None:
    try:
        actual = _cached_sha256(path)
    except OSError as exc:
        raise ModelError(f"{path}: cannot read it ({exc.strerror}); {repair_hint(directory)}") from None
    if actual != expected:
        raise ModelError(
            f"{path}: sha256 {actual[:12]}... does not match the manifest's {expected[:12]}...; "
            f"the IR was changed or half-copied: {repair_hint(directory)}"
        )


def read_ir(info: ModelInfo) -> None:
    """Parse the IR with OpenVINO, as ``run`` does before compiling, so ``config check`` fails where ``run``
    would: a graph that matches its digest can still be one this OpenVINO cannot read."""
    import openvino as ov  # here, not at module level: listing models must stay cheap

    try:
        ov.Core().read_model(str(info.xml), str(info.bin))
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelError(f"{info.xml}: OpenVINO cannot read this IR ({first}); {repair_hint(info.directory)}") from None


def resolve_model(spec: str | Path, *, search_dirs: list[Path], verify: bool = True) -> ModelInfo:
    """Turn ``model.path`` (an ``.xml`` path, a model folder, or an installed name) into a checked model.

    A bare name is looked up as ``<dir>/<name>/`` in each of ``search_dirs`` in order. A name or path that
    does not exist says so and names the closest style or file that does (``config.did_you_mean``): a typo
    such as ``toonn`` is the usual cause, not a damaged install.
    """
    path = Path(spec)
    if path.suffix == ".xml":
        if not path.is_file():
            raise ModelError(f"model.path: {path} does not exist{_near_path(path)} (expected a model.xml, a model "
                             "folder or the name of an installed style)")
        style = load_model_info(path.parent, verify=False)
        named = [v.name for v in style.variants() if v.xml.name == path.name]  # a variant's own .xml pins it
        return style.with_variant(named[0] if named else style.variant_names()[0], verify=verify)
    if is_style_name(spec):  # never a folder of the current directory: ``mkdir toon`` must not shadow the style
        for base in search_dirs:
            candidate = base / str(spec)
            if (candidate / MANIFEST_NAME).is_file():
                return load_model_info(candidate, verify=verify)
        here = f"; a folder {spec} is in the current directory: write ./{spec} to use it" if path.is_dir() else ""
        raise ModelError(f"model.path: no installed model named '{spec}'{here}{_near_name(str(spec), search_dirs)}")
    if path.is_dir():
        return load_model_info(path, verify=verify)
    raise ModelError(f"model.path: {path} does not exist{_near_path(path)} (expected a model.xml, a model folder "
                     "or the name of an installed style)")


def is_style_name(spec: str | Path) -> bool:
    """Whether ``model.path`` names an installed style (``toon``) rather than a path. A path says so by its
    form (``./toon``, ``models/toon``, ``/x/toon``, ``~/toon``, ``model.xml``); a bare name is looked up only
    in the model folders (issue 42: an empty ``toon`` folder in the current directory, or ``stylize photos
    -o toon``, shadowed the bundled style and every later run failed)."""
    if isinstance(spec, Path):
        return False
    return "/" not in spec and not spec.startswith((".", "~")) and not spec.endswith(".xml") and bool(spec)


def style_names(search_dirs: list[Path]) -> list[str]:
    """The names a bare ``model.path`` can take: every folder with a manifest in ``search_dirs`` (the bundled
    styles included, since the config puts their folder last). Only folder names: nothing is read or hashed."""
    names: set[str] = set()
    for base in search_dirs:
        with contextlib.suppress(OSError):
            names.update(c.name for c in base.iterdir() if (c / MANIFEST_NAME).is_file())
    return sorted(names)


def _near_name(spec: str, search_dirs: list[Path]) -> str:
    """The rest of the message for a style name found nowhere: the closest names, what exists, where it looked.
    Only when the bundled folder itself holds no style is the install damaged, and only then is a reinstall
    the advice."""
    names = style_names(search_dirs)
    looked = ", ".join(str(d) for d in search_dirs) or "(no model folders configured)"
    text = did_you_mean(spec, names)
    text += f" (installed: {', '.join(names)}" if names else " (no style is installed"
    text += f"; looked in {looked}); 'edge-anime models list' shows them, or give the path of a model.xml"
    if not style_names([bundled_models_dir()]):
        text += "; the bundled styles are missing from this install: reinstall the package (pip install " \
                "--force-reinstall edge-anime)"
    return text


def _near_path(path: Path) -> str:
    """"; did you mean '<folder>/<sibling>'?" for a model path whose folder exists but whose last part is
    misspelt (``models/toonn``, ``model_in8.xml``); "" otherwise."""
    try:
        siblings = [c.name for c in itertools.islice(path.parent.iterdir(), MAX_SIBLINGS)]
    except OSError:
        return ""
    close = close_matches(path.name, siblings)
    return "; did you mean " + " or ".join(repr(str(path.parent / c)) for c in close) + "?" if close else ""


def list_models(search_dirs: list[Path]) -> list[ModelInfo]:
    """Every model folder with a readable manifest under ``search_dirs`` (not hash-checked: listing is cheap)."""
    found: list[ModelInfo] = []
    for base in search_dirs:
        if not base.is_dir():
            continue
        for child in sorted(base.iterdir()):
            if (child / MANIFEST_NAME).is_file():
                try:
                    found.append(load_model_info(child, verify=False))
                except ModelError:
                    continue
    return found
