"""The "toon" training target: a classic, hand-made cartoon rendering of a photo.

The generator is taught to reproduce this rendering, so the target *is* the style. The recipe follows
Winnemöller et al. 2006 ("Real-time video abstraction") with XDoG-style ink lines (Winnemöller 2012):

1. edge-preserving smoothing: a few passes of a bilateral filter in CIELAB, which flattens texture but
   keeps object boundaries (repeating a small bilateral approximates a wider one at a fraction of the cost);
2. soft luminance quantisation: lightness snaps to a few bands with a tanh ramp between them, so shading
   reads as flat cel bands yet stays smooth enough for a convolutional network to learn;
3. a mild chroma boost, because flattening texture also reads as washed out;
4. dark ink outlines from a difference of Gaussians on the smoothed lightness (the dark side of strong
   edges only, so each edge gives one line), with small specks removed so texture does not turn to dirt.

Every length is in pixels of the image as given: the target is resolution dependent (a 2 px line on a
512 px photo), which is why training and evaluation render at about 512 px on the long side.
Pure numpy/scipy/scikit-image so the benchmark can compute it without torch.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray
from scipy import ndimage
from skimage import color, morphology

# The working resolution the parameters below were tuned at (long side, pixels).
TUNED_LONG_SIDE_PX = 512


@dataclass(frozen=True)
class ToonParams:
    """Knobs of a style's target; each bundled style is one set of them (``STYLES``), tuned by eye.

    Lengths are in pixels of the *working* picture: the colour layer (smoothing, bands, palette) is always
    computed with the long side at most ``work_long_side_px`` and brought up to the photo's size, while the
    ink is drawn at the photo's own size with its widths scaled by ``long side / TUNED_LONG_SIDE_PX``. So a
    1024 px photo gets the same flat areas as a 512 px one and lines twice as wide, crisp at 100 %: the
    look holds at the runtime's default ``max_side`` (issue 27), not only at 256-512 px.
    """

    bilateral_passes: int = 4
    bilateral_radius_px: int = 3
    bilateral_sigma_space_px: float = 2.0
    bilateral_sigma_lab: float = 6.0  # CIELAB units (L in 0..100)
    edge_after_passes: int = 3  # lines come from the image after this many bilateral passes
    levels: int = 8  # lightness bands over L 0..100
    band_sharpness: float = 0.6  # tanh slope per L unit; higher = harder band edges
    chroma_gain: float = 1.25
    chroma_step: float = 0.0  # a*/b* snap to a grid of this many Lab units (0: off); fewer distinct colours
    chroma_sharpness: float = 0.5  # tanh slope of that snap
    contrast: float = 1.0  # lightness spread about the picture's median, before the bands (>1: livelier)
    max_chroma: float = 90.0  # a soft ceiling on C* so boosted colours stay in gamut instead of clipping
    dog_sigma_px: float = 1.0
    dog_k: float = 1.6
    line_threshold: float = 1.4  # L units of DoG below which ink starts
    line_softness: float = 1.5  # L units over which ink ramps to full
    line_darkness: float = 0.85  # 1.0 = pure black ink
    min_line_area_px: int = 24  # connected ink blobs smaller than this are dropped
    work_long_side_px: int = 0  # 0: the colour layer at the photo's own size (the first toon's behaviour)
    gradient_px_for_hard: float = 0.0  # L units per px at which bands reach band_sharpness (0: always hard)
    smooth_band_sharpness: float = 0.08  # the bands' slope on smooth gradients (skies)
    # --- target v2 (issue 41, "scenes that are drawn"); the defaults leave v1 unchanged ---
    flow_lines: bool = False  # ink from a flow-based XDoG with hysteresis instead of the plain DoG
    tangent_sigma_px: float = 2.5  # structure tensor's integration scale (px at 512, times the line scale)
    flow_steps: int = 4  # line-integral steps each way along the edge tangent (px each, times the line scale)
    strong_threshold: float = 3.0  # L units of flow-smoothed DoG that seed a line (weak ones only continue it)
    foliage_suppress: float = 0.0  # 0..1: ink removed on dense, incoherent (green) texture
    foliage_density: float = 0.1  # share of weakly inked pixels around a point at which texture counts as dense
    long_line_px: int = 40  # ink components at least this long (px at 512) are kept through the suppression
    flatten: float = 0.0  # 0..1: blend toward the mean colour of each superpixel where the region is textured
    segment_area_px: int = 140  # area per SLIC superpixel at the working scale
    segment_compactness: float = 0.06  # SLIC on Lab rescaled to [0, 1]: low = segments hug colour edges
    flatten_texture_l: float = 2.0  # L std inside a superpixel at which it is flattened fully (smooth ones keep gradients)
    local_contrast: float = 0.0  # gain on lightness detail at local_contrast_sigma_px (snow on a bright sky)
    local_contrast_sigma_px: float = 10.0


# toon: soft painted cel bands, thin dark-brown-black ink, a gentle palette snap: a storybook cartoon.
TOON = ToonParams(bilateral_passes=6, bilateral_sigma_lab=8.0, edge_after_passes=2, levels=7,
                  band_sharpness=0.9, chroma_gain=1.3, chroma_step=8.0, chroma_sharpness=0.5, contrast=1.1,
                  line_threshold=1.4, line_softness=1.3, line_darkness=0.85, min_line_area_px=30,
                  work_long_side_px=512, gradient_px_for_hard=1.5)
# cel: anime cel shading: few hard tone steps, a coarse palette, vivid colour and bold black ink.
CEL = ToonParams(bilateral_passes=7, bilateral_sigma_lab=9.0, edge_after_passes=2, levels=5,
                 band_sharpness=1.6, chroma_gain=1.5, chroma_step=12.0, chroma_sharpness=0.6, contrast=1.15,
                 dog_sigma_px=1.2, line_threshold=1.2, line_softness=1.0, line_darkness=1.0,
                 min_line_area_px=36, work_long_side_px=448, gradient_px_for_hard=1.0)
# toon2 (issue 41): the toon's palette with continuous flow-following lines, flat fills per superpixel
# instead of blur, no ink on foliage, and local contrast so bright low-contrast structure (snow) survives.
TOON2 = replace(TOON, bilateral_passes=4, edge_after_passes=2, flow_lines=True, line_threshold=1.2,
                line_softness=0.9, strong_threshold=2.4, min_line_area_px=20, foliage_suppress=0.9,
                flatten=0.7, flatten_texture_l=4.0, local_contrast=0.5, work_long_side_px=640)
TOON_V1 = TOON
# toon3 trains toward the same target as toon2 (training/train_style.TOON3_PHASES: a longer, more adversarial run);
# toon4 too, from toon3 with the anime critic beside it (TOON4_PHASES)
STYLES: dict[str, ToonParams] = {"toon": TOON, "cel": CEL, "toon2": TOON2, "toon3": TOON2, "toon4": TOON2}

DEFAULT_PARAMS = ToonParams()


def _bilateral_lab(lab: NDArray[np.float32], p: ToonParams) -> NDArray[np.float32]:
    """One bilateral pass by shifted copies: O(window) numpy ops over the whole image, no Python per pixel.

    Hand-written because skimage's denoise_bilateral works per pixel in a loop and is ~50x slower here,
    and OpenCV is not a dependency of this project.
    """
    r = p.bilateral_radius_px
    h, w, _ = lab.shape
    padded = np.pad(lab, ((r, r), (r, r), (0, 0)), mode="reflect")
    acc = np.zeros_like(lab)
    wsum = np.zeros((h, w, 1), dtype=np.float32)
    inv_2sr2 = np.float32(1.0 / (2.0 * p.bilateral_sigma_lab**2))
    for dy in range(-r, r + 1):
        for dx in range(-r, r + 1):
            spatial = np.exp(-(dy * dy + dx * dx) / (2.0 * p.bilateral_sigma_space_px**2))
            if spatial < 0.05:
                continue
            shifted = padded[r + dy : r + dy + h, r + dx : r + dx + w]
            dist2 = np.sum((shifted - lab) ** 2, axis=2, keepdims=True)
            weight = np.float32(spatial) * np.exp(-dist2 * inv_2sr2)
            acc += weight * shifted
            wsum += weight
    return acc / wsum


def _soft_snap(x: NDArray[np.float32], step: float, sharpness: float) -> NDArray[np.float32]:
    """Snap to multiples of ``step`` with a tanh ramp between them: flat steps a network can still learn."""
    nearest = np.round(x / step) * step
    return (nearest + (step / 2.0) * np.tanh(sharpness * (x - nearest))).astype(np.float32)


def _quantise_lightness(lightness: NDArray[np.float32], p: ToonParams) -> NDArray[np.float32]:
    """Bands whose edges are hard where the picture has detail and soft where it is a smooth gradient.

    Why the gradient-dependent slope (Winnemöller 2006, section 3.2): a fixed hard slope cuts a clear sky or
    a lit wall into contour rings, which reads as a bad GIF, not as cel paint; anime skies stay gradients.
    """
    if p.gradient_px_for_hard <= 0:
        return _soft_snap(lightness, 100.0 / p.levels, p.band_sharpness)
    gy, gx = np.gradient(ndimage.gaussian_filter(lightness, 1.0))
    hard = np.clip(np.hypot(gx, gy) / p.gradient_px_for_hard, 0.0, 1.0)
    slope = (p.smooth_band_sharpness + (p.band_sharpness - p.smooth_band_sharpness) * hard).astype(np.float32)
    step = 100.0 / p.levels
    nearest = np.round(lightness / step) * step
    return (nearest + (step / 2.0) * np.tanh(slope * (lightness - nearest))).astype(np.float32)


def _ink(lightness: NDArray[np.float32], p: ToonParams, scale: float = 1.0) -> NDArray[np.float32]:
    """Ink coverage in [0, 1] from the dark side of a difference of Gaussians, widths times ``scale``."""
    sigma = p.dog_sigma_px * scale
    dog = ndimage.gaussian_filter(lightness, sigma) - ndimage.gaussian_filter(lightness, sigma * p.dog_k)
    ink = np.clip((-dog - p.line_threshold) / p.line_softness, 0.0, 1.0)
    solid = morphology.remove_small_objects(ink > 0.3, max_size=max(1, round(p.min_line_area_px * scale * scale)))
    keep = ndimage.binary_dilation(solid, iterations=max(1, round(scale)))
    return (ink * keep).astype(np.float32)


def _tangent_field(lightness: NDArray[np.float32], sigma: float) -> tuple[NDArray[np.float32], NDArray[np.float32],
                                                                         NDArray[np.float32]]:
    """Edge tangent (ty, tx) and coherence in [0, 1] from the smoothed structure tensor (Kyprianidis 2008).

    The tangent is the eigenvector of the smaller eigenvalue: the direction along which lightness changes
    least, i.e. along an edge. Coherence ((l1 - l2) / (l1 + l2))^2 is ~1 on a clean edge, ~0 on isotropic
    texture (leaves, gravel), which is what tells a window frame from foliage.
    """
    gx = ndimage.sobel(lightness, axis=1) / 8.0
    gy = ndimage.sobel(lightness, axis=0) / 8.0
    exx = ndimage.gaussian_filter(gx * gx, sigma)
    exy = ndimage.gaussian_filter(gx * gy, sigma)
    eyy = ndimage.gaussian_filter(gy * gy, sigma)
    root = np.sqrt((exx - eyy) ** 2 + 4.0 * exy * exy)
    lam1 = 0.5 * (exx + eyy + root)
    lam2 = 0.5 * (exx + eyy - root)
    # eigenvector of lam2: (lam2 - eyy, exy) in (x, y); fall back to (1, 0) where the tensor is ~0
    tx = exy
    ty = lam2 - exx
    norm = np.hypot(tx, ty)
    flat = norm < 1e-9
    tx = np.where(flat, 1.0, tx / np.maximum(norm, 1e-9))
    ty = np.where(flat, 0.0, ty / np.maximum(norm, 1e-9))
    coherence = ((lam1 - lam2) / np.maximum(lam1 + lam2, 1e-6)) ** 2
    return ty.astype(np.float32), tx.astype(np.float32), coherence.astype(np.float32)


def _flow_smooth(field: NDArray[np.float32], ty: NDArray[np.float32], tx: NDArray[np.float32], steps: int,
                 step_px: float) -> NDArray[np.float32]:
    """Line integral of ``field`` along the tangent streamlines, ``steps`` each way, Gaussian weights.

    Vectorised: every pixel follows its own streamline at once (bilinear look-ups of the field and of the
    tangent at the current points); the direction's sign is kept consistent from step to step, since a
    tangent field has no orientation.
    """
    if steps <= 0:
        return field
    h, w = field.shape
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    acc = field.astype(np.float32).copy()
    wsum = np.ones_like(acc)
    sigma_m = max(1.0, steps / 2.0)
    for sign in (1.0, -1.0):
        py, px = yy.copy(), xx.copy()
        dy, dx = sign * ty, sign * tx
        for s in range(1, steps + 1):
            py = np.clip(py + step_px * dy, 0, h - 1)
            px = np.clip(px + step_px * dx, 0, w - 1)
            coords = np.stack([py, px])
            val = ndimage.map_coordinates(field, coords, order=1, mode="nearest")
            wgt = np.float32(np.exp(-(s * s) / (2.0 * sigma_m * sigma_m)))
            acc += wgt * val
            wsum += wgt
            ny = ndimage.map_coordinates(ty, coords, order=0, mode="nearest")
            nx = ndimage.map_coordinates(tx, coords, order=0, mode="nearest")
            flip = np.where(ny * dy + nx * dx < 0, -1.0, 1.0).astype(np.float32)
            dy, dx = ny * flip, nx * flip
    return (acc / wsum).astype(np.float32)


def _greenness(lab: NDArray[np.float32]) -> NDArray[np.float32]:
    """~1 on foliage colours (green to yellow-green, some chroma), 0 on greys, skies, skin and brick."""
    a, b = lab[..., 1], lab[..., 2]
    chroma = np.hypot(a, b)
    hue = np.degrees(np.arctan2(b, a)) % 360.0  # green foliage sits at ~100-170 degrees in CIELAB
    hue_w = np.clip(1.0 - np.abs(hue - 130.0) / 55.0, 0.0, 1.0)
    return (hue_w * np.clip((chroma - 6.0) / 10.0, 0.0, 1.0)).astype(np.float32)


def _flow_ink(lightness: NDArray[np.float32], lab: NDArray[np.float32], p: ToonParams,
              scale: float = 1.0) -> NDArray[np.float32]:
    """Ink in [0, 1]: flow-based XDoG with hysteresis, thinned out on foliage, kept on long coherent edges.

    1. a DoG of the smoothed lightness (the dark side, as v1), smoothed along the edge tangent so a line
       that a noisy photo breaks into dashes is joined up (Kang, Lee, Chui 2007, "Coherent line drawing");
    2. hysteresis: pixels past ``strong_threshold`` seed a line, those past ``line_threshold`` only extend
       one that is seeded (Canny's rule), so long faint edges (a snow ridge, a wire) stay whole and isolated
       faint texture is not inked;
    3. where weakly inked pixels are dense, the structure incoherent and the colour green (leaves), the ink
       is removed except on components long enough to be an outline (a trunk, a roof line).
    """
    from skimage.filters import apply_hysteresis_threshold

    sigma = p.dog_sigma_px * scale
    dog = ndimage.gaussian_filter(lightness, sigma) - ndimage.gaussian_filter(lightness, sigma * p.dog_k)
    ty, tx, coherence = _tangent_field(ndimage.gaussian_filter(lightness, max(0.7, 0.7 * scale)),
                                       p.tangent_sigma_px * scale)
    dog = _flow_smooth(dog.astype(np.float32), ty, tx, p.flow_steps, max(1.0, scale))
    neg = -dog
    ink = np.clip((neg - p.line_threshold) / p.line_softness, 0.0, 1.0)
    lines = apply_hysteresis_threshold(neg, p.line_threshold + 0.3 * p.line_softness, p.strong_threshold)
    lines = morphology.remove_small_objects(lines, max_size=max(1, round(p.min_line_area_px * scale * scale)))
    if p.foliage_suppress > 0:
        weak = (neg > p.line_threshold).astype(np.float32)
        density = ndimage.gaussian_filter(weak, 6.0 * scale)
        dense = np.clip((density - p.foliage_density) / p.foliage_density, 0.0, 1.0)
        smooth_coh = ndimage.gaussian_filter(coherence, 3.0 * scale)
        green = ndimage.gaussian_filter(_greenness(lab), 3.0 * scale)
        texture = dense * (1.0 - smooth_coh) * (0.2 + 0.8 * green)
        labels, n = ndimage.label(lines, structure=np.ones((3, 3)))
        if n:
            objs = ndimage.find_objects(labels)
            extent = np.array([0] + [max(sl[0].stop - sl[0].start, sl[1].stop - sl[1].start) for sl in objs])
            long_mask = (extent >= p.long_line_px * scale)[labels]
        else:
            long_mask = np.zeros_like(lines)
        suppress = np.clip(p.foliage_suppress * texture / 0.5, 0.0, 1.0) * ~long_mask
        ink = ink * (1.0 - suppress)
        lines &= suppress < 0.5  # a short line mostly suppressed is confetti: gone, not grey
    keep = ndimage.binary_dilation(lines, iterations=max(1, round(scale)))
    return (ink * keep).astype(np.float32)


def _flatten_segments(lab: NDArray[np.float32], p: ToonParams) -> NDArray[np.float32]:
    """Mean colour per superpixel where the superpixel is textured; smooth ones (sky gradients) keep theirs.

    SLIC superpixels on Lab follow object boundaries, so a textured area becomes one flat colour with its
    shape kept (not a blur of it); a superpixel whose lightness spread is small is a gradient or already flat
    and is left alone, so skies do not turn into patches.
    """
    from skimage.segmentation import slic

    h, w = lab.shape[:2]
    n = max(16, round(h * w / p.segment_area_px))
    labels = slic(lab.astype(np.float64), n_segments=n, compactness=p.segment_compactness, sigma=0.0, convert2lab=False,
                  start_label=0, enforce_connectivity=True)
    count = np.bincount(labels.ravel()).astype(np.float64)
    means = np.stack([np.bincount(labels.ravel(), weights=lab[..., c].ravel()) / count for c in range(3)], axis=1)
    l_sq = np.bincount(labels.ravel(), weights=(lab[..., 0].astype(np.float64) ** 2).ravel()) / count
    l_std = np.sqrt(np.maximum(l_sq - means[:, 0] ** 2, 0.0))
    alpha = p.flatten * np.clip(l_std / p.flatten_texture_l, 0.0, 1.0)
    flat = means[labels].astype(np.float32)
    # a pixel far from its superpixel's mean lies across an edge the superpixel straddles: it keeps its colour
    dev = (lab[..., 0] - flat[..., 0]) / (2.0 * p.flatten_texture_l)
    a = (alpha[labels] * np.exp(-dev * dev)).astype(np.float32)[..., None]
    return (a * flat + (1.0 - a) * lab).astype(np.float32)


def _local_contrast(lightness: NDArray[np.float32], p: ToonParams) -> NDArray[np.float32]:
    """Lightness detail at ``local_contrast_sigma_px`` boosted, most where the picture is bright and flat.

    A snowy peak against a bright sky differs by a few L units: the bands would merge them into one. The
    gain falls off with the local spread so edges that already have contrast do not get halos.
    """
    base = ndimage.gaussian_filter(lightness, p.local_contrast_sigma_px)
    detail = lightness - base
    spread = np.sqrt(ndimage.gaussian_filter(detail * detail, p.local_contrast_sigma_px))
    gain = p.local_contrast * np.clip(1.0 - spread / 12.0, 0.0, 1.0)
    return np.clip(lightness + gain * detail, 0.0, 100.0).astype(np.float32)


def _colour_layer(lab: NDArray[np.float32], p: ToonParams) -> NDArray[np.float32]:
    """Bands, livelier contrast, boosted but in-gamut chroma and a coarser palette on the smoothed Lab."""
    out = lab.copy()
    lightness = lab[..., 0]
    if p.contrast != 1.0:
        mid = float(np.median(lightness))
        lightness = np.clip(mid + (lightness - mid) * p.contrast, 0.0, 100.0)
    out[..., 0] = _quantise_lightness(lightness.astype(np.float32), p)
    chroma = np.hypot(lab[..., 1], lab[..., 2])
    boosted = p.max_chroma * np.tanh(chroma * p.chroma_gain / p.max_chroma)
    out[..., 1:] *= (boosted / np.maximum(chroma, 1e-6))[..., None]
    if p.chroma_step > 0:  # snap C* only: hues stay continuous, near-greys snap to grey (no cast)
        snapped = np.maximum(_soft_snap(boosted.astype(np.float32), p.chroma_step, p.chroma_sharpness), 0.0)
        out[..., 1:] *= (snapped / np.maximum(boosted, 1e-6))[..., None]
    return out


def _resize_float(img: NDArray[np.float32], size: tuple[int, int]) -> NDArray[np.float32]:
    from skimage.transform import resize

    return resize(img, size, order=1, anti_aliasing=False, preserve_range=True).astype(np.float32)


def toonify(rgb: NDArray[np.uint8], *, params: ToonParams = DEFAULT_PARAMS) -> NDArray[np.uint8]:
    """RGB u8 [H, W, 3] photo -> RGB u8 [H, W, 3] cartoon of the same size."""
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8:
        raise ValueError(f"toonify expects an RGB uint8 array [H, W, 3], got {rgb.dtype} {rgb.shape}")
    h, w = rgb.shape[:2]
    long_side = max(h, w)
    work = params.work_long_side_px
    small = resize_long_side(rgb, work) if work and long_side > work else rgb
    lab = color.rgb2lab(small).astype(np.float32)
    edge_source = lab
    for i in range(p_passes := params.bilateral_passes):
        lab = _bilateral_lab(lab, params)
        if i + 1 == min(params.edge_after_passes, p_passes):
            edge_source = lab
    if params.flatten > 0:
        lab = _flatten_segments(lab, params)
    if params.local_contrast > 0:
        lab[..., 0] = _local_contrast(lab[..., 0], params)
    out = _colour_layer(lab, params)
    edge_l = edge_source[..., 0]
    edge_lab = edge_source
    scale = 1.0
    if small is not rgb:  # colour layer up to the photo's size; ink drawn there, crisp, widths scaled
        out = _resize_float(out, (h, w))
        edge_l = _resize_float(edge_l, (h, w))
        scale = long_side / TUNED_LONG_SIDE_PX
        if params.flow_lines:
            edge_lab = _resize_float(edge_source, (h, w))
    ink = _flow_ink(edge_l, edge_lab, params, scale) if params.flow_lines else _ink(edge_l, params, scale)
    out[..., 0] *= 1.0 - params.line_darkness * ink
    out[..., 1:] *= 1.0 - params.line_darkness * ink[..., None]
    rendered = color.lab2rgb(out)
    return np.clip(np.round(rendered * 255.0), 0, 255).astype(np.uint8)


def resize_long_side(rgb: NDArray[np.uint8], long_side_px: int) -> NDArray[np.uint8]:
    """Resize so the long side is ``long_side_px`` (antialiased), the scale the target was tuned at."""
    from skimage.transform import resize

    h, w = rgb.shape[:2]
    scale = long_side_px / max(h, w)
    size = (max(1, round(h * scale)), max(1, round(w * scale)))
    out = resize(rgb, size, order=1, anti_aliasing=scale < 1.0, preserve_range=True)
    return np.clip(np.round(out), 0, 255).astype(np.uint8)
