"""The converter side of tiled full resolution: the pass-1 / pass-2 IR pair (issue #17)."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from edge_anime.errors import ModelError
from edge_anime.models import TILING_ROLES, load_model_info


def test_split_generator_matches_the_plain_one_and_keeps_the_checkpoint_format(seeded_checkpoint: Path) -> None:
    """Surgery happens on a copy after the strict load: the source module and its keys are untouched, pass 2
    fed pass 1's statistics (and the whole picture as its origin) is the plain generator, at both upsampling
    conventions."""
    torch = pytest.importorskip("torch")
    from edge_anime_converters.generator import Generator
    from edge_anime_converters.sources import generator_from_state_dict
    from edge_anime_converters.two_pass import StatsIn, StatsOut, count_norms

    state = torch.load(seeded_checkpoint, weights_only=True)
    for align in (True, False):
        plain = generator_from_state_dict(state, path=seeded_checkpoint, upsample_align=align)
        keys = list(plain.state_dict())
        first, second = StatsOut(plain), StatsIn(plain)
        assert list(plain.state_dict()) == keys == list(Generator().state_dict())
        x = torch.rand(1, 3, 72, 104) * 2 - 1
        with torch.no_grad():
            reference = plain(x)
            image, stats = first(x)
            again = second(x, stats, torch.tensor([[72.0, 104.0, 0.0, 0.0]]))
        assert stats.shape == (1, count_norms(plain), 2) and bool((stats[..., 1] > 0).all())
        assert float((image - reference).abs().max()) < 1e-4
        assert float((again - reference).abs().max()) < 1e-4


def test_pair_is_built_verified_and_listed_apart_from_the_variants(two_pass_ir: Path) -> None:
    manifest = yaml.safe_load((two_pass_ir / "manifest.yaml").read_text(encoding="utf-8"))
    entries = {name: e for name, e in manifest["variants"].items() if e.get("role")}
    assert sorted(e["role"] for e in entries.values()) == sorted(TILING_ROLES)
    for entry in entries.values():
        check = entry["verification"]
        assert check["psnr_db"]["min"] >= 45.0 == check["floor_db"]
        tiling = entry["tiling"]
        assert 0 < tiling["margin_px"] <= tiling["reach_px"] and tiling["margin_px"] % 8 == tiling["reach_px"] % 8 == 0
        assert "quality" not in entry  # never auto-chosen as a plain variant, by old readers either
    assert {e["ir"]["bin"] for e in entries.values()} == {manifest["ir"]["bin"]}, "the plain IR's weights"
    style = load_model_info(two_pass_ir)
    assert style.variant_names() == ["fp32"]
    pair = style.tiling_pair()
    assert pair is not None
    assert [p.manifest["role"] for p in pair] == list(TILING_ROLES)
    assert pair[0].bin == pair[1].bin == style.bin


def test_the_pair_appends_only_a_few_constants_and_the_plain_ir_is_unchanged(two_pass_ir: Path,
                                                                              narrow_checkpoint: Path,
                                                                              tmp_path: Path) -> None:
    """Same checkpoint converted with and without the pair: the plain graph is byte-identical, its weights are
    a prefix of the shared .bin (no offset moved, so its verification holds), and the pair added a few KB."""
    from edge_anime_converters.convert import convert

    plain = convert(narrow_checkpoint, name="plain", precision="fp32", output_dir=tmp_path, verify_limit=1,
                    verify_sizes_hw=((64, 96),), two_pass=False)  # two_pass_ir's checkpoint, without the pair
    with_pair, without = load_model_info(two_pass_ir), load_model_info(plain)  # both hash-checked
    assert _graph(with_pair.xml) == _graph(without.xml)
    shared, plain = with_pair.bin.read_bytes(), without.bin.read_bytes()
    assert shared[:len(plain)] == plain
    assert 0 < len(shared) - len(plain) < 64 * 1024


def _graph(xml: Path) -> bytes:
    """The IR's text without node names (OpenVINO numbers them per process)."""
    return re.sub(rb' name="[^"]*"', b"", xml.read_bytes())


def test_a_float_variant_with_its_pair_points_the_pair_at_its_own_bin(two_pass_ir: Path, narrow_checkpoint: Path,
                                                                        tmp_path: Path) -> None:
    """fp16 added to the fp32 style: its bin is renamed to model_fp16.bin, and its pair follows it."""
    from edge_anime_converters.convert import convert

    shutil.copytree(two_pass_ir, tmp_path / two_pass_ir.name)
    style = load_model_info(convert(narrow_checkpoint, name=two_pass_ir.name, precision="fp16",
                                    output_dir=tmp_path, verify_limit=1, verify_sizes_hw=((64, 64),)))
    assert style.variant_names() == ["fp32", "fp16"]
    fp16 = style.with_variant("fp16")
    pair = fp16.tiling_pair()
    assert pair is not None and pair[0].bin == pair[1].bin == fp16.bin == style.directory / "model_fp16.bin"
    assert style.tiling_pair() is not None and style.tiling_pair()[0].bin == style.bin  # type: ignore[index]
    assert sorted(p.name for p in style.directory.glob("*.bin")) == ["model.bin", "model_fp16.bin"]


