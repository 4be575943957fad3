"""What a HEIC/HEIF or AVIF container's boxes say its primary picture costs to decode, before anything decodes.

Why: the size Pillow's openers report for a HEIF/AVIF is the primary picture's size after its transformations,
and a ``clap`` (clean aperture) box crops. A 14 KB HEIC can declare a 32768 x 32768 ``grid`` of one 2048 x 2048
tile referenced 256 times, cropped to 64 x 64: the opener says 64 x 64, ``image.max_pixels`` passes it, and
libheif then allocates the whole grid and decodes every tile (1.8 GB and 11 s in ``stylize``). The same gap
without a grid: an item whose ``ispe`` (the size its header signals) says 64 x 64 while its coded picture (the
AV1 sequence header's maximum frame size, the HEVC SPS's picture size) is 8192 x 8192; libavif decodes the whole
frame, and libheif decodes it before it notices the mismatch.

So the boxes (ISO/IEC 14496-12 and 23008-12: ``meta`` with ``pitm``, ``iinf``, ``iloc``, ``iref``, ``iprp``)
are read here, by hand and from bytes already in memory, and every size the decoder would allocate or decode is
reported: each item's ``ispe``, each coded picture's own size, a grid's or an overlay's output size, and the
pixels of all the coded pictures the primary is derived from (a grid's tiles, once per reference). The decoder
checks them against ``image.max_pixels`` (``decoder._check_container``).

Only reading: a file this module cannot follow (boxes it does not know, construction methods it does not
handle) yields what it could read, and libheif's own security limits, which the decoder sets to
``image.max_pixels`` too (``heif.apply_security_limits``), stay the backstop. Nothing here allocates more than
the bytes it was given.
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

DERIVED_TYPES = frozenset({b"grid", b"iovl", b"iden"})  # items made of other items (their ``dimg`` references)
MAX_DEPTH = 4  # derived items of derived items: libheif allows none nested in a grid; a loop must not recurse
MAX_NAL_UNITS = 64  # NAL units of an HEVC item scanned for an SPS: parameter sets come first in a real file
MAX_ITEM_SCAN_BYTES = 1 << 20  # of an item's data, read for its headers (they come first)
MAX_ITEMS = 1000  # libheif's own default limit (heif_security_limits.max_items): more is refused there anyway
MAX_OBUS = 16  # AV1 OBUs of an item scanned for its sequence header: it comes first (after a temporal delimiter)
BLOCK_ALIGN = 64  # HEVC's largest coding tree block; encoders pad a picture to blocks (x265: 8, libaom: 8)
HEVC_SPS = 33
AV1_SEQUENCE_HEADER = 1


class Malformed(ValueError):
    """Boxes this reader cannot follow; the caller leaves the judgement to the decoder."""


@dataclass(frozen=True)
class Size:
    """A size the decoder will allocate a picture of, and what in the file says so."""
    what: str
    width: int
    height: int
    allowed: int = 0  # a coded picture may exceed its ispe by its codec's block alignment (padded_pixels)

    @property
    def pixels(self) -> int:
        return self.width * self.height


@dataclass
class Cost:
    """What decoding the primary picture costs, from the boxes alone."""
    sizes: list[Size] = field(default_factory=list)  # each must fit image.max_pixels on its own
    coded_pixels: int = 0  # the pixels of every coded picture decoded for the primary (a grid's tiles, summed)
    coded_count: int = 0
    largest_coded: tuple[int, int] = (0, 0)
    # What the coded pictures may add up to besides max_pixels: a grid's output rounded up to whole tiles (the
    # last column and row overhang it), a single picture's ispe rounded up to its codec's blocks.
    cover_pixels: int = 0

    def over(self, max_pixels: int) -> str | None:
        """Why this picture is over ``max_pixels``, or None when every size and the coded pictures' sum fit
        (give or take the rounding ``cover_pixels`` allows)."""
        for size in self.sizes:
            if size.pixels > max(max_pixels, size.allowed):
                return f"{size.what} {size.width}x{size.height} is {size.pixels} pixels"
        if self.coded_pixels > max(max_pixels, self.cover_pixels):
            width, height = self.largest_coded
            return (f"{self.coded_count} coded pictures of up to {width}x{height} are {self.coded_pixels} pixels "
                    "to decode")
        return None


def _u(data: bytes, at: int, size: int) -> int:
    if size == 0:
        return 0
    if at < 0 or at + size > len(data):
        raise Malformed("a field runs past its box")
    return int.from_bytes(data[at:at + size], "big")


def _boxes(data: bytes, start: int, end: int) -> Iterator[tuple[bytes, int, int]]:
    """(type, payload start, box end) of each box in ``data[start:end]``."""
    pos = start
    while pos + 8 <= end:
        size, kind, header = _u(data, pos, 4), data[pos + 4:pos + 8], 8
        if size == 1:
            size, header = _u(data, pos + 8, 8), 16
        elif size == 0:
            size = end - pos
        if size < header or pos + size > end:
            raise Malformed(f"box {kind!r} of {size} bytes does not fit its parent")
        yield kind, pos + header, pos + size
        pos += size


def _children(data: bytes, start: int, end: int) -> dict[bytes, tuple[int, int]]:
    found: dict[bytes, tuple[int, int]] = {}
    for kind, payload, box_end in _boxes(data, start, end):
        found.setdefault(kind, (payload, box_end))
    return found


class _Bits:
    """A big-endian bit reader over an RBSP or OBU payload (H.265 u(n)/ue(v), AV1 f(n)/uvlc())."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def read(self, count: int) -> int:
        value = 0
        for _ in range(count):
            byte = self.pos >> 3
            if byte >= len(self.data):
                raise Malformed("a header ends early")
            value = (value << 1) | ((self.data[byte] >> (7 - (self.pos & 7))) & 1)
            self.pos += 1
        return value

    def skip(self, count: int) -> None:
        self.pos += count
        if self.pos > 8 * len(self.data):
            raise Malformed("a header ends early")

    def leading_zeros(self) -> int:
        zeros = 0
        while self.read(1) == 0:
            zeros += 1
            if zeros > 32:
                raise Malformed("an exp-Golomb code of more than 32 bits")
        return zeros

    def ue(self) -> int:
        zeros = self.leading_zeros()
        return (1 << zeros) - 1 + self.read(zeros)


