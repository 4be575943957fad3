"""The IR contract between converters and runtime: ``models/<name>/{model.xml, model.bin, manifest.yaml}``.

The converter writes the manifest (``edge_anime_converters.manifest``, from the repository's ``converters/``); the runtime reads it here and refuses an IR
whose ``.bin`` does not hash to what the manifest says, so a half-copied or swapped model never serves.
Hashing 4-8 MB takes ~10 ms; the result is cached per (path, size, mtime) so reloads stay cheap.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ModelError
from .locations import bundled_models_dir
from .yamlload import YamlError, load_bounded

MANIFEST_NAME = "manifest.yaml"
MANIFEST_FORMAT = 1
HASH_CHUNK_BYTES = 1 << 20

_hash_cache: dict[tuple[str, int, int], str] = {}


@dataclass(frozen=True)
class ModelInfo:
    """A resolved, checked model: where its files are and what the manifest promises."""

    name: str
    xml: Path
    bin: Path
    precision: str
    manifest: dict[str, Any] = field(repr=False)

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
    def bin_sha256(self) -> str:
        return str(self.manifest["ir"]["bin_sha256"])


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
        raise ModelError(f"{path}: 'ir' has no xml_sha256 (written before the graph was pinned): "
                         f"{repair_hint(directory)}")
    return data


def load_model_info(directory: Path, *, verify: bool = True) -> ModelInfo:
    """Read a model folder's manifest and, with ``verify``, check the ``.bin`` against its sha256."""
    manifest = read_manifest(directory)
    xml = directory / manifest["ir"]["xml"]
    bin_path = directory / manifest["ir"]["bin"]
    for path in (xml, bin_path):
        if not path.is_file():
            raise ModelError(f"{path}: missing; the manifest in {directory} names it; {repair_hint(directory)}")
    info = ModelInfo(
        name=str(manifest["name"]),
        xml=xml,
        bin=bin_path,
        precision=str(manifest["precision"]),
        manifest=manifest,
    )
    if verify:
        for path, expected in ((xml, str(manifest["ir"]["xml_sha256"])), (bin_path, info.bin_sha256)):
            _check_digest(path, expected, directory=directory)
    return info


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

    A bare name is looked up as ``<dir>/<name>/`` in each of ``search_dirs`` in order.
    """
    path = Path(spec)
    if path.suffix == ".xml":
        if not path.is_file():
            raise ModelError(f"model.path: {path} does not exist")
        return load_model_info(path.parent, verify=verify)
    if path.is_dir():
        return load_model_info(path, verify=verify)
    if len(path.parts) == 1:
        for base in search_dirs:
            candidate = base / str(spec)
            if (candidate / MANIFEST_NAME).is_file():
                return load_model_info(candidate, verify=verify)
        looked = ", ".join(str(d) for d in search_dirs) or "(no model folders configured)"
        raise ModelError(
            f"model.path: no installed model named '{spec}' in {looked}; "
            "list them with 'edge-anime models list' or give the path of a model.xml "
            f"(if '{spec}' is the bundled style, {REINSTALL_HINT})"
        )
    raise ModelError(f"model.path: {path} does not exist (expected a model.xml, a model folder or a name)")


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
