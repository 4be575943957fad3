"""Build, verify and describe the two IRs of tiled full-resolution inference (pass 1 and pass 2; see
``two_pass``). Called by ``convert`` for float conversions of a state dict; the result is two entries of the
style's ``variants:`` with a ``role`` (docs/contracts.md section 1), never chosen as a plain variant.

Why no ``.bin`` of their own: the two graphs hold the plain IR's weights. Every constant of pass 1 and pass 2
is looked up by its bytes in the plain IR's ``.bin`` (``model.bin``) and only the few that are missing there
(shape and index constants of the split GroupNorms and the tile resampling, ~2 KB on the toon style) are
appended to it, so the pair costs ~0.3 MB of XML, not another copy of the weights (the bundled style has a
16 MB budget). Appending leaves every offset of the plain IR as it was: its graph and its verification stay
valid, only the manifest's ``bin_sha256`` is rewritten (``convert`` does that).

Verification, like every IR's: pass 1's picture against PyTorch at the precision's floor and its statistics
against PyTorch's; pass 2 fed PyTorch's whole-picture statistics against the plain PyTorch generator at the
same floor (at a size where the whole picture fits, that is exactly what a tiled run must reproduce).
The receptive field is measured on the float torch graph (pass 2 with fixed statistics is purely local:
outside it a perturbation changes nothing, exactly) and written as ``tiling.reach_px``; the blend margin
the runtime uses, ``tiling.margin_px``, is where a tile's border stops mattering to a twentieth of a u8 level
(``measure_blend_margin``): on the toon style 32 px of the 56.
"""
from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .progress import QUIET, Progress
from .samples import load_samples, psnr_db, to_nchw_float
from .verify import VERIFY_CONFIG, Verification, VerificationError

if TYPE_CHECKING:  # torch stays out of this module's import: convert imports it inside _build_two_pass
    from torch import nn

    from .sources import TorchReference

PASS1_ROLE = "gn_stats_out"
PASS2_ROLE = "gn_stats_in"
# Larger than twice the receptive field (56 px), so the reach is not cut by the border (measure_margin raises
# if it were); 160 px rather than 256 leaves 78 px each side and costs 0.4x the torch time.
MARGIN_PROBE_HW = (160, 160)
MARGIN_PATCH_PX = 4
MARGIN_ROUND_PX = 8           # the measured reach is rounded up to this (tiles start on multiples of it)
# The blend margin: how far from a tile's inner border the output may still differ from the whole picture's,
# in u8 levels. A twentieth of a level is far under the rounding to u8 (and the ramp averages it again).
# Measured on the bundled toon (a reflected border, worst pixel per column, 6 photos and noise): 16 px from
# the border 0.7-2.8 levels, 24 px 0.03-0.33, 32 px 0.001-0.035, 40 px 0; the exact reach is 56 px. Tiles
# blended at 32 px instead of 56 infer 12-22 % fewer pixels (2-24 MP) for no change in PSNR vs the whole
# picture (benchmarks/fullres.py --parts margin: 51.25 dB at 56 px, 51.25 at 32, 51.24 at 16).
BLEND_TOLERANCE_LEVELS = 0.05
BLEND_PROBE_HEIGHT_PX = 128
# Pass 1's statistics vs PyTorch's, worst relative error per precision (fp16 weights move them a little), in
# the units a GroupNorm applies them in (``stats_error``).
STATS_REL_TOLERANCE = {"fp32": 1e-3, "fp16": 2e-2}
GN_EPS = 1e-5  # nn.GroupNorm's default eps, which every GroupNorm of the generator uses
_CONST_DATA = re.compile(rb'(<data\b[^>]*?\boffset=")(\d+)("\s+size=")(\d+)(")')


def pass_files(precision: str) -> tuple[str, str]:
    """(pass-1 xml, pass-2 xml) names of the pair built at ``precision`` (their weights: the plain IR's bin)."""
    return f"model_{precision}_pass1.xml", f"model_{precision}_pass2.xml"


def pass_names(precision: str) -> tuple[str, str]:
    """The two ``variants:`` entry names."""
    return f"{precision}-pass1", f"{precision}-pass2"


