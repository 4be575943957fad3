"""Load a checkpoint (state dict, TorchScript archive or ONNX file) into something we can convert and verify.

The kind is read from the bytes, not trusted from the extension: a ``.pt`` may be a ``torch.save`` zip
(``data.pkl`` inside), a TorchScript archive (``constants.pkl`` and ``code/`` inside) or an old-style raw
pickle; an ONNX file is a protobuf whose first field is ``ir_version``. Every failure is a ``SourceError``
that says what was found, because the person converting usually downloaded the file and cannot see inside.
"""
from __future__ import annotations

import hashlib
import pickle
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edge_anime.errors import ModelError

from .generator import KNOWN_UPSAMPLE_ALIGN
from .samples import to_nchw_float, to_u8_hwc

KINDS = ("state_dict", "torchscript", "onnx")
PICKLE_PROTOCOL_BYTE = b"\x80"          # first byte of a pickle (protocol >= 2): old-style torch.save
ZIP_LOCAL_HEADER = b"PK\x03\x04"
ONNX_FIRST_BYTE = b"\x08"               # protobuf field 1 (ir_version), varint
LIST_AT_MOST = 6                        # keys shown per category in an error message

Reference = Callable[[np.ndarray], np.ndarray]


class SourceError(ModelError):
    """A checkpoint that cannot be converted; the message names the file and what was found in it."""


@dataclass(frozen=True)
class Source:
    """A loaded checkpoint: ``module`` (torch) or ``onnx_path`` is set, never both.

    ``reference`` maps u8 RGB [H, W, 3] to u8 RGB with the source framework itself (PyTorch, or ONNX
    Runtime for ONNX files), with the same round((x + 1) * 127.5) clamp the IR applies.
    """

    path: Path
    kind: str
    upsample_align: bool | None      # None: baked into a TorchScript/ONNX graph and not readable
    layout: str = "NCHW"             # the float model's input layout (ONNX may be NHWC)
    output_layout: str = "NCHW"
    module: Any = None
    onnx_path: Path | None = None

    @property
    def reference_name(self) -> str:
        return "onnxruntime" if self.kind == "onnx" else "pytorch"

    def float_ov_model(self) -> Any:
        """The float OpenVINO model (no u8 wrapping) with dynamic H and W."""
        import openvino as ov

        if self.kind == "onnx":
            shape = [1, 3, -1, -1] if self.layout == "NCHW" else [1, -1, -1, 3]
            try:
                return ov.convert_model(str(self.onnx_path), input=[shape])
            except Exception as exc:  # OpenVINO raises plain RuntimeError/OpConversionFailure subclasses
                raise SourceError(f"{self.path}: OpenVINO could not convert this ONNX model: {exc}") from exc
        from .ir import torch_to_float_ov

        return torch_to_float_ov(self.module)

    def reference_fn(self) -> Reference:
        """The source framework's own run of this checkpoint; a ``TorchReference`` for torch sources (a
        state dict's also measures GroupNorm statistics: TorchScript modules take no hooks)."""
        if self.kind == "onnx":
            return _onnx_reference(self)
        return TorchReference(self.module, with_stats=self.kind == "state_dict")


def resolve_upsample_align(name: str, path: Path, explicit: bool | None) -> bool:
    """An explicit choice wins; else the published default for the model name or the file's stem; else True."""
    if explicit is not None:
        return explicit
    for key in (name, path.stem):
        if key in KNOWN_UPSAMPLE_ALIGN:
            return KNOWN_UPSAMPLE_ALIGN[key]
    return True


def detect_kind(path: Path) -> str:
    """``state_dict``, ``torchscript`` or ``onnx`` from the file's bytes (see the module docstring)."""
    if not path.is_file():
        raise SourceError(f"{path}: no such file")
    with open(path, "rb") as fh:
        head = fh.read(8)
    if not head:
        raise SourceError(f"{path}: empty file (0 bytes); download it again")
    if zipfile.is_zipfile(path):
        return _zip_kind(path)
    if head.startswith(ZIP_LOCAL_HEADER):
        raise SourceError(f"{path}: a damaged or truncated zip archive (no central directory); torch files are "
                          "zip archives, so the download was probably cut short: fetch it again")
    if head.startswith(PICKLE_PROTOCOL_BYTE):
        return "state_dict"  # torch.save before 1.6 wrote a raw pickle; torch.load still reads it
    if path.suffix.lower() == ".onnx" or head.startswith(ONNX_FIRST_BYTE):
        return "onnx"
    looks = "text" if _looks_like_text(head) else f"bytes {head[:4].hex(' ')}"
    raise SourceError(f"{path}: not a torch file, TorchScript archive or ONNX model (it starts with {looks}); "
                      "expected a PyTorch state dict (.pt/.pth), a TorchScript archive or an .onnx file")