def hevc_sps_size(nal: bytes) -> tuple[int, int] | None:
    """The picture size (pic_width/height_in_luma_samples) an HEVC SPS NAL unit codes, None for another NAL."""
    if len(nal) < 3 or (nal[0] >> 1) & 0x3F != HEVC_SPS:
        return None
    rbsp = nal[2:].replace(b"\x00\x00\x03", b"\x00\x00")  # emulation prevention bytes
    bits = _Bits(rbsp)
    bits.skip(4)  # sps_video_parameter_set_id
    sub_layers = bits.read(3)  # sps_max_sub_layers_minus1
    bits.skip(1 + 96)  # temporal_id_nesting, profile_tier_level's general part (profile, flags, level)
    present = [(bits.read(1), bits.read(1)) for _ in range(sub_layers)]
    if sub_layers:
        bits.skip(2 * (8 - sub_layers))
    for profile, level in present:
        bits.skip(88 * profile + 8 * level)
    bits.ue()  # sps_seq_parameter_set_id
    if bits.ue() == 3:  # chroma_format_idc 4:4:4
        bits.skip(1)
    return bits.ue(), bits.ue()


def _leb128(data: bytes, at: int) -> tuple[int, int]:
    value = 0
    for i in range(8):
        byte = _u(data, at + i, 1)
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            return value, at + i + 1
    raise Malformed("a leb128 of more than 8 bytes")


def av1_sequence_size(payload: bytes) -> tuple[int, int]:
    """max_frame_width/height of an AV1 sequence header OBU's payload (AV1 spec 5.5): the largest frame any
    frame of the sequence may have, so what a decoder sizes its buffers for."""
    bits = _Bits(payload)
    bits.skip(3 + 1)  # seq_profile, still_picture
    if bits.read(1):  # reduced_still_picture_header
        bits.skip(5)
    else:
        decoder_model, buffer_delay_bits = False, 0
        if bits.read(1):  # timing_info_present_flag
            bits.skip(64)
            if bits.read(1):  # equal_picture_interval: num_ticks_per_picture_minus_1, uvlc()
                zeros = bits.leading_zeros()
                bits.skip(zeros if zeros < 32 else 0)
            decoder_model = bool(bits.read(1))
            if decoder_model:
                buffer_delay_bits = bits.read(5) + 1
                bits.skip(32 + 5 + 5)
        initial_delay = bits.read(1)
        for _ in range(bits.read(5) + 1):  # operating points
            bits.skip(12)
            if bits.read(5) > 7:  # seq_level_idx
                bits.skip(1)
            if decoder_model and bits.read(1):
                bits.skip(2 * buffer_delay_bits + 1)
            if initial_delay and bits.read(1):
                bits.skip(4)
    width_bits, height_bits = bits.read(4) + 1, bits.read(4) + 1
    return bits.read(width_bits) + 1, bits.read(height_bits) + 1