def build_pair(module: nn.Module, work: Path, *, precision: str, plain_xml: Path, plain_bin: Path,
               progress: Progress = QUIET) -> tuple[Path, Path]:
    """Convert pass 1 and pass 2 of ``module`` into ``work``, their constants pointing into ``plain_bin`` (the
    plain IR ``plain_xml`` of the same weights and precision; missing constants are appended to it).
    Returns (pass-1 xml, pass-2 xml)."""
    import openvino as ov
    import torch

    from .ir import EXAMPLE_HW, INPUT_NAME, OUTPUT_NAME, trace_to_ov, with_u8_io
    from .two_pass import ORIGIN_NAME, STATS_NAME, StatsIn, StatsOut

    pass1, pass2 = StatsOut(module), StatsIn(module)
    count = pass1.count
    image = torch.zeros(1, 3, *EXAMPLE_HW)
    stats = torch.ones(1, count, 2)
    progress.step(f"tracing and converting pass 1 (image in, image and {STATS_NAME} out)")
    first = with_u8_io(trace_to_ov(pass1, (image,), [[1, 3, -1, -1]]))
    first.output(1).get_tensor().set_names({STATS_NAME})
    origin = torch.tensor([[float(EXAMPLE_HW[0]), float(EXAMPLE_HW[1]), 0.0, 0.0]])
    progress.step(f"tracing and converting pass 2 (image, {STATS_NAME} and {ORIGIN_NAME} in)")
    second = with_u8_io(trace_to_ov(pass2, (image, stats, origin), [[1, 3, -1, -1], [1, count, 2], [1, 4]]))
    second.input(1).get_tensor().set_names({STATS_NAME})
    second.input(2).get_tensor().set_names({ORIGIN_NAME})
    for model in (first, second):
        model.input(0).get_tensor().set_names({INPUT_NAME})
        model.output(0).get_tensor().set_names({OUTPUT_NAME})
    xml1_name, xml2_name = pass_files(precision)
    xml1, xml2 = work / xml1_name, work / xml2_name
    compress = precision == "fp16"
    ov.save_model(first, xml1, compress_to_fp16=compress)
    ov.save_model(second, xml2, compress_to_fp16=compress)
    share_weights(xml1, xml1.with_suffix(".bin"), plain_bin, known_from=(plain_xml,))
    share_weights(xml2, xml2.with_suffix(".bin"), plain_bin, known_from=(plain_xml, xml1))
    return xml1, xml2


def share_weights(xml: Path, own_bin: Path, shared_bin: Path, *, known_from: tuple[Path, ...]) -> int:
    """Point ``xml``'s constants into ``shared_bin`` and drop ``own_bin``; returns the bytes appended.

    A constant whose bytes some constant of a ``known_from`` graph (IRs whose weights are ``shared_bin``)
    already has is pointed there; any other is appended (64-byte aligned). Offsets are rewritten in the XML
    text itself: nothing else of the graph changes, and nothing already in ``shared_bin`` moves."""
    shared = shared_bin.read_bytes()
    known: dict[bytes, int] = {}
    for graph in known_from:
        for match in _CONST_DATA.finditer(graph.read_bytes()):
            offset, size = int(match.group(2)), int(match.group(4))
            known.setdefault(hashlib.sha256(shared[offset:offset + size]).digest(), offset)
    own = own_bin.read_bytes()
    extra = bytearray()

    def relocate(match: re.Match[bytes]) -> bytes:
        offset, size = int(match.group(2)), int(match.group(4))
        blob = own[offset:offset + size]
        key = hashlib.sha256(blob).digest()
        if key not in known:
            while (len(shared) + len(extra)) % 64:
                extra.append(0)
            known[key] = len(shared) + len(extra)
            extra.extend(blob)
        return b"".join((match.group(1), str(known[key]).encode(), match.group(3), match.group(4), match.group(5)))

    text = _CONST_DATA.sub(relocate, xml.read_bytes())
    tmp = xml.with_name(f".{xml.name}.tmp")
    tmp.write_bytes(text)
    tmp.replace(xml)
    if extra:
        with open(shared_bin, "ab") as fh:
            fh.write(bytes(extra))
    own_bin.unlink()
    return len(extra)