def _zip_kind(path: Path) -> str:
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
    if any(n.endswith("/constants.pkl") or "/code/" in n for n in names):
        return "torchscript"
    if any(n.endswith("data.pkl") for n in names):
        return "state_dict"
    shown = ", ".join(names[:LIST_AT_MOST])
    raise SourceError(f"{path}: a zip archive but not a torch file (no data.pkl or constants.pkl; found {shown})")


def _looks_like_text(head: bytes) -> bool:
    return all(32 <= b < 127 or b in (9, 10, 13) for b in head)


def load_source(path: Path, *, name: str, upsample_align: bool | None = None) -> Source:
    """Load any supported checkpoint; raises ``SourceError`` naming what is wrong."""
    kind = detect_kind(path)
    if kind == "onnx":
        return load_onnx(path)
    return load_torch_source(path, name=name, upsample_align=upsample_align, kind=kind)


def load_torch_source(path: Path, *, name: str, upsample_align: bool | None, kind: str | None = None) -> Source:
    """A state dict (strictly matched to our Generator) or a TorchScript archive, as a torch module."""
    kind = kind or detect_kind(path)
    if kind == "torchscript":
        return load_torchscript(path)
    if kind != "state_dict":
        raise SourceError(f"{path}: a {kind} file, expected a PyTorch checkpoint")
    align = resolve_upsample_align(name, path, upsample_align)
    module = generator_from_state_dict(load_state_dict(path), path=path, upsample_align=align)
    return Source(path=path, kind="state_dict", upsample_align=align, module=module)


def load_state_dict(path: Path) -> dict[str, Any]:
    """``torch.load(weights_only=True)``: a checkpoint is data, so a pickle that wants to run code is refused."""
    import torch

    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SourceError(
            f"{path}: a pickle that needs code to load (torch.load(weights_only=True) refused it: {first}); "
            "only plain state dicts are accepted, because unpickling a full object runs arbitrary code"
        ) from exc
    except (RuntimeError, EOFError, OSError, ValueError) as exc:
        raise SourceError(f"{path}: not a readable torch file ({type(exc).__name__}: {exc})") from exc
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        found = type(obj).__name__
        if isinstance(obj, dict):
            found = "a dict with keys " + ", ".join(map(str, list(obj)[:LIST_AT_MOST]))
        raise SourceError(f"{path}: expected a state dict (parameter name -> tensor), found {found}")
    return obj


def width_of(state: dict[str, Any]) -> float:
    """The Generator width a state dict was saved at, from its first conv's filters (32 at the published
    width 1.0; a distilled student, training/distill.py, has 16). The keys are the same at every width."""
    first = state.get("block_a.0.1.weight")
    return float(first.shape[0]) / 32.0 if first is not None and getattr(first, "ndim", 0) == 4 else 1.0


def state_dict_problems(state: dict[str, Any]) -> list[str]:
    """Missing keys, unexpected keys and wrong shapes against our Generator (at the state dict's own width),
    each as one readable line."""
    from .generator import Generator

    expected = {k: tuple(v.shape) for k, v in Generator(width=width_of(state)).state_dict().items()}
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    shapes = [f"{k}: {tuple(state[k].shape)} (expected {expected[k]})"
              for k in expected if k in state and tuple(state[k].shape) != expected[k]]
    problems = []
    for label, items in (("missing keys", missing), ("unexpected keys", unexpected), ("wrong shapes", shapes)):
        if items:
            more = f" and {len(items) - LIST_AT_MOST} more" if len(items) > LIST_AT_MOST else ""
            problems.append(f"{len(items)} {label}: {', '.join(items[:LIST_AT_MOST])}{more}")
    if unexpected and all(k.startswith("module.") for k in unexpected):
        problems.append("every key starts with 'module.': a DataParallel save; strip that prefix first")
    return problems


def generator_from_state_dict(state: dict[str, Any], *, path: Path, upsample_align: bool) -> Any:
    """Our Generator with ``state`` loaded strictly; a mismatch lists what differs."""
    from .generator import Generator

    problems = state_dict_problems(state)
    if problems:
        raise SourceError(f"{path}: not an AnimeGANv2 generator state dict: " + "; ".join(problems))
    module = Generator(upsample_align=upsample_align, width=width_of(state))
    module.load_state_dict(state, strict=True)
    return module.eval()