def av1_obus_size(data: bytes) -> tuple[int, int] | None:
    """The frame size of the first sequence header among the first OBUs of ``data``, None without one."""
    pos = 0
    for _ in range(MAX_OBUS):
        if pos >= len(data):
            return None
        header = data[pos]
        kind, extension, has_size = (header >> 3) & 0x0F, header & 0x04, header & 0x02
        pos += 2 if extension else 1
        size, pos = _leb128(data, pos) if has_size else (len(data) - pos, pos)
        if kind == AV1_SEQUENCE_HEADER:
            return av1_sequence_size(data[pos:pos + size])
        pos += size
    return None


def _larger(a: tuple[int, int] | None, b: tuple[int, int] | None) -> tuple[int, int] | None:
    if a is None or b is None:
        return a or b
    return a if a[0] * a[1] >= b[0] * b[1] else b


@dataclass
class _Meta:
    data: bytes
    primary: int = 0
    types: dict[int, bytes] = field(default_factory=dict)
    refs: dict[tuple[bytes, int], list[int]] = field(default_factory=dict)  # (type, from) -> to
    properties: list[tuple[bytes, int, int]] = field(default_factory=list)  # ipco, 1-based in ipma
    associations: dict[int, list[int]] = field(default_factory=dict)
    locations: dict[int, tuple[int, list[tuple[int, int]]]] = field(default_factory=dict)  # method, extents
    idat: tuple[int, int] | None = None
    coded: dict[int, tuple[int, int] | None] = field(default_factory=dict)

    def prop(self, item: int, kind: bytes) -> tuple[int, int] | None:
        for index in self.associations.get(item, ()):
            if 0 < index <= len(self.properties) and self.properties[index - 1][0] == kind:
                return self.properties[index - 1][1:]
        return None

    def item_data(self, item: int) -> bytes | None:
        """The item's first ``MAX_ITEM_SCAN_BYTES`` (at file offsets, or inside ``idat``), where its headers are;
        None for another construction method."""
        method, extents = self.locations.get(item, (-1, []))
        if method == 0:
            base, end = 0, len(self.data)
        elif method == 1 and self.idat is not None:
            base, end = self.idat
        else:
            return None
        parts = []
        kept = 0
        for offset, length in extents:
            start = base + offset
            stop = end if length == 0 else start + length
            if start > end or stop > end:
                raise Malformed(f"item {item}'s data lies outside the file")
            parts.append(self.data[start:min(stop, start + MAX_ITEM_SCAN_BYTES - kept)])
            kept += len(parts[-1])
            if kept >= MAX_ITEM_SCAN_BYTES:
                break
        return b"".join(parts)


def _read_meta(data: bytes) -> _Meta:
    top = _children(data, 0, len(data))
    if b"meta" not in top:
        raise Malformed("no meta box")
    start, end = top[b"meta"]
    meta = _Meta(data)
    boxes = _children(data, start + 4, end)  # meta is a FullBox
    if b"pitm" in boxes:
        at = boxes[b"pitm"][0]
        meta.primary = _u(data, at + 4, 2 if data[at] == 0 else 4)
    if b"iinf" in boxes:
        at, box_end = boxes[b"iinf"]
        first = at + (6 if data[at] == 0 else 8)
        for kind, payload, _ in _boxes(data, first, box_end):
            version = _u(data, payload, 1)
            if kind == b"infe" and version >= 2:
                wide = 4 if version >= 3 else 2
                meta.types[_u(data, payload + 4, wide)] = data[payload + 4 + wide + 2:payload + 4 + wide + 6]
    if b"iref" in boxes:
        at, box_end = boxes[b"iref"]
        wide = 2 if data[at] == 0 else 4
        for kind, payload, ref_end in _boxes(data, at + 4, box_end):
            source, count = _u(data, payload, wide), _u(data, payload + wide, 2)
            first = payload + wide + 2
            if first + count * wide > ref_end:
                raise Malformed("an iref entry runs past its box")
            targets = [_u(data, first + i * wide, wide) for i in range(count)]
            meta.refs.setdefault((kind, source), []).extend(targets)
    if b"idat" in boxes:
        meta.idat = boxes[b"idat"]
    if b"iprp" in boxes:
        iprp = _children(data, *boxes[b"iprp"])
        if b"ipco" in iprp:
            meta.properties = list(_boxes(data, *iprp[b"ipco"]))
        for kind, payload, _end in _boxes(data, *boxes[b"iprp"]):
            if kind == b"ipma":
                _read_ipma(data, payload, meta)
    if b"iloc" in boxes:
        _read_iloc(data, boxes[b"iloc"][0], meta)
    if len(meta.types) > MAX_ITEMS:
        raise Malformed(f"more than {MAX_ITEMS} items")
    return meta


