"""Procedural photo-like scenes for the cases real training photos rarely cover (numpy + scipy only).

The bundled toon style turned photos dominated by one colour (blue sky, sea, night) into low-contrast grey
fog (issue 27). Real photos of such scenes are scarce among permissively licensed files, so these scenes are
made here: seeded, any size, no licence question. They are plausible at 512-1024 px (smooth gradients, fractal
texture, hard silhouette edges, a little lens blur and sensor noise), not flat noise.

Use::

    from training.synth import KINDS, scene
    rng = np.random.default_rng(seed)
    rgb = scene("sea", rng, (768, 1024))   # uint8 (768, 1024, 3); same rng state -> same picture

Kinds (``KINDS``):
    sky       clear blue sky over a horizon with hills, trees or a town silhouette
    clouds    blue sky with fractal cumulus / stratus clouds over land
    sunset    backlight: bright orange-yellow sky, sun disc with glare, near-black foreground silhouette
    sea       sky over the sea: horizon, waves in perspective, foam, sometimes a beach
    snow      snow field and snowy mountains under a blue or pale sky, conifers, blue shadows
    night     dark sky, stars, moon, city skyline with lit windows, street lights, sometimes a harbour
    overcast  grey sky, white and grey buildings and objects: every neutral pixel has R = G = B exactly
    skin      one to three people (head, hair, neck, clothes) with skin tones across Fitzpatrick I-VI,
              shaded as ellipsoids, on an indoor wall or an outdoor background
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray
from scipy import ndimage

F = NDArray[np.float32]

KINDS: tuple[str, ...] = ("sky", "clouds", "sunset", "sea", "snow", "night", "overcast", "skin")

# Skin tones across the Fitzpatrick range, sRGB 0-255 (lit, not in shadow): I, II, III, IV, V, VI.
SKIN_TONES: tuple[tuple[int, int, int], ...] = (
    (246, 221, 204), (234, 192, 166), (214, 164, 130), (180, 126, 92), (130, 86, 60), (78, 52, 40),
)


# ---------------------------------------------------------------- noise and shapes

def _fbm(rng: np.random.Generator, h: int, w: int, *, base: float = 3.0, octaves: int = 6,
         persistence: float = 0.5, stretch: float = 1.0) -> F:
    """Fractal (1/f-like) noise, zero mean, unit std. ``stretch`` > 1 makes features wider than tall."""
    out = np.zeros((h, w), np.float32)
    amp = 1.0
    for o in range(octaves):
        cells = base * 2.0 ** o
        gh = max(2, int(round(cells * h / max(h, w))))
        gw = max(2, int(round(cells * w / max(h, w) / stretch)))
        if gh >= h or gw >= w:
            break
        g = rng.standard_normal((gh + 3, gw + 3)).astype(np.float32)
        up = ndimage.zoom(g, ((h + 3 * h / gh) / (gh + 3), (w + 3 * w / gw) / (gw + 3)), order=3, mode="reflect")
        oy, ox = int(1.5 * h / gh), int(1.5 * w / gw)
        up = up[oy : oy + h, ox : ox + w]
        if up.shape != (h, w):
            up = np.pad(up, ((0, h - up.shape[0]), (0, w - up.shape[1])), mode="edge")
        out += amp * up
        amp *= persistence
    out -= out.mean()
    return out / max(float(out.std()), 1e-6)


def _fbm1d(rng: np.random.Generator, n: int, *, base: float = 3.0, octaves: int = 7, persistence: float = 0.55) -> F:
    out = np.zeros(n, np.float32)
    amp = 1.0
    for o in range(octaves):
        cells = max(2, int(base * 2 ** o))
        if cells >= n:
            break
        g = rng.standard_normal(cells + 3).astype(np.float32)
        up = ndimage.zoom(g, (n + 3 * n / cells) / (cells + 3), order=3, mode="reflect")
        off = int(1.5 * n / cells)
        up = up[off : off + n]
        up = np.pad(up, (0, n - up.shape[0]), mode="edge")
        out += amp * up
        amp *= persistence
    out -= out.mean()
    return out / max(float(out.std()), 1e-6)


def _smoothstep(e0: float, e1: float, x: F) -> F:
    t = np.clip((x - e0) / (e1 - e0), 0.0, 1.0)
    return (t * t * (3.0 - 2.0 * t)).astype(np.float32)


def _grid(h: int, w: int) -> tuple[F, F]:
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    return yy, xx


def _blend(img: F, mask: F, colour: F | NDArray[np.float64] | tuple[float, ...]) -> None:
    """img = img * (1 - mask) + colour * mask, in place; colour is RGB or an HxWx3 array."""
    m = mask[..., None]
    img *= 1.0 - m
    img += m * np.asarray(colour, np.float32)


def _aa_mask(inside_distance: F, soft: float = 0.75) -> F:
    """Anti-aliased coverage from a signed distance in pixels (positive inside)."""
    return np.clip(inside_distance / (2.0 * soft) + 0.5, 0.0, 1.0).astype(np.float32)


def _vary(rng: np.random.Generator, rgb: tuple[float, float, float], amount: float = 0.06) -> NDArray[np.float32]:
    return np.clip(np.asarray(rgb, np.float32) + rng.uniform(-amount, amount, 3).astype(np.float32), 0.0, 1.0)


# ---------------------------------------------------------------- layers

def _sky_gradient(h: int, w: int, horizon: float, zenith: NDArray[np.float32], low: NDArray[np.float32],
                  *, power: float = 1.6) -> F:
    yy, xx = _grid(h, w)
    t = np.clip(yy / max(horizon, 1.0), 0.0, 1.2) ** power
    t = np.clip(t, 0.0, 1.0)[..., None]
    side = (0.04 * (xx / w - 0.5))[..., None]  # the sun side is a little brighter
    return np.clip(zenith * (1.0 - t) + low * t + side, 0.0, 1.0).astype(np.float32)


def _blue_sky(rng: np.random.Generator, h: int, w: int, horizon: float) -> F:
    zenith = _vary(rng, (0.16, 0.38, 0.78), 0.07)
    low = _vary(rng, (0.68, 0.82, 0.95), 0.05)
    return _sky_gradient(h, w, horizon, zenith, low, power=rng.uniform(1.0, 2.2))


def _clouds(rng: np.random.Generator, img: F, horizon: float, *, cover: float, tint: tuple[float, float, float] = (1.0, 1.0, 1.0),
            shadow: tuple[float, float, float] = (0.62, 0.66, 0.74)) -> None:
    h, w = img.shape[:2]
    n = _fbm(rng, h, w, base=rng.uniform(2.0, 4.0), octaves=7, persistence=0.55, stretch=rng.uniform(1.5, 3.5))
    yy, _ = _grid(h, w)
    # fewer, flatter clouds towards the horizon; none below it
    fade = _smoothstep(0.0, 0.25, 1.0 - yy / max(horizon, 1.0)) * (yy < horizon)
    th = float(np.quantile(n, 1.0 - cover))
    dens = _smoothstep(th, th + 0.9, n) * fade
    # light from above: the lower part of a cloud (where density grows downwards) is darker
    shift = max(2, int(0.02 * h))
    below = np.roll(n, -shift, axis=0)
    lit = np.clip(0.5 + 0.9 * (n - below), 0.0, 1.0)[..., None]
    col = np.asarray(shadow, np.float32) * (1 - lit) + np.asarray(tint, np.float32) * lit
    _blend(img, np.clip(dens * 1.1, 0.0, 0.97).astype(np.float32), col)


def _hills(rng: np.random.Generator, img: F, top: float, bottom: float, colour: NDArray[np.float32], *,
           rough: float = 1.0, texture: float = 0.08, octaves: int = 7) -> F:
    """A ridge line between rows ``top`` and ``bottom``; returns its coverage mask."""
    h, w = img.shape[:2]
    yy, _xx = _grid(h, w)
    prof = _fbm1d(rng, w, base=rng.uniform(1.5, 4.0), octaves=octaves, persistence=0.45)
    line = bottom - (bottom - top) * (0.5 + 0.5 * np.tanh(0.6 * rough * prof))
    mask = _aa_mask(yy - line[None, :])
    tex = _fbm(rng, h, w, base=8, octaves=6)
    depth = np.clip((yy - line[None, :]) / max(h - top, 1.0), 0.0, 1.0)
    col = colour[None, None, :] * (1.0 + texture * tex[..., None]) * (0.85 + 0.3 * depth[..., None])
    _blend(img, mask, np.clip(col, 0.0, 1.0))
    return mask


def _trees(rng: np.random.Generator, img: F, base_row: F | float, count: int, height: tuple[float, float],
           colour: NDArray[np.float32], *, conifer: bool) -> F:
    """Tree silhouettes standing on ``base_row`` (a row per column or one row). Returns their mask."""
    h, w = img.shape[:2]
    yy, xx = _grid(h, w)
    mask = np.zeros((h, w), np.float32)
    rows = np.broadcast_to(np.asarray(base_row, np.float32), (w,))
    for _ in range(count):
        cx = rng.uniform(0, w)
        th = rng.uniform(*height)
        by = float(rows[int(np.clip(cx, 0, w - 1))]) + rng.uniform(0, 0.02 * h)
        if conifer:
            half = th * rng.uniform(0.18, 0.28)
            rel = (by - yy) / th  # 0 at the foot, 1 at the tip
            jag = 0.12 * np.sin(rel * rng.uniform(30, 45)) ** 2
            width = half * (1.0 - rel) * (0.8 + jag)
            d = np.minimum(width - np.abs(xx - cx), np.minimum(by - yy, th - (by - yy)))
        else:
            r = th * rng.uniform(0.28, 0.38)
            cy = by - th + r
            wob = 0.12 * r * np.sin(np.arctan2(yy - cy, xx - cx) * rng.integers(5, 9) + rng.uniform(0, 6))
            crown = r + wob - np.hypot((xx - cx) * 0.9, yy - cy)
            trunk = np.minimum(0.06 * th - np.abs(xx - cx), np.minimum(by - yy, yy - cy))
            d = np.maximum(crown, trunk)
        mask = np.maximum(mask, _aa_mask(d))
    tex = _fbm(rng, h, w, base=20, octaves=4)
    col = np.clip(colour[None, None, :] * (1.0 + 0.18 * tex[..., None]), 0.0, 1.0)
    _blend(img, mask, col)
    return mask


def _skyline(rng: np.random.Generator, h: int, w: int, ground: float, max_height: float) -> tuple[F, list[tuple[int, int, int, int]]]:
    """Building silhouettes standing on row ``ground``: (coverage mask, [(x0, x1, top, ground)])."""
    mask = np.zeros((h, w), np.float32)
    boxes: list[tuple[int, int, int, int]] = []
    x = -rng.uniform(0, 0.05 * w)
    while x < w:
        bw = rng.uniform(0.04, 0.14) * w
        bh = rng.uniform(0.25, 1.0) * max_height
        x0, x1, top = int(x), int(x + bw), int(ground - bh)
        mask[max(top, 0) : int(ground) + 1, max(x0, 0) : max(x1, 0)] = 1.0
        if rng.random() < 0.25:  # a roof spire or antenna
            cx = (x0 + x1) // 2
            mask[max(top - int(0.08 * max_height), 0) : max(top, 0), max(cx - 1, 0) : cx + 2] = 1.0
        boxes.append((x0, x1, top, int(ground)))
        x += bw * rng.uniform(0.75, 1.05)
    return ndimage.gaussian_filter(mask, 0.6), boxes


def _finish(rng: np.random.Generator, img: F, *, neutral_noise: bool = False, noise: float = 0.012) -> NDArray[np.uint8]:
    """Lens blur, vignette and sensor noise, then sRGB u8."""
    h, w = img.shape[:2]
    img = ndimage.gaussian_filter(img, (0.6, 0.6, 0))
    yy, xx = _grid(h, w)
    r2 = ((yy - h / 2) / (h / 2)) ** 2 + ((xx - w / 2) / (w / 2)) ** 2
    img = img * (1.0 - rng.uniform(0.0, 0.12) * r2 / 2.0)[..., None]
    lum = rng.standard_normal((h, w)).astype(np.float32)[..., None] * noise
    img = img + lum if neutral_noise else img + lum + rng.standard_normal((h, w, 3)).astype(np.float32) * (noise * 0.35)
    return np.clip(np.round(img * 255.0), 0, 255).astype(np.uint8)


# ---------------------------------------------------------------- scenes

def _land(rng: np.random.Generator, img: F, horizon: float) -> None:
    """Something under the sky: green/brown hills with trees, or a sunlit town."""
    h, _w = img.shape[:2]
    if rng.random() < 0.35:
        _town(rng, img, horizon)
        return
    far = _vary(rng, (0.45, 0.55, 0.62), 0.05)  # aerial perspective: far hills bluish and light
    _hills(rng, img, horizon - 0.08 * h, horizon + 0.01 * h, far, rough=0.8, texture=0.04)
    near = _vary(rng, (0.28, 0.42, 0.16), 0.08)
    if rng.random() < 0.3:
        near = _vary(rng, (0.55, 0.45, 0.25), 0.06)  # dry fields
    mask = _hills(rng, img, horizon, horizon + 0.07 * h, near, rough=1.2, texture=0.14)
    # the ridge line as rows, for the trees to stand on
    rows = np.argmax(mask > 0.5, axis=0).astype(np.float32)
    rows[rows == 0] = h - 1
    _trees(rng, img, rows, int(rng.integers(3, 12)), (0.04 * h, 0.16 * h), _vary(rng, (0.1, 0.2, 0.08), 0.04),
           conifer=bool(rng.random() < 0.4))


def _town(rng: np.random.Generator, img: F, horizon: float) -> None:
    h, w = img.shape[:2]
    ground = horizon + 0.04 * h
    sil, boxes = _skyline(rng, h, w, ground, rng.uniform(0.12, 0.3) * h)
    yy, _xx = _grid(h, w)
    body = np.zeros_like(img)
    for x0, x1, top, g in boxes:
        base = _vary(rng, (0.78, 0.72, 0.64), 0.12)
        sl = (slice(max(top - int(0.03 * h), 0), g + 1), slice(max(x0, 0), max(x1, 0)))
        body[sl] = base
        # a shaded side: buildings lit from the left
        side = max(1, int(0.3 * (x1 - x0)))
        body[sl[0], max(x1 - side, 0) : max(x1, 0)] *= 0.72
        # window rows
        step = max(4, int(0.022 * h))
        for wy in range(top + step, g - step, step):
            for wx in range(x0 + step // 2, x1 - step // 2, max(4, step)):
                if 0 <= wx < w:
                    body[wy : wy + step // 2, wx : wx + max(2, step // 2)] *= 0.55
    _blend(img, sil, body)
    # street level: a grey-brown foreground
    fg = _vary(rng, (0.42, 0.4, 0.37), 0.05)
    tex = _fbm(rng, h, w, base=6, octaves=6)
    col = np.clip(fg[None, None, :] * (1.0 + 0.08 * tex[..., None]), 0.0, 1.0)
    _blend(img, _aa_mask(yy - ground), col)


def _sky(rng: np.random.Generator, h: int, w: int) -> F:
    horizon = rng.uniform(0.55, 0.8) * h
    img = _blue_sky(rng, h, w, horizon)
    if rng.random() < 0.4:
        _clouds(rng, img, horizon, cover=rng.uniform(0.03, 0.12))
    _land(rng, img, horizon)
    return img


def _clouds_scene(rng: np.random.Generator, h: int, w: int) -> F:
    horizon = rng.uniform(0.55, 0.85) * h
    img = _blue_sky(rng, h, w, horizon)
    _clouds(rng, img, horizon, cover=rng.uniform(0.2, 0.55))
    _land(rng, img, horizon)
    return img


def _sun(img: F, cx: float, cy: float, r: float, colour: NDArray[np.float32], glow: float) -> None:
    h, w = img.shape[:2]
    yy, xx = _grid(h, w)
    d = np.hypot(xx - cx, yy - cy)
    halo = (glow * np.exp(-d / (6.0 * r)) + 0.5 * glow * np.exp(-d / (1.8 * r)))[..., None]
    img += halo * colour
    _blend(img, _aa_mask(r - d, 1.2), np.array([1.0, 0.98, 0.9], np.float32))


def _sunset(rng: np.random.Generator, h: int, w: int) -> F:
    horizon = rng.uniform(0.55, 0.78) * h
    zenith = _vary(rng, (0.22, 0.24, 0.45), 0.08)
    low = _vary(rng, (1.0, 0.72, 0.35), 0.08)
    img = _sky_gradient(h, w, horizon, zenith, low, power=rng.uniform(0.7, 1.3))
    if rng.random() < 0.6:  # thin clouds lit from below
        _clouds(rng, img, horizon, cover=rng.uniform(0.08, 0.3), tint=(1.0, 0.62, 0.42), shadow=(0.42, 0.28, 0.36))
    sun_y = horizon - rng.uniform(0.02, 0.2) * h
    _sun(img, rng.uniform(0.2, 0.8) * w, sun_y, rng.uniform(0.018, 0.04) * min(h, w),
         np.array([1.0, 0.75, 0.4], np.float32), rng.uniform(0.4, 0.9))
    dark = _vary(rng, (0.05, 0.04, 0.05), 0.03)
    if rng.random() < 0.4:  # backlit sea
        yy, xx = _grid(h, w)
        sea = _sky_gradient(h, w, h, low * 0.55, dark * 2.0, power=0.5)
        waves = _fbm(rng, h, w, base=4, octaves=7, stretch=6.0)
        glitter = np.exp(-np.abs(xx - w / 2) / (0.12 * w)) * np.clip(waves, 0, None) * 0.35
        sea = np.clip(sea * (1.0 + 0.1 * waves[..., None]) + glitter[..., None] * np.array([1, 0.8, 0.5], np.float32), 0, 1)
        _blend(img, _aa_mask(yy - horizon), sea)
        # backlit rocks or a dune in the foreground, lower than the horizon so the glitter shows
        _hills(rng, img, horizon + 0.12 * h, h - 0.05 * h, dark, rough=0.9, texture=0.05, octaves=5)
    else:
        mask = _hills(rng, img, horizon - 0.05 * h, horizon + 0.04 * h, dark * 1.6, rough=1.0, texture=0.05, octaves=5)
        rows = np.argmax(mask > 0.5, axis=0).astype(np.float32)
        _trees(rng, img, rows, int(rng.integers(2, 9)), (0.08 * h, 0.3 * h), dark, conifer=bool(rng.random() < 0.5))
    return img


def _sea(rng: np.random.Generator, h: int, w: int) -> F:
    horizon = rng.uniform(0.3, 0.55) * h
    img = _blue_sky(rng, h, w, horizon)
    if rng.random() < 0.6:
        _clouds(rng, img, horizon, cover=rng.uniform(0.05, 0.35))
    yy, xx = _grid(h, w)
    below = np.clip(yy - horizon, 0.0, None) + 1.0
    # perspective: world coordinates of the sea surface; waves as a sum of directional sinusoids
    z = (h * 0.6) / below  # distance
    wx = (xx - w / 2) * z / (h * 0.6)
    height = np.zeros((h, w), np.float32)
    slope = np.zeros((h, w), np.float32)
    for _ in range(36):
        ang = rng.normal(0.0, 0.6)
        lam = float(np.exp(rng.uniform(np.log(0.012), np.log(0.5))))
        k = 2 * np.pi / lam
        ph = k * (np.sin(ang) * wx + np.cos(ang) * z) + rng.uniform(0, 2 * np.pi)
        a = lam * 0.15
        height += (a * np.sin(ph)).astype(np.float32)
        slope += (a * k * np.cos(ph) * np.cos(ang)).astype(np.float32)
    # distant waves blur into one tone (no aliasing near the horizon)
    fade = np.clip((below - 2.0) / (0.25 * h), 0.0, 1.0) ** 0.7
    deep = _vary(rng, (0.05, 0.22, 0.38), 0.05)
    far = np.clip(img[np.clip(int(horizon) - 2, 0, h - 1), :].mean(axis=0) * 0.8, 0, 1)
    t = np.clip(below / (h - horizon), 0.0, 1.0)[..., None] ** 0.5
    sea = far * (1.0 - t) + deep * t
    sea = sea * (1.0 + (0.25 * np.tanh(slope) * fade)[..., None])
    rough = rng.uniform(1.2, 2.6)  # calm to choppy: how much of the sea breaks white
    patches = _smoothstep(0.0, 1.5, _fbm(rng, h, w, base=5, octaves=5, stretch=3.0))
    foam = _smoothstep(rough, rough + 0.6, height / max(float(height.std()), 1e-6) + 0.4 * _fbm(rng, h, w, base=12, octaves=5)) * fade * patches
    _blend(sea, foam * 0.75, np.array([0.9, 0.94, 0.96], np.float32))
    sea = np.clip(sea, 0.0, 1.0)
    _blend(img, _aa_mask(yy - horizon, 0.6), sea)
    if rng.random() < 0.45:  # a beach with a wash line
        shore = h - rng.uniform(0.1, 0.3) * h + 0.03 * h * _fbm1d(rng, w, base=2, octaves=4)
        sand = _vary(rng, (0.82, 0.74, 0.58), 0.05)
        tex = _fbm(rng, h, w, base=30, octaves=4)
        col = np.clip(sand[None, None, :] * (1.0 + 0.06 * tex[..., None]), 0, 1)
        wash = np.exp(-np.abs(yy - shore[None, :]) / (0.006 * h))
        _blend(img, wash.astype(np.float32) * 0.7, np.array([0.95, 0.96, 0.97], np.float32))
        _blend(img, _aa_mask(yy - shore[None, :] - 0.008 * h), col)
    if rng.random() < 0.5:  # a headland at one end of the horizon
        prof = np.clip(_fbm1d(rng, w, base=2, octaves=6) * 0.5 + 0.5, 0, None)
        side = (xx / w) if rng.random() < 0.5 else (1 - xx / w)
        top = horizon - 0.12 * h * prof[None, :] * _smoothstep(0.55, 0.9, side)
        mask = _aa_mask(yy - top) * (yy <= horizon + 0.5) * (side > 0.5)
        _blend(img, mask.astype(np.float32), _vary(rng, (0.32, 0.4, 0.38), 0.05))
    return img


def _snow(rng: np.random.Generator, h: int, w: int) -> F:
    horizon = rng.uniform(0.4, 0.65) * h
    img = _blue_sky(rng, h, w, horizon) if rng.random() < 0.7 else _sky_gradient(
        h, w, horizon, _vary(rng, (0.72, 0.76, 0.82), 0.04), _vary(rng, (0.88, 0.9, 0.92), 0.03))
    if rng.random() < 0.4:
        _clouds(rng, img, horizon, cover=rng.uniform(0.05, 0.25))
    yy, _xx = _grid(h, w)
    # snowy mountains: rock below a snow line, snow on the upper slopes and in gullies
    prof = _fbm1d(rng, w, base=rng.uniform(2, 4), octaves=8, persistence=0.6)
    ridge = horizon - 0.05 * h - rng.uniform(0.1, 0.25) * h * (0.5 + 0.5 * np.tanh(prof))
    mask = _aa_mask(yy - ridge[None, :])
    n = _fbm(rng, h, w, base=10, octaves=6, stretch=0.6)
    snowline = _smoothstep(-0.2, 0.4, n + 1.5 * (1.0 - (yy - ridge[None, :]) / max(0.3 * h, 1.0)) - 1.0)
    lit = np.clip(0.55 + 0.5 * np.gradient(n, axis=1) * 6.0, 0.35, 1.0)[..., None]
    snowc = np.array([0.94, 0.96, 1.0], np.float32) * lit + np.array([0.55, 0.62, 0.78], np.float32) * (1 - lit)
    rock = _vary(rng, (0.32, 0.31, 0.33), 0.05) * (0.8 + 0.3 * lit)
    mountain = snowc * snowline[..., None] + rock * (1 - snowline[..., None])
    _blend(img, mask, np.clip(mountain * 0.92 + img * 0.08, 0, 1))
    # the snow field: bright, with soft drifts and blue shadows
    drift = _fbm(rng, h, w, base=3, octaves=6, stretch=3.0)
    shade = np.clip(0.5 + 1.6 * np.gradient(ndimage.gaussian_filter(drift, 3), axis=0) * h / 40.0, 0.0, 1.0)
    sun = np.array([0.97, 0.97, 0.98], np.float32)
    shadow = _vary(rng, (0.66, 0.74, 0.88), 0.04)
    field = sun * (1 - shade[..., None] * 0.6) + shadow * shade[..., None] * 0.6
    sparkle = (rng.random((h, w)) > 0.9985).astype(np.float32)
    field = np.clip(field + 0.1 * sparkle[..., None], 0, 1)
    fieldline = horizon + 0.02 * h * _fbm1d(rng, w, base=2, octaves=5)
    _blend(img, _aa_mask(yy - fieldline[None, :]), field)
    tm = _trees(rng, img, fieldline + 0.02 * h, int(rng.integers(2, 14)), (0.06 * h, 0.3 * h),
                _vary(rng, (0.08, 0.16, 0.1), 0.03), conifer=True)
    # tree shadows cast sideways on the snow
    dx = int(rng.uniform(0.02, 0.08) * w) * (1 if rng.random() < 0.5 else -1)
    cast = np.roll(ndimage.gaussian_filter(tm, 2.0), dx, axis=1) * (yy > fieldline[None, :]) * (1 - tm)
    img *= (1.0 - 0.35 * cast[..., None] * np.array([1.0, 0.9, 0.6], np.float32))
    return img


def _night(rng: np.random.Generator, h: int, w: int) -> F:
    horizon = rng.uniform(0.55, 0.8) * h
    zenith = _vary(rng, (0.01, 0.015, 0.05), 0.01)
    low = _vary(rng, (0.08, 0.08, 0.16), 0.03)
    if rng.random() < 0.5:  # light pollution: an orange glow over the city
        low = _vary(rng, (0.3, 0.18, 0.12), 0.05)
    img = _sky_gradient(h, w, horizon, zenith, low, power=rng.uniform(1.5, 3.0))
    yy, xx = _grid(h, w)
    stars = (rng.random((h, w)) > 0.9993).astype(np.float32) * rng.uniform(0.3, 1.0, (h, w)).astype(np.float32)
    stars = ndimage.gaussian_filter(stars, 0.7) * 4.0 * (yy < horizon)
    img += stars[..., None]
    if rng.random() < 0.8:
        r = rng.uniform(0.02, 0.045) * min(h, w)
        cx, cy = rng.uniform(0.1, 0.9) * w, rng.uniform(0.08, 0.4) * h
        d = np.hypot(xx - cx, yy - cy)
        img += (0.25 * np.exp(-d / (3 * r)))[..., None] * np.array([0.6, 0.65, 0.8], np.float32)
        craters = 0.9 + 0.1 * _fbm(rng, h, w, base=max(h, w) / r / 2, octaves=3)
        _blend(img, _aa_mask(r - d, 1.0), np.array([0.96, 0.94, 0.86], np.float32) * craters[..., None])
    ground = horizon + rng.uniform(0.0, 0.08) * h
    sil, boxes = _skyline(rng, h, w, ground, rng.uniform(0.2, 0.5) * h)
    body = np.broadcast_to(_vary(rng, (0.03, 0.03, 0.045), 0.015), (h, w, 3)).copy()
    win = np.zeros((h, w, 3), np.float32)
    warm, cool = np.array([1.0, 0.78, 0.42], np.float32), np.array([0.8, 0.88, 1.0], np.float32)
    for x0, x1, top, g in boxes:
        step = max(4, int(rng.uniform(0.014, 0.028) * h))
        p = rng.uniform(0.1, 0.55)
        for wy in range(top + step, g - step // 2, step):
            for wx in range(x0 + step // 2, x1 - step // 2, step):
                if 0 <= wx < w and rng.random() < p:
                    c = (warm if rng.random() < 0.75 else cool) * rng.uniform(0.6, 1.0)
                    win[wy : wy + step // 2, wx : wx + max(2, step // 2)] = c
    _blend(img, sil, np.clip(body + win, 0, 1))
    # street lights with halos along the ground, in the foreground
    fg = _vary(rng, (0.03, 0.03, 0.035), 0.01)
    tex = _fbm(rng, h, w, base=8, octaves=5)
    _blend(img, _aa_mask(yy - ground), np.clip(fg * (1 + 0.3 * tex[..., None]), 0, 1))
    glow = np.zeros((h, w), np.float32)
    for lx in np.arange(rng.uniform(0, 0.15) * w, w, rng.uniform(0.1, 0.25) * w):
        ly = ground - rng.uniform(0.04, 0.1) * h
        d = np.hypot(xx - lx, yy - ly)
        glow += np.exp(-d / (0.02 * h)) + 0.25 * np.exp(-d / (0.08 * h))
    img += glow[..., None] * _vary(rng, (1.0, 0.72, 0.35), 0.1)
    if rng.random() < 0.45:  # a harbour: the lights reflected in rippled water
        water_top = int(min(h - 2, ground + 0.02 * h))
        refl = img[water_top - 1 :: -1][: h - water_top]
        refl = ndimage.gaussian_filter(refl, (4.0, 1.0, 0))
        ripple = 1.0 + 0.5 * _fbm(rng, h - water_top, w, base=6, octaves=6, stretch=8.0)
        img[water_top:water_top + refl.shape[0]] = np.clip(refl * 0.55 * ripple[: refl.shape[0], :, None], 0, 1)
    return img


def _overcast(rng: np.random.Generator, h: int, w: int) -> F:
    """Grey sky, white and grey objects. All neutral layers are built as one grey channel so R = G = B."""
    horizon = rng.uniform(0.4, 0.65) * h
    yy, xx = _grid(h, w)
    top, bottom = rng.uniform(0.62, 0.78), rng.uniform(0.8, 0.92)
    grey = top + (bottom - top) * np.clip(yy / horizon, 0, 1) + 0.03 * _fbm(rng, h, w, base=2, octaves=6, stretch=2.5)
    ground = rng.uniform(0.28, 0.45)
    tex = _fbm(rng, h, w, base=12, octaves=6)
    grey = np.where(yy > horizon, ground * (1 + 0.08 * tex), grey).astype(np.float32)
    # white buildings and objects with a shaded side and dark grey windows
    ground_row = horizon + 0.02 * h
    sil, boxes = _skyline(rng, h, w, ground_row, rng.uniform(0.2, 0.45) * h)
    body = np.zeros((h, w), np.float32)
    for x0, x1, top_, g in boxes:
        v = rng.uniform(0.86, 0.97)
        body[max(top_ - int(0.03 * h), 0) : g + 1, max(x0, 0) : max(x1, 0)] = v
        side = max(1, int(rng.uniform(0.2, 0.4) * (x1 - x0)))
        body[max(top_ - int(0.03 * h), 0) : g + 1, max(x1 - side, 0) : max(x1, 0)] = v * rng.uniform(0.7, 0.85)
        step = max(5, int(0.03 * h))
        wv = rng.uniform(0.15, 0.45)
        for wy in range(top_ + step, g - step, step):
            for wx in range(x0 + step // 2, x1 - step, step):
                if 0 <= wx < w:
                    body[wy : wy + step // 2, wx : wx + step // 2] = wv
    grey = grey * (1 - sil) + body * sil
    # white boxes / vans on the street and a white road line
    for _ in range(int(rng.integers(1, 5))):
        bw, bh = rng.uniform(0.08, 0.22) * w, rng.uniform(0.05, 0.14) * h
        bx, by = rng.uniform(0, w - bw), rng.uniform(horizon + 0.1 * h, h - 0.02 * h)
        d = np.minimum(np.minimum(xx - bx, bx + bw - xx), np.minimum(yy - (by - bh), by - yy))
        m = _aa_mask(d)
        v = rng.uniform(0.9, 0.98) * (1 - 0.15 * np.clip((yy - (by - bh)) / bh, 0, 1))
        grey = grey * (1 - m) + v * m
        shadow = _aa_mask(np.minimum(np.minimum(xx - bx, bx + bw - xx), np.minimum(yy - by, by + 0.02 * h - yy)), 3)
        grey *= 1 - 0.4 * shadow
    line = _aa_mask(0.004 * h - np.abs(yy - (horizon + rng.uniform(0.3, 0.45) * (h - horizon)))) * (np.sin(xx / (0.03 * w)) > -0.2)
    grey = grey * (1 - line) + 0.92 * line
    img = np.repeat(np.clip(grey, 0, 1)[..., None], 3, axis=2).astype(np.float32)
    # one or two coloured accents (a door, a sign) so the picture is not all grey; the rest stays neutral
    for _ in range(int(rng.integers(1, 3))):
        ax, ay = rng.uniform(0.05, 0.9) * w, rng.uniform(horizon - 0.1 * h, horizon + 0.01 * h)
        aw, ah = rng.uniform(0.015, 0.05) * w, rng.uniform(0.03, 0.08) * h
        m = _aa_mask(np.minimum(np.minimum(xx - ax, ax + aw - xx), np.minimum(yy - ay, ay + ah - yy)))
        hue = rng.integers(3)
        col = np.array([0.25, 0.25, 0.25], np.float32)
        col[hue] = 0.75
        _blend(img, m, col)
    return img


def _person(rng: np.random.Generator, img: F, cx: float, cy: float, head: float) -> None:
    """A head-and-shoulders figure centred on (cx, cy) with head half-height ``head`` (pixels)."""
    h, w = img.shape[:2]
    yy, xx = _grid(h, w)
    i = rng.uniform(0, len(SKIN_TONES) - 1)
    lo = int(np.floor(i))
    hi = min(lo + 1, len(SKIN_TONES) - 1)
    skin = (np.asarray(SKIN_TONES[lo], np.float32) * (1 - (i - lo)) + np.asarray(SKIN_TONES[hi], np.float32) * (i - lo)) / 255.0
    light = np.array([rng.uniform(-0.6, 0.6), rng.uniform(-0.7, -0.1), 1.0], np.float32)
    light /= np.linalg.norm(light)

    def shade(dx: F, dy: F) -> F:
        nz = np.sqrt(np.clip(1.0 - dx * dx - dy * dy, 0.0, 1.0))
        lam = np.clip(dx * light[0] + dy * light[1] + nz * light[2], 0.0, 1.0)
        return (0.35 + 0.75 * lam).astype(np.float32)

    def skin_col(s: F) -> F:
        # shadows on skin go warmer and more saturated, highlights a little paler
        warm = np.array([1.0, 0.82, 0.72], np.float32)
        base = skin[None, None, :] * s[..., None]
        return np.clip(base * (warm + (1 - warm) * np.clip(s, 0, 1)[..., None]), 0, 1)

    # clothes: shoulders sloping into a torso that runs off the bottom of the picture
    grey = rng.uniform(0.1, 0.8)
    cloth = np.clip(grey + rng.uniform(-0.25, 0.25, 3) * rng.uniform(0.2, 1.0), 0.03, 0.95).astype(np.float32)
    sx, sy = 2.4 * head, 2.6 * head
    tcy = cy + 1.35 * head + sy
    dx, dy = (xx - cx) / sx, (yy - tcy) / sy
    dy = np.minimum(dy, 0.0)  # below its middle the torso keeps its full width
    m = _aa_mask((1 - np.hypot(dx, dy)) * sy)
    folds = 1.0 + 0.06 * _fbm(rng, h, w, base=12, octaves=4, stretch=0.4)
    _blend(img, m, np.clip(cloth * shade(dx, dy)[..., None] * folds[..., None], 0, 1))
    # neck
    nw = 0.42 * head
    m = _aa_mask(np.minimum(nw - np.abs(xx - cx), np.minimum(yy - cy, cy + 1.45 * head - yy)))
    _blend(img, m, skin_col(0.75 * shade((xx - cx) / nw * 0.9, np.zeros_like(xx))))
    # hair behind the head
    hair = _vary(rng, [(0.05, 0.04, 0.035), (0.22, 0.13, 0.07), (0.55, 0.4, 0.22), (0.7, 0.68, 0.65)][int(rng.integers(4))], 0.03)
    rx, ry = 0.78 * head, head
    hair_r = rng.uniform(1.02, 1.3)
    dxh, dyh = (xx - cx) / (rx * hair_r), (yy - (cy - 0.08 * head)) / (ry * hair_r)
    strands = 1.0 + 0.2 * _fbm(rng, h, w, base=30, octaves=4, stretch=0.3)
    hm = _aa_mask((1 - np.hypot(dxh, dyh)) * ry) * (yy < cy + rng.uniform(0.0, 1.2) * head)
    _blend(img, hm.astype(np.float32), np.clip(hair * shade(dxh, dyh)[..., None] * strands[..., None], 0, 1))
    # the face
    dx, dy = (xx - cx) / rx, (yy - cy) / ry
    face = _aa_mask((1 - np.hypot(dx, dy)) * ry)
    s = shade(dx, dy)
    col = skin_col(s)
    # cheeks slightly redder, eyes, brows, nose shadow, lips
    cheeks = np.exp(-(((np.abs(dx) - 0.45) / 0.2) ** 2 + ((dy - 0.2) / 0.2) ** 2))
    col = col * (1 + 0.06 * cheeks[..., None] * np.array([1.0, -0.5, -0.5], np.float32))
    for ex in (-0.36, 0.36):
        e = _aa_mask((1 - np.hypot((dx - ex) / 0.17, (dy + 0.08) / 0.075)) * 0.075 * ry)
        _blend(col, e, np.array([0.92, 0.9, 0.88], np.float32) * s[..., None])
        iris = _aa_mask((1 - np.hypot((dx - ex) / 0.07, (dy + 0.08) / 0.07)) * 0.07 * ry)
        _blend(col, iris, _vary(rng, (0.2, 0.12, 0.07), 0.05))
        brow = _aa_mask((1 - np.hypot((dx - ex) / 0.22, (dy + 0.27) / 0.035)) * 0.035 * ry)
        _blend(col, brow * 0.85, hair * 0.8)
    nose = np.exp(-(((dx - 0.05 * np.sign(light[0] + 1e-3)) / 0.06) ** 2 + ((dy - 0.2) / 0.15) ** 2))
    col *= (1 - 0.18 * nose)[..., None]
    lips = _aa_mask((1 - np.hypot(dx / 0.26, (dy - 0.52) / 0.065)) * 0.065 * ry)
    _blend(col, lips, np.clip(skin * np.array([0.85, 0.55, 0.55], np.float32), 0, 1) * s[..., None])
    _blend(img, face, np.clip(col, 0, 1))


def _skin(rng: np.random.Generator, h: int, w: int) -> F:
    r = rng.random()
    if r < 0.35:
        img = _sky(rng, h, w)
    elif r < 0.5:
        img = _sea(rng, h, w)
    else:  # an indoor wall with a soft light falloff
        wall = _vary(rng, tuple(rng.uniform(0.35, 0.9, 3)), 0.0)
        yy, xx = _grid(h, w)
        fall = 1.0 - 0.35 * ((xx / w - rng.uniform(0, 1)) ** 2 + (yy / h - 0.3) ** 2)
        img = np.clip(wall * fall[..., None] * (1 + 0.03 * _fbm(rng, h, w, base=3)[..., None]), 0, 1).astype(np.float32)
    n = int(rng.integers(1, 4))
    head = rng.uniform(0.12, 0.22) * min(h, w) * (1.0 if n == 1 else 0.75)
    xs = (np.linspace(0.22, 0.78, n) + rng.uniform(-0.05, 0.05, n)) * w if n > 1 else [rng.uniform(0.35, 0.65) * w]
    for cx in xs:
        _person(rng, img, float(cx), rng.uniform(0.38, 0.55) * h, head * rng.uniform(0.85, 1.15))
    # soft background blur is not applied (the people are painted last); a light grade instead
    return img


_BUILDERS: dict[str, Callable[[np.random.Generator, int, int], F]] = {
    "sky": _sky, "clouds": _clouds_scene, "sunset": _sunset, "sea": _sea, "snow": _snow,
    "night": _night, "overcast": _overcast, "skin": _skin,
}


def scene(kind: str, rng: np.random.Generator, size: tuple[int, int]) -> NDArray[np.uint8]:
    """One procedural picture: ``kind`` from ``KINDS``, ``size`` = (height, width) in pixels (>= 64 each).

    Returns uint8 RGB, shape (height, width, 3). Deterministic: the same rng state gives the same picture
    (``np.random.default_rng(seed)``); the rng is advanced. About 0.5-2 s at 1024 x 768 on one core.
    """
    if kind not in _BUILDERS:
        raise ValueError(f"unknown scene kind {kind!r}; one of {', '.join(KINDS)}")
    h, w = int(size[0]), int(size[1])
    if h < 64 or w < 64:
        raise ValueError(f"scene size {size} is too small (64 px minimum per side)")
    img = _BUILDERS[kind](rng, h, w).astype(np.float32)
    return _finish(rng, img, neutral_noise=(kind == "overcast"))


def scenes(seed: int, count: int, size: tuple[int, int], kinds: tuple[str, ...] = KINDS) -> list[tuple[str, NDArray[np.uint8]]]:
    """``count`` scenes cycling through ``kinds``, from one seed: [(kind, rgb), ...]."""
    rng = np.random.default_rng(seed)
    return [(kinds[i % len(kinds)], scene(kinds[i % len(kinds)], rng, size)) for i in range(count)]


if __name__ == "__main__":  # python -m training.synth OUT_DIR [count] [seed]: writes PNGs for a look
    import sys
    from pathlib import Path

    from PIL import Image

    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    for i, (kind, rgb) in enumerate(scenes(seed, count, (576, 768))):
        Image.fromarray(rgb).save(out / f"{i:02d}_{kind}.png")