def load_torchscript(path: Path) -> Source:
    """A TorchScript archive (the CPU tuning write-up's ``animeganv2_jit.pt``); its upsampling is baked in."""
    import torch

    try:
        module = torch.jit.load(str(path), map_location="cpu")
    except (RuntimeError, ValueError, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SourceError(f"{path}: a TorchScript archive that does not load: {first}") from exc
    align = getattr(module, "upsample_align", None)
    return Source(path=path, kind="torchscript", upsample_align=align if isinstance(align, bool) else None,
                  module=module.eval())


def load_onnx(path: Path) -> Source:
    """An ONNX generator with NCHW or NHWC input in [-1, 1]; the layout is read from the input shape."""
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # onnx raises DecodeError/ValueError depending on version
        raise SourceError(f"{path}: not a readable ONNX model ({type(exc).__name__}: {exc})") from exc
    initializers = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initializers]
    if len(inputs) != 1 or len(model.graph.output) != 1:
        raise SourceError(f"{path}: expected one image input and one output, found {len(inputs)} inputs and "
                          f"{len(model.graph.output)} outputs")
    layout = _onnx_layout(path, "input", inputs[0])
    output_layout = _onnx_layout(path, "output", model.graph.output[0], default=layout)
    return Source(path=path, kind="onnx", upsample_align=None, layout=layout, output_layout=output_layout,
                  onnx_path=path)


def _onnx_layout(path: Path, what: str, value: Any, *, default: str | None = None) -> str:
    dims = [d.dim_value if d.HasField("dim_value") else None for d in value.type.tensor_type.shape.dim]
    if len(dims) == 4 and dims[1] == 3:
        return "NCHW"
    if len(dims) == 4 and dims[3] == 3:
        return "NHWC"
    if default is not None and len(dims) == 4:
        return default
    shown = ["?" if d is None else d for d in dims]
    raise SourceError(f"{path}: {what} '{value.name}' has shape {shown}; expected [N, 3, H, W] or [N, H, W, 3]")


class TorchReference:
    """The PyTorch side of verification, a ``Reference`` (u8 RGB in, u8 RGB out) that also gives, for a
    state dict's plain generator, each GroupNorm's statistics of the same forward (``stats``: the truth the
    tiling pair is held to, ``two_pass.run_with_stats``).

    Why it keeps what it computed: the plain IR and the tiling pair are verified on the same images, and the
    torch forward of each image was run three times (the plain IR's reference, the pair's reference, the
    statistics), a third of a conversion's time on a 2-core box. Keyed by the image's bytes and shape, so a
    different image never gets another's answer; a few MB for the default images.
    """

    def __init__(self, module: Any, *, with_stats: bool) -> None:
        self._module = module
        self._with_stats = with_stats
        self._done: dict[tuple[tuple[int, ...], bytes], tuple[np.ndarray, np.ndarray | None]] = {}

    def __call__(self, rgb: np.ndarray) -> np.ndarray:
        return self._run(rgb)[0]

    def stats(self, rgb: np.ndarray) -> np.ndarray:
        """[1, K, 2] float32: each GroupNorm input's mean and biased variance for ``rgb`` (state dicts only)."""
        stats = self._run(rgb)[1]
        if stats is None:
            raise ValueError("GroupNorm statistics are measured on a state dict's generator only")
        return stats

    def _run(self, rgb: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        key = (tuple(rgb.shape), hashlib.sha1(np.ascontiguousarray(rgb).tobytes(), usedforsecurity=False).digest())
        if key not in self._done:
            self._done[key] = self._forward(rgb)
        return self._done[key]

    def _forward(self, rgb: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        import torch

        x = torch.from_numpy(to_nchw_float(rgb))
        if not self._with_stats:
            with torch.no_grad():
                return to_u8_hwc(self._module(x).numpy()), None
        from .two_pass import run_with_stats

        out, stats = run_with_stats(self._module, x)
        return to_u8_hwc(out.numpy()), stats.numpy().astype(np.float32)


def _onnx_reference(source: Source) -> Reference:
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise SourceError("verifying an ONNX source needs ONNX Runtime as the reference: "
                          "pip install onnxruntime") from exc
    session = ort.InferenceSession(str(source.onnx_path), providers=["CPUExecutionProvider"])
    input_name = session.get_inputs()[0].name

    def run(rgb: np.ndarray) -> np.ndarray:
        x = to_nchw_float(rgb)
        if source.layout == "NHWC":
            x = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
        out = session.run(None, {input_name: x})[0]
        if source.output_layout == "NHWC":
            out = out.transpose(0, 3, 1, 2)
        return to_u8_hwc(out)

    return run
