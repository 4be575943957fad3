"""Lost colours: where the photo has a clear colour and the style painted it grey or pale, the photo's colour comes
back (the tone guard's step 3, ``imaging.tone``).

Why: a small convolutional generator and the cel palette after it lose small areas of a colour the rest of the
picture does not have: a green station sign's stripe came out mid-grey, a red signal lamp brown, kimono patterns
washed out (every blind rater of issue 41 named scene_6's stripe and street_1's lamp). An anime background keeps
exactly those accents. A palette entry per lost hue was tried first and spent the palette's colours (look.py's
colours median 0.57 -> 0.63, over issue 41's bound); this step changes only the pixels that lost their colour.

How, per pixel, in YCbCr (Pillow's conversion, C): the chroma is the (Cb, Cr) vector. Where the photo's chroma is
at least ``VIVID`` (fully from ``VIVID_FULL``) and the output kept less than ``KEPT`` of it (fully lost at
``KEPT_NONE``), the output's (Cb, Cr) is replaced by the photo's; its luma, the style's light and shade, stays.
The weight is found at half size and opened there (eroded by a pixel, then grown back), so a photo's line a pixel
or two off the output's does not tint the output's outline: only areas of about 4 pixels and more across are
recoloured, and only where the output's luma is near the photo's (``LUMA_SAME``): a pale sky the style drew where
the photo has a leaf is the style's shape, not a lost colour. A hue the style turned is left as drawn: a style's
own shift (a warmer sky, a teal for a green) is one, and so is every place where the style moved an edge (autumn
leaves drawn a few pixels from the photo's put their orange on the blue sky between them: scene_10, 3.7 % of its
pixels, when turned hues counted). A paler colour that keeps half its chroma is the style's too
(tests/test_tone.py's strong style, tests/test_hues.py).

Blind round cmp15 (the 31 shared photos, toon, a first version that also restored turned hues and had no luma
test): the restored picture preferred on 7 (scene_6's green band, a pine's green, a sunset's pink stripe), the
other on none, 24 the same.

Deterministic; the input arrays are never modified.
"""
from __future__ import annotations

import numpy as np
from PIL import Image, ImageFilter

VIVID, VIVID_FULL = 10.0, 18.0      # the photo's (Cb, Cr) length from which a pixel counts as coloured, fully
KEPT, KEPT_NONE = 0.5, 0.3          # the output's share of that length below which the colour counts as lost
LUMA_SAME, LUMA_OFF = 24.0, 48.0  # and its luma is within this of the photo's (none from the second): the same thing
ERODE, GROW = ImageFilter.MinFilter(3), ImageFilter.MaxFilter(3)  # an opening: what is 2 px thin or less goes
BLUR = ImageFilter.BoxBlur(1)


def lost_weight(output: np.ndarray, photo: np.ndarray) -> Image.Image:
    """L image at the pictures' size: 255 where the output lost the photo's colour (module doc), 0 elsewhere."""
    height, width = output.shape[:2]

    def ycc(rgb: np.ndarray) -> np.ndarray:
        return np.asarray(Image.fromarray(rgb).reduce(2).convert("YCbCr"), np.float32) - 128.0  # 2 x 2 means

    out, pic = ycc(output), ycc(photo)
    out_len, photo_len = np.hypot(out[..., 1], out[..., 2]), np.hypot(pic[..., 1], pic[..., 2])
    vivid = np.clip((photo_len - VIVID) / (VIVID_FULL - VIVID), 0.0, 1.0)
    faded = np.clip((KEPT - out_len / np.maximum(photo_len, 1e-3)) / (KEPT - KEPT_NONE), 0.0, 1.0)
    same = np.clip((LUMA_OFF - np.abs(out[..., 0] - pic[..., 0])) / (LUMA_OFF - LUMA_SAME), 0.0, 1.0)
    weight = Image.fromarray(np.uint8(np.rint(255 * vivid * faded * same)))
    return weight.filter(ERODE).filter(GROW).resize((width, height), Image.Resampling.BILINEAR)


def restore_hues(output: np.ndarray, photo: np.ndarray, *, strength: float = 1.0) -> np.ndarray:
    """``output`` (H x W x 3 u8) with the photo's colour back where it was lost (module doc); ``photo`` is the
    picture as fed to the model, same size. ``strength`` 0..1 scales the weight. Returns ``output`` itself when
    nothing was lost, else a new array."""
    if strength <= 0:
        return output
    weight = lost_weight(output, photo)
    if strength < 1:
        weight = weight.point(lambda level: round(level * strength))
    box = weight.getbbox()
    if box is None:
        return output
    x0, y0, x1, y1 = box  # only there: a picture's lost colours are a sign or a lamp, not the whole of it
    part = Image.fromarray(output[y0:y1, x0:x1])
    luma = part.convert("YCbCr").getchannel("Y")
    _, cb, cr = Image.fromarray(photo[y0:y1, x0:x1]).convert("YCbCr").split()
    recoloured = Image.merge("YCbCr", (luma, cb.filter(BLUR), cr.filter(BLUR))).convert("RGB")
    restored: np.ndarray = output.copy()
    restored[y0:y1, x0:x1] = np.asarray(Image.composite(recoloured, part, weight.crop(box)))
    return restored