def measure_margin(module: nn.Module, count: int) -> int:
    """Pixels a change reaches through pass 2 with fixed statistics, measured on the float torch graph
    (exact: outside the receptive field the output is bit-identical), rounded up to MARGIN_ROUND_PX."""
    import torch

    from .two_pass import StatsIn, torch_stats

    height, width = MARGIN_PROBE_HW
    origin = torch.tensor([[float(height), float(width), 0.0, 0.0]])
    rng = np.random.default_rng(0)
    base = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    stats = torch.from_numpy(torch_stats(module, to_nchw_float(base)))
    changed = base.copy()
    top, left = height // 2 - MARGIN_PATCH_PX // 2, width // 2 - MARGIN_PATCH_PX // 2
    changed[top:top + MARGIN_PATCH_PX, left:left + MARGIN_PATCH_PX] ^= 0x80
    net = StatsIn(module)
    with torch.no_grad():
        outs = [net(torch.from_numpy(to_nchw_float(img)), stats, origin).numpy() for img in (base, changed)]
    moved = np.abs(outs[0] - outs[1]).max(axis=(0, 1)) > 0
    ys, xs = np.nonzero(moved)
    reach = max(top - ys.min(), ys.max() - (top + MARGIN_PATCH_PX - 1),
                left - xs.min(), xs.max() - (left + MARGIN_PATCH_PX - 1))
    if min(ys.min(), xs.min()) == 0 or ys.max() == height - 1 or xs.max() == width - 1:
        raise ValueError(f"the receptive field reaches past {height}x{width}: measure on a larger probe")
    return int(-(-int(reach) // MARGIN_ROUND_PX) * MARGIN_ROUND_PX)


def measure_blend_margin(module: nn.Module, images: list[np.ndarray], *, reach: int) -> int:
    """The tiles' blend margin (``tiling.margin_px``): the distance from a tile's inner border beyond which
    its output differs from the whole picture's by under BLEND_TOLERANCE_LEVELS on every pixel, with the
    whole picture's statistics (pass 2) and the tile's reflect padding in place of the real neighbours, on
    ``images`` (the verification samples) and a noise image (the worst case). Rounded up to MARGIN_ROUND_PX;
    at most ``reach``, beyond which nothing moves at all.

    The whole picture's output is the plain generator's, from the forward that measures its statistics:
    with a picture's own statistics pass 2 is the plain generator (to 1e-4, 0.013 u8 levels, under the
    tolerance), and one torch forward per probe is saved."""
    import torch

    from .samples import fit
    from .two_pass import StatsIn, run_with_stats

    cut = -(-(reach + 64) // MARGIN_ROUND_PX) * MARGIN_ROUND_PX  # the tile's width: room for the whole reach
    height, width = BLEND_PROBE_HEIGHT_PX, 2 * cut
    noise = np.random.default_rng(0).integers(0, 256, (height, width, 3), dtype=np.uint8)
    probes = [fit(image, (height, width)) for image in images] + [noise]
    origin = torch.tensor([[float(height), float(width), 0.0, 0.0]])
    net = StatsIn(module)
    worst = np.zeros(cut, np.float64)  # per distance from the border (0: the tile's last column)
    for image in probes:
        tile = np.pad(image[:, :cut], ((0, 0), (0, width - cut), (0, 0)), mode="reflect")
        whole, stats = run_with_stats(module, torch.from_numpy(to_nchw_float(image)))
        with torch.no_grad():
            tiled = net(torch.from_numpy(to_nchw_float(tile)), stats, origin)
        levels = np.abs(whole.numpy() - tiled.numpy())[0, :, :, :cut].max(axis=(0, 1)) * 127.5  # -> u8 levels
        worst = np.maximum(worst, levels[::-1])
    over = np.nonzero(worst >= BLEND_TOLERANCE_LEVELS)[0]
    needed = int(over.max()) + 1 if over.size else 0
    return min(reach, -(-needed // MARGIN_ROUND_PX) * MARGIN_ROUND_PX)


def verify_pair(xml1: Path, xml2: Path, bin_path: Path, reference: TorchReference, *, floor_db: float,
                stats_tolerance: float, sizes_hw: tuple[tuple[int, int], ...], sample_dir: Path | None = None,
                limit: int | None = None, progress: Progress = QUIET) -> tuple[Verification, Verification, float]:
    """Both IRs against PyTorch (module docstring); raises ``VerificationError`` below ``floor_db`` or when
    pass 1's statistics are off. Returns (pass 1, pass 2, worst relative error of pass 1's statistics).

    ``reference`` is the plain generator's (with statistics): the images the plain IR was verified on are
    not run through PyTorch again."""
    import openvino as ov

    from .two_pass import ORIGIN_NAME, STATS_NAME

    core = ov.Core()
    first, second = core.read_model(xml1, bin_path), core.read_model(xml2, bin_path)
    source = f"photos:{sample_dir}" if sample_dir else "synthetic"
    checks = [Verification(reference="pytorch", floor_db=floor_db, sizes=list(sizes_hw), source=source)
              for _ in range(2)]
    worst_rel = 0.0
    samples = {size: load_samples(sample_dir, size_hw=size, limit=limit) for size in sizes_hw}
    total, done = sum(len(batch) for batch in samples.values()), 0
    for size, batch in samples.items():
        shape = ov.PartialShape([1, size[0], size[1], 3])
        first.reshape({first.input(0): shape})
        second.reshape({second.input(0): shape})
        run1 = core.compile_model(first, "CPU", VERIFY_CONFIG)
        run2 = core.compile_model(second, "CPU", VERIFY_CONFIG)
        for sample in batch:
            expected, true_stats = reference(sample.rgb), reference.stats(sample.rgb)
            got1 = run1({0: sample.rgb[None]})
            image1, stats1 = got1[run1.output(0)][0], got1[run1.output(STATS_NAME)]
            origin = np.array([[size[0], size[1], 0, 0]], np.float32)  # the whole picture as one tile
            image2 = run2({0: sample.rgb[None], STATS_NAME: true_stats, ORIGIN_NAME: origin})[run2.output(0)][0]
            rel = stats_error(stats1, true_stats)
            worst_rel = max(worst_rel, rel)
            for check, image in zip(checks, (image1, image2)):
                check.per_image.append({"image": sample.name, "size": list(size),
                                        "psnr_db": round(psnr_db(image, expected), 2)})
            done += 1
            progress.step(f"verifying the tiling pair vs pytorch: image {done}/{total} ({sample.name}, "
                          f"{size[0]}x{size[1]}): pass 1 {checks[0].per_image[-1]['psnr_db']:.2f} dB, pass 2 "
                          f"{checks[1].per_image[-1]['psnr_db']:.2f} dB, statistics within {rel:.2%}")
    for label, check in zip(("pass 1", "pass 2 fed PyTorch's statistics"), checks):
        if not check.passed:
            raise VerificationError(f"{label} vs pytorch: min PSNR {check.min_db:.2f} dB is below the floor "
                                    f"{floor_db:.1f} dB", check)
    if worst_rel > stats_tolerance:
        raise VerificationError(f"pass 1's GroupNorm statistics differ from PyTorch's by up to {worst_rel:.2%} "
                                f"(tolerance {stats_tolerance:.2%})",
                                checks[0])
    return checks[0], checks[1], worst_rel


def stats_error(got: np.ndarray, true: np.ndarray) -> float:
    """The worst error of statistics ``got`` ([N, K, 2] mean, var) against ``true``, relative to what each
    GroupNorm does with them: the mean's error over the standard deviation it divides by, the variance's over
    the variance. Either is how far the normalised output moves, as a fraction of its unit.

    Why not each value's error over its own size: a GroupNorm input's mean is often near 0 (measured on the
    seeded generator: -0.00019), and fp16 weights that moved it by 0.00008 read as 6.9 % (over |mean| + 0.001)
    where the normalised output moves by 0.02 % of a standard deviation: every fp16 pair of the tests'
    checkpoint failed at the default sizes. Measured this way, fp16 moves the statistics by at most 0.04 %."""
    scale = np.asarray(true[..., 1], np.float64) + GN_EPS
    mean_err = np.abs(got[..., 0] - true[..., 0]) / np.sqrt(scale)
    var_err = np.abs(got[..., 1] - true[..., 1]) / scale
    return float(max(mean_err.max(), var_err.max()))


def manifest_entries(*, precision: str, xml1: Path, xml2: Path, bin_path: Path, checks: tuple[Verification,
                     Verification], stats_rel_err: float, count: int, margin_px: int, reach_px: int,
                     versions: dict[str, Any], created: str) -> dict[str, dict[str, Any]]:
    """The two ``variants:`` entries (docs/contracts.md): no ``quality`` figure, so no reader, old or new,
    ever picks one as a plain variant."""
    from edge_anime.models import sha256_file

    from .two_pass import ORIGIN_NAME, STATS_NAME

    name1, name2 = pass_names(precision)
    bin_sha = sha256_file(bin_path)
    common = {"precision": precision, "versions": versions, "created": created}
    tiling = {"margin_px": margin_px, "reach_px": reach_px,
              "stats": {"name": STATS_NAME, "shape": [1, count, 2], "order": "forward", "fields": ["mean", "var"]},
              "origin": {"name": ORIGIN_NAME, "shape": [1, 4], "fields": ["height", "width", "top", "left"]}}
    first = {**common, "role": PASS1_ROLE,
             "ir": {"xml": xml1.name, "bin": bin_path.name, "xml_sha256": sha256_file(xml1), "bin_sha256": bin_sha},
             "verification": {**checks[0].to_manifest(), "stats_max_rel_err": round(stats_rel_err, 6)},
             "tiling": tiling}
    second = {**common, "role": PASS2_ROLE,
              "ir": {"xml": xml2.name, "bin": bin_path.name, "xml_sha256": sha256_file(xml2), "bin_sha256": bin_sha},
              "verification": {**checks[1].to_manifest(), "stats_from": "pytorch, whole picture"},
              "tiling": tiling}
    return {name1: first, name2: second}