def _read_ipma(data: bytes, at: int, meta: _Meta) -> None:
    version, flags = data[at], _u(data, at + 1, 3)
    pos, wide_id, wide_index = at + 8, 2 if version < 1 else 4, bool(flags & 1)
    for _ in range(_u(data, at + 4, 4)):
        item, count = _u(data, pos, wide_id), _u(data, pos + wide_id, 1)
        pos += wide_id + 1
        for _ in range(count):
            value = _u(data, pos, 2 if wide_index else 1)
            pos += 2 if wide_index else 1
            meta.associations.setdefault(item, []).append(value & (0x7FFF if wide_index else 0x7F))


def _read_iloc(data: bytes, at: int, meta: _Meta) -> None:
    version = data[at]
    offset_size, length_size = data[at + 4] >> 4, data[at + 4] & 0x0F
    base_size, index_size = data[at + 5] >> 4, (data[at + 5] & 0x0F) if version in (1, 2) else 0
    wide = 2 if version < 2 else 4
    count, pos = _u(data, at + 6, wide), at + 6 + wide
    for _ in range(count):
        item = _u(data, pos, wide)
        pos += wide
        method = 0
        if version in (1, 2):
            method = _u(data, pos, 2) & 0x0F
            pos += 2
        pos += 2  # data_reference_index
        base = _u(data, pos, base_size)
        pos += base_size
        extents, count_extents = [], _u(data, pos, 2)
        pos += 2
        for _ in range(count_extents):
            pos += index_size
            extents.append((base + _u(data, pos, offset_size), _u(data, pos + offset_size, length_size)))
            pos += offset_size + length_size
        meta.locations[item] = (method, extents)


def _coded_size(meta: _Meta, item: int) -> tuple[int, int] | None:
    """The size an HEVC or AV1 item's coded picture has (its SPS, its sequence header), None for another kind.
    Worked out once per item: a grid may reference one item many times."""
    if item not in meta.coded:
        meta.coded[item] = _read_coded_size(meta, item)
    return meta.coded[item]


def _read_coded_size(meta: _Meta, item: int) -> tuple[int, int] | None:
    kind, found = meta.types.get(item, b""), None
    content = meta.item_data(item)
    if kind == b"av01":
        config = meta.prop(item, b"av1C")
        if config is not None and config[1] - config[0] > 4:
            found = av1_obus_size(meta.data[config[0] + 4:config[1]])
        if content is not None:
            found = _larger(found, av1_obus_size(content))
    elif kind in (b"hvc1", b"hev1"):
        config = meta.prop(item, b"hvcC")
        length_size = 4
        if config is not None:
            found, length_size = _hvcc_sps(meta.data[config[0]:config[1]])
        if content is not None:
            pos = 0
            for _ in range(MAX_NAL_UNITS):
                if pos + length_size > len(content):
                    break
                size = _u(content, pos, length_size)
                found = _larger(found, hevc_sps_size(content[pos + length_size:pos + length_size + size]))
                pos += length_size + size
    return found


def _hvcc_sps(config: bytes) -> tuple[tuple[int, int] | None, int]:
    """The largest SPS size in an hvcC box's parameter set arrays, and its NAL length field's size."""
    if len(config) < 23:
        raise Malformed("an hvcC box of fewer than 23 bytes")
    length_size, found, pos = (config[21] & 3) + 1, None, 23
    for _ in range(config[22]):
        count, pos = _u(config, pos + 1, 2), pos + 3
        for _ in range(count):
            size = _u(config, pos, 2)
            found = _larger(found, hevc_sps_size(config[pos + 2:pos + 2 + size]))
            pos += 2 + size
    return found, length_size


