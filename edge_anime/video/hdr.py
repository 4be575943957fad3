"""HDR clips from phones (HEVC 10-bit, HLG or PQ, BT.2020) tone-mapped to SDR BT.709 before inference.

Why: the styles were trained on SDR pictures. An HLG or PQ frame read as if it were BT.709 comes out grey and
washed out (its code values mean other light), so an HDR clip is graded to SDR first, then takes the normal
frame path (``imaging.plan``, the pipeline, the writer), rotation and sound as for any clip.

Why in numpy: PyAV's bundled FFmpeg has ``tonemap`` but not ``zscale`` (no zimg), and its ``colorspace``
filter knows neither HLG nor PQ, so no filter chain in the wheel linearises these transfers. FFmpeg's scaler
still does the YUV -> RGB step (BT.2020 matrix, limited range, 16 bits per sample) at the clip's conversion
size (``job.scaled_size``: twice the inference size, as for SDR frames), and this module does the rest in a
few vectorised passes, the chain FFmpeg documents for its own tone mapping (``zscale=t=linear:npl=100,
zscale=p=bt709, tonemap=hable:desat=0, zscale=t=bt709``):

  1. to display light in units of 100 cd/m2: HLG's inverse OETF and its OOTF (BT.2100, system gamma 1.2
     on a 1000 cd/m2 display), or PQ's EOTF (absolute: 10 000 cd/m2 at full code), a 64k-entry table on the
     16-bit samples;
  2. BT.2020 -> BT.709 primaries (a 3x3 matrix in linear light);
  3. Hable's filmic curve on the brightest component, scaled so the peak (1000 cd/m2, FFmpeg's default for
     a frame without light-level metadata) maps to white; the colour is scaled linearly with it, so hues
     do not shift; what the gamut matrix leaves negative is clipped;
  4. encoded for an SDR BT.709 display (BT.1886's inverse EOTF, gamma 1/2.4) to 8 bits (a table).

The figures against FFmpeg's own chain (Debian's ``ffmpeg``, which has zscale) are in ``docs/video.md``.
SDR clips never reach this module's per-frame code: ``tone_map_for`` returns None for them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError

# FFmpeg's AVColorTransferCharacteristic / AVColorPrimaries / AVColorSpace values (ISO/IEC 23091-2)
TRC_UNSPECIFIED = 2
TRC_PQ = 16    # smpte2084
TRC_HLG = 18   # arib-std-b67
PRIMARIES_BT709 = 1
SPACE_BT709 = 1
RANGE_FULL = 2  # AVCOL_RANGE_JPEG
HDR_TRANSFERS = {TRC_PQ: "PQ", TRC_HLG: "HLG"}

REFERENCE_WHITE_NITS = 100.0   # 1.0 in linear light, as zscale's npl=100
PEAK_NITS = 1000.0             # FFmpeg's tonemap default peak without metadata; HLG's nominal display
HLG_SYSTEM_GAMMA = 1.2         # BT.2100 at a 1000 cd/m2 display
BT2020_LUMA = (0.2627, 0.6780, 0.0593)
BT709_LUMA = (0.2126, 0.7152, 0.0722)

# BT.2020 -> BT.709 primaries, linear light (ITU-R BT.2087), rows: R, G, B out
BT2020_TO_BT709 = np.array([[1.6605, -0.5876, -0.0728],
                            [-0.1246, 1.1329, -0.0083],
                            [-0.0182, -0.1006, 1.1187]], np.float32)
BAND_PIXELS = 32_768  # pixels graded at once: ~1.5 MB of float32 temporaries, within a core's cache
OETF_STEPS = 65536  # the linear -> 8-bit table: 1/2.4 is steep near black, so as fine as the input


def _hlg_inverse_oetf(signal: np.ndarray) -> np.ndarray:
    """BT.2100 HLG: non-linear signal [0, 1] -> scene light [0, 1]."""
    a, b, c = 0.17883277, 0.28466892, 0.55991073
    low = signal**2 / 3
    high = (np.exp((signal - c) / a) + b) / 12
    return np.where(signal <= 0.5, low, high)


def _pq_eotf(signal: np.ndarray) -> np.ndarray:
    """SMPTE ST 2084: non-linear signal [0, 1] -> display light in cd/m2 [0, 10 000]."""
    m1, m2 = 2610 / 16384, 2523 / 4096 * 128
    c1, c2, c3 = 3424 / 4096, 2413 / 4096 * 32, 2392 / 4096 * 32
    p = np.power(signal, 1 / m2)
    nits: np.ndarray = 10000.0 * np.power(np.maximum(p - c1, 0) / (c2 - c3 * p), 1 / m1)
    return nits


def _hable(x: float) -> float:
    """John Hable's filmic curve (Uncharted 2), with FFmpeg ``tonemap``'s constants."""
    a, b, c, d, e, f = 0.15, 0.50, 0.10, 0.20, 0.02, 0.30
    return (x * (x * a + b * c) + d * e) / (x * (x * a + b) + d * f) - e / f


def _bt1886_inverse_eotf(linear: np.ndarray) -> np.ndarray:
    """Display light [0, 1] -> signal for an SDR display (BT.1886, gamma 2.4, zero black level): the light is
    display-referred after the tone curve, so it is encoded for the display, as zimg does for ``t=bt709``
    (not BT.709's camera OETF, whose linear toe and 0.45 exponent would darken the mid-tones ~7 %)."""
    signal: np.ndarray = np.power(linear, 1 / 2.4)
    return signal


@dataclass(frozen=True)
class ToneMap:
    """One clip's HDR -> SDR grade: its transfer (``HLG``/``PQ``), whether its primaries are BT.2020 and
    its YUV matrix, with the tables built once per clip."""

    transfer: str
    bt2020: bool = True
    matrix: str = "bt2020"  # swscale's name for the YUV -> RGB matrix
    full_range: bool = False
    peak_nits: float = PEAK_NITS
    _to_linear: np.ndarray = field(init=False, repr=False, compare=False)
    _oetf: np.ndarray = field(init=False, repr=False, compare=False)
    _scale: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        signal = np.arange(65536, dtype=np.float64) / 65535
        if self.transfer == "HLG":
            linear = _hlg_inverse_oetf(signal)  # scene light; the OOTF (needs luminance) is in ``apply``
        elif self.transfer == "PQ":
            linear = _pq_eotf(signal) / REFERENCE_WHITE_NITS
        else:
            raise ValueError(f"not an HDR transfer: {self.transfer!r}")
        peak = self.peak_nits / REFERENCE_WHITE_NITS
        object.__setattr__(self, "_to_linear", linear.astype(np.float32))
        object.__setattr__(self, "_scale", float(1 / _hable(peak)))
        codes = np.arange(OETF_STEPS, dtype=np.float64) / (OETF_STEPS - 1)
        object.__setattr__(self, "_oetf", np.round(_bt1886_inverse_eotf(codes) * 255).astype(np.uint8))

    def describe(self) -> str:
        return f"{self.transfer} {'BT.2020' if self.bt2020 else 'BT.709'} -> SDR BT.709"

    def apply(self, rgb16: np.ndarray) -> np.ndarray:
        """16-bit non-linear R'G'B' (HxWx3, uint16, full range, the clip's primaries) -> 8-bit BT.709 R'G'B'."""
        return self.apply_planes(rgb16[..., 0], rgb16[..., 1], rgb16[..., 2])

    def apply_planes(self, red: np.ndarray, green: np.ndarray, blue: np.ndarray) -> np.ndarray:
        """The grade on three HxW uint16 planes -> HxWx3 uint8. Planar on purpose: every step is an
        elementwise pass over one contiguous plane; the same steps on interleaved HxWx3 arrays (strided
        channels, ``max(axis=-1)``) took twice as long. In bands of rows, so that a band's dozen float32
        temporaries stay in the CPU's cache: a whole 1080p frame at once took 140 ms, in bands ~4x less."""
        out = np.empty((*red.shape, 3), np.uint8)
        step = max(1, BAND_PIXELS // max(1, red.shape[1]))
        for top in range(0, red.shape[0], step):
            rows = slice(top, top + step)
            self._band(red[rows], green[rows], blue[rows], out[rows])
        return out

    def _band(self, red: np.ndarray, green: np.ndarray, blue: np.ndarray, out: np.ndarray) -> None:
        r, g, b = (np.take(self._to_linear, plane) for plane in (red, green, blue))
        if self.transfer == "HLG":
            # OOTF: display = Lw * Ys^(gamma - 1) * scene, in units of the 100 cd/m2 reference white
            kr, kg, kb = BT2020_LUMA if self.bt2020 else BT709_LUMA
            gain = r * kr
            gain += g * kg
            gain += b * kb
            np.maximum(gain, 1e-6, out=gain)
            np.power(gain, HLG_SYSTEM_GAMMA - 1, out=gain)
            gain *= PEAK_NITS / REFERENCE_WHITE_NITS
            r *= gain
            g *= gain
            b *= gain
        if self.bt2020:
            m = BT2020_TO_BT709
            r, g, b = (m[i, 0] * r + m[i, 1] * g + m[i, 2] * b for i in range(3))
        # Hable on the brightest component, the colour scaled linearly with it (FFmpeg's tonemap filter)
        sig = np.maximum(np.maximum(r, g), b)
        np.maximum(sig, 1e-6, out=sig)
        ratio = _hable_inplace(sig.copy())
        ratio *= self._scale
        ratio /= sig
        for i, plane in enumerate((r, g, b)):
            plane *= ratio
            np.clip(plane, 0.0, 1.0, out=plane)  # what the gamut matrix left negative, and over the peak
            plane *= OETF_STEPS - 1
            plane += 0.5
            out[..., i] = np.take(self._oetf, plane.astype(np.uint16))

    def frame_rgb(self, frame: Any, size: tuple[int, int] | None) -> np.ndarray:
        """A decoded frame (any YUV format FFmpeg decodes HDR into) -> tone-mapped 8-bit RGB at ``size``
        (None: the frame's own): the scaler converts (the clip's matrix and range, planar 16-bit RGB), this
        class grades."""
        width, height = size if size is not None else (frame.width, frame.height)
        planar = frame.reformat(width=width, height=height, format="gbrp16le", interpolation="AREA",
                                src_colorspace=self.matrix, src_color_range="JPEG" if self.full_range else "MPEG",
                                dst_color_range="JPEG")
        g, b, r = (_plane(planar.planes[i], width, height) for i in range(3))  # gbrp: G, B, R
        return self.apply_planes(r, g, b)


def _plane(plane: Any, width: int, height: int) -> np.ndarray:
    """One 16-bit plane of a frame as an HxW array (a view: rows are ``line_size`` bytes apart)."""
    rows = np.frombuffer(plane, np.uint16).reshape(-1, plane.line_size // 2)
    return rows[:height, :width]


def _hable_inplace(x: np.ndarray) -> np.ndarray:
    """``_hable`` on a float32 array without a temporary per term (its passes dominate the grade's cost)."""
    a, b, c, d, e, f = 0.15, 0.50, 0.10, 0.20, 0.02, 0.30
    num = x * a
    num += b * c
    num *= x
    num += d * e
    x2 = x * a
    x2 += b
    x2 *= x
    x2 += d * f
    num /= x2
    num -= e / f
    return num


def tone_map_for(path: Path, tags: Any) -> ToneMap | None:
    """The grade a stream's header (its codec context) or a frame asks for: a ToneMap for HLG or PQ (from
    ``color_trc``), None for anything else (SDR, or a transfer this box does not know: the clip is read as
    stored, as before). Primaries and matrix follow the tags (BT.709 or BT.2020); unspecified ones on an HDR
    stream are taken as BT.2020, what every phone records; so is the range (limited unless tagged full)."""
    transfer = HDR_TRANSFERS.get(int(tags.color_trc or TRC_UNSPECIFIED))
    if transfer is None:
        return None
    bt2020 = int(tags.color_primaries or 0) != PRIMARIES_BT709
    matrix = "itu709" if int(tags.colorspace or 0) == SPACE_BT709 else "bt2020"
    return ToneMap(transfer=transfer, bt2020=bt2020, matrix=matrix, full_range=int(tags.color_range or 0) == RANGE_FULL)


def grade(path: Path, frame: Any, index: int, tone: ToneMap | None) -> ToneMap | None:
    """The grade for this frame: the header's (``ClipInfo.hdr``), or, when the header states SDR and the
    first frame is tagged HLG or PQ, the first frame's (HEVC can carry HLG in an "alternative transfer" SEI
    behind an SDR transfer in its parameter sets; the decoder tags the frame, the header keeps the SDR one).
    One clip gets one grade, since a grade switched mid-clip would flash: a later frame tagged with another
    HDR transfer, or HDR in a clip graded as SDR, is refused with both named. Frames tagged SDR or not
    tagged follow the clip's grade (the container's tag wins over a stream's backward-compatible one)."""
    own = HDR_TRANSFERS.get(int(frame.color_trc or TRC_UNSPECIFIED))
    if own is None or (tone is not None and own == tone.transfer):
        return tone
    if index == 0 and tone is None:
        return tone_map_for(path, frame)
    stated = f"{tone.transfer} HDR" if tone is not None else "SDR"
    raise InputError(f"{path}: frame {index + 1} is tagged {own} HDR, but the clip is {stated} (its header and "
                     "first frame); a clip that switches transfer mid-way is not graded", stage="decode")