def test_pair_ir_io_names_and_shapes(two_pass_ir: Path) -> None:
    import openvino as ov

    pair = load_model_info(two_pass_ir).tiling_pair()
    assert pair is not None
    core = ov.Core()
    first, second = (core.read_model(p.xml, p.bin) for p in pair)
    assert [o.get_any_name() for o in first.outputs] == ["stylized", "gn_stats"]
    assert [i.get_any_name() for i in second.inputs] == ["image", "gn_stats", "tile_origin"]
    assert second.input(1).get_partial_shape() == first.output(1).get_partial_shape()


def test_a_tampered_pair_is_refused_when_chosen(two_pass_ir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(two_pass_ir, copy)
    style = load_model_info(copy)
    pair = style.tiling_pair(verify=False)
    assert pair is not None
    with open(pair[1].xml, "ab") as fh:
        fh.write(b"<!-- edited -->")
    with pytest.raises(ModelError, match="sha256"):
        style.tiling_pair()


def test_an_unknown_role_is_a_manifest_error(two_pass_ir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(two_pass_ir, copy)
    manifest = yaml.safe_load((copy / "manifest.yaml").read_text(encoding="utf-8"))
    name = next(n for n, e in manifest["variants"].items() if e.get("role"))
    manifest["variants"][name]["role"] = "stats"
    (copy / "manifest.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False), encoding="utf-8")
    with pytest.raises(ModelError, match=rf"variants\.{name}\.role"):
        load_model_info(copy)


def test_adding_a_variant_keeps_the_pair(two_pass_ir: Path, narrow_checkpoint: Path, tmp_path: Path) -> None:
    from edge_anime_converters.convert import convert

    shutil.copytree(two_pass_ir, tmp_path / two_pass_ir.name)
    style = convert(narrow_checkpoint, name=two_pass_ir.name, precision="fp16", output_dir=tmp_path,
                    verify_limit=1, verify_sizes_hw=((64, 64),), two_pass=False)
    info = load_model_info(style)
    assert info.variant_names() == ["fp32", "fp16"]
    assert info.tiling_pair() is not None  # hash-checked: the files came along


def test_margin_is_the_receptive_field(seeded_checkpoint: Path) -> None:
    """The recorded margin covers the reach measured here on pass 2 (fixed statistics: purely local)."""
    torch = pytest.importorskip("torch")
    from edge_anime_converters.sources import generator_from_state_dict
    from edge_anime_converters.two_pass import count_norms
    from edge_anime_converters.two_pass_ir import MARGIN_ROUND_PX, measure_margin

    plain = generator_from_state_dict(torch.load(seeded_checkpoint, weights_only=True), path=seeded_checkpoint,
                                      upsample_align=True)
    margin = measure_margin(plain, count_norms(plain))
    # Three 7x7 / 3x3 stages at full size, two at 1/2, nine 3x3 at 1/4: tens of pixels, not hundreds.
    assert 24 <= margin <= 96 and margin % MARGIN_ROUND_PX == 0
    assert np.isfinite(margin)


@pytest.mark.slow
def test_the_blend_margin_is_where_a_tiles_border_stops_mattering(seeded_checkpoint: Path) -> None:
    """Past the blend margin a reflected tile border moves no output pixel by the tolerance, on a picture of
    another size than the converter measured on; inside it the border does move pixels."""
    torch = pytest.importorskip("torch")
    from edge_anime_converters.samples import synthetic_images, to_nchw_float
    from edge_anime_converters.sources import generator_from_state_dict
    from edge_anime_converters.two_pass import StatsIn, count_norms, torch_stats
    from edge_anime_converters.two_pass_ir import BLEND_TOLERANCE_LEVELS, measure_blend_margin, measure_margin

    plain = generator_from_state_dict(torch.load(seeded_checkpoint, weights_only=True), path=seeded_checkpoint,
                                      upsample_align=True)
    reach = measure_margin(plain, count_norms(plain))
    image = synthetic_images(size_hw=(96, 2 * reach + 64))[1].rgb
    margin = measure_blend_margin(plain, [image], reach=reach)
    assert 0 < margin <= reach and margin % 8 == 0
    cut = image.shape[1] // 2
    tile = np.pad(image[:, :cut], ((0, 0), (0, image.shape[1] - cut), (0, 0)), mode="reflect")
    stats = torch.from_numpy(torch_stats(plain, to_nchw_float(image)))
    origin = torch.tensor([[float(image.shape[0]), float(image.shape[1]), 0.0, 0.0]])
    with torch.no_grad():
        net = StatsIn(plain)
        whole, tiled = (net(torch.from_numpy(to_nchw_float(x)), stats, origin).numpy() for x in (image, tile))
    levels = np.abs(whole - tiled)[0].max(axis=(0, 1)) * 127.5  # per column
    assert float(levels[:cut - margin].max()) < BLEND_TOLERANCE_LEVELS
    assert float(levels[cut - margin - 8:cut].max()) > BLEND_TOLERANCE_LEVELS / 4, "something moves near the border"