def _derived_output(meta: _Meta, item: int, kind: bytes) -> tuple[int, int] | None:
    """A grid's or an overlay's output size from its item data (ISO/IEC 23008-12 6.6.2.3 and 6.6.2.2)."""
    content = meta.item_data(item)
    if content is None or len(content) < 2:
        return None
    wide = 4 if content[1] & 1 else 2
    at = {b"grid": 4, b"iovl": 2 + 8}.get(kind)  # grid: rows, columns; iovl: a fill colour of 4 x u16
    if at is None:
        return None
    return _u(content, at, wide), _u(content, at + wide, wide)


def padded_pixels(size: tuple[int, int]) -> int:
    """The pixels of ``size`` rounded up to whole ``BLOCK_ALIGN`` blocks."""
    return math.ceil(size[0] / BLOCK_ALIGN) * BLOCK_ALIGN * math.ceil(size[1] / BLOCK_ALIGN) * BLOCK_ALIGN


def _visit(meta: _Meta, item: int, cost: Cost, depth: int, *, primary: bool) -> tuple[int, int]:
    """Add ``item``'s sizes to ``cost`` (its coded pictures too, when it is the primary's); its largest size."""
    if depth > MAX_DEPTH:
        raise Malformed("derived items nested too deep (or a reference loop)")
    kind = meta.types.get(item, b"????")
    name = f"item {item} ({kind.decode('latin-1')})"
    ispe = meta.prop(item, b"ispe")
    largest: tuple[int, int] | None = None
    output: tuple[int, int] | None = None
    label = "grid" if kind == b"grid" else name
    if kind in DERIVED_TYPES:
        output = _derived_output(meta, item, kind)
        if output is not None:
            cost.sizes.append(Size(label, *output))
            largest = output
    if ispe is not None:
        declared = (_u(meta.data, ispe[0] + 4, 4), _u(meta.data, ispe[0] + 8, 4))
        cost.sizes.append(Size(f"{label}'s ispe", *declared))
        largest = _larger(largest, declared)
    if kind in DERIVED_TYPES:
        tiles = [_visit(meta, ref, cost, depth + 1, primary=primary) for ref in meta.refs.get((b"dimg", item), [])]
        if kind == b"grid" and tiles and output is not None:
            tile_w, tile_h = max(w for w, _ in tiles), max(h for _, h in tiles)
            if tile_w and tile_h:
                cover = math.ceil(output[0] / tile_w) * tile_w * math.ceil(output[1] / tile_h) * tile_h
                cost.cover_pixels = max(cost.cover_pixels, cover)
        return largest or (0, 0)
    coded = _coded_size(meta, item)
    signalled = largest
    allowed = padded_pixels(signalled) if signalled is not None else 0
    if coded is not None:
        cost.sizes.append(Size(f"{name}'s coded picture", *coded, allowed=allowed))
        largest = coded if allowed and coded[0] * coded[1] <= allowed else _larger(largest, coded)
    size = largest or (0, 0)
    if primary and depth == 0:
        cost.cover_pixels = max(cost.cover_pixels, allowed)
    if primary:
        cost.coded_pixels += size[0] * size[1]
        cost.coded_count += 1
        if size[0] * size[1] > cost.largest_coded[0] * cost.largest_coded[1]:
            cost.largest_coded = size
    return size


def primary_cost(data: bytes) -> Cost | None:
    """What decoding the primary picture of the HEIF/AVIF in ``data`` costs (its sizes, its planes: alpha and
    the other auxiliary images attached to it are sized on their own), or None where the boxes cannot be
    followed (the decoder then judges the file, under libheif's own limits)."""
    try:
        meta = _read_meta(data)
        if not meta.primary:
            return None
        cost = Cost()
        _visit(meta, meta.primary, cost, 0, primary=True)
        for (kind, source), targets in meta.refs.items():
            if kind == b"auxl" and meta.primary in targets:  # alpha (and depth): decoded with the picture
                aux = Cost()
                _visit(meta, source, aux, 0, primary=False)
                cost.sizes.extend(aux.sizes)
    except (Malformed, IndexError, ValueError):
        return None
    return cost
