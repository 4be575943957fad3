"""INT8: converts with NNCF on real calibration images, records how in the manifest, fails loudly below the floor.

The conversions here quantize the quarter-width seeded generator (``narrow_checkpoint``): the same graph, ops and
ignored scope as the published width, so the search, the gate and the manifest are the same code on the same
graph, at ~1/16 of the arithmetic (NNCF's statistics over 256 px calibration photos: 25 s -> 3 s a setup)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("nncf")

import openvino as ov

from conftest import NARROW_WIDTH
from edge_anime.cli import main
from edge_anime.errors import EXIT_CONFIG
from edge_anime.models import load_model_info
from edge_anime_converters.convert import convert
from edge_anime_converters.generator import seeded_random_generator
from edge_anime_converters.ir import torch_to_float_ov
from edge_anime_converters.quantize import DEFAULT_INT8, INT8_CANDIDATES, Int8Setup, choose_int8, ignored_scope
from edge_anime_converters.samples import synthetic_images

SMALL_SIZES = ((64, 64), (64, 96))
CALIB_COUNT = 8
# Seeded-random weights with 8 calibration photos (at the converter's 256 px) and 64 px validation images are
# harsher than a trained generator with the default 64 photos; the floor here only has to show the figure is
# gated and recorded (the quarter-width generator's first setup holds ~27 dB).
TEST_FLOOR_DB = 25.0


@pytest.fixture(scope="module")
def int8_folder(tmp_path_factory: pytest.TempPathFactory, narrow_checkpoint: Path) -> Path:
    """An fp32 style with an INT8 variant added, as `convert --name toon --precision int8` does for the bundled
    style: same checkpoint, same folder."""
    out = tmp_path_factory.mktemp("m")
    fp32 = convert(narrow_checkpoint, name="narrow", precision="fp32", output_dir=out, verify_limit=2,
                   verify_sizes_hw=SMALL_SIZES, two_pass=False)
    return convert(narrow_checkpoint, name=fp32.name, precision="int8", output_dir=out,
                   calib_count=CALIB_COUNT, verify_limit=2, verify_sizes_hw=SMALL_SIZES, floor_db=TEST_FLOOR_DB)


@pytest.mark.slow
def test_int8_converts_and_manifest_records_the_setup(int8_folder: Path) -> None:
    style = load_model_info(int8_folder)
    assert style.variant_names() == ["fp32", "int8"] and style.precision == "fp32"  # added, default kept
    info = style.with_variant("int8")
    assert info.xml.name == "model_int8.xml" and info.quality_db == info.manifest["quality"]["psnr_db"]["min"]
    assert info.manifest["quality"]["reference"] == "fp32 IR"
    q = info.manifest["quantization"]
    assert info.precision == "int8"
    assert info.quality_db == q["psnr_vs_fp32_db"]["min"]
    assert q["preset"] == DEFAULT_INT8.preset and q["ignore"] == list(DEFAULT_INT8.ignore)
    assert q["calibration_images"] == CALIB_COUNT and q["calibration_source"]
    assert q["psnr_vs_fp32_db"]["min"] > 20 and q["psnr_vs_torch_db"] == info.manifest["verification"]["psnr_db"]
    kept = q["candidates"][-1]  # the first setup that held the floor ends the search
    assert kept["min_db"] == q["psnr_vs_fp32_db"]["min"] >= TEST_FLOOR_DB
    assert info.manifest["verification"]["floor_db"] == TEST_FLOOR_DB
    ops = {op.get_type_name() for op in ov.Core().read_model(info.xml).get_ops()}
    assert "FakeQuantize" in ops  # really quantized, not a float IR with an int8 label


@pytest.mark.slow
def test_int8_below_the_floor_fails_loudly_and_leaves_nothing(tmp_path: Path, narrow_checkpoint: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "models"
    status = main(["convert", str(narrow_checkpoint), "--name", "q", "--precision", "int8", "--output", str(out),
                   "--calib-count", "4", "--verify-count", "1", "--verify-size", "64x64", "--floor-db", "90"])
    err = capsys.readouterr().err
    assert status == EXIT_CONFIG
    assert "verification failed" in err and "below the floor 90.0 dB" in err
    assert os.listdir(out) == []


@pytest.mark.slow
def test_an_int8_ir_made_elsewhere_is_held_to_the_floor_and_recorded_as_qat(
        int8_folder: Path, tmp_path: Path, narrow_checkpoint: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``convert --int8-ir`` (a QAT fine-tune's IR, training/qat_toon.py): the IR of these weights is verified
    like one quantized here and recorded with its digests and ``method: qat``; an INT8 IR of other weights
    fails the floor against this checkpoint's FP32 and nothing is installed. Beside a style of the same weights
    it is variant int8_qat, next to the int8 quantized here."""
    from edge_anime.models import sha256_file

    made = load_model_info(int8_folder).with_variant("int8").xml  # an INT8 IR of these weights, u8 contract
    out = tmp_path / "models"
    args = ["convert", str(narrow_checkpoint), "--name", "q", "--precision", "int8", "--output", str(out),
            "--verify-count", "2", "--verify-size", "64x64", "--verify-size", "64x96",
            "--floor-db", str(TEST_FLOOR_DB), "--int8-ir"]
    assert main([*args, str(made)]) == 0
    info = load_model_info(out / "q")
    q = info.manifest["quantization"]
    assert q["method"] == "qat" and q["xml_sha256"] == sha256_file(made)
    assert q["bin_sha256"] == sha256_file(made.with_suffix(".bin")) and q["psnr_vs_fp32_db"]["min"] >= TEST_FLOOR_DB
    assert sha256_file(info.bin) == sha256_file(made.with_suffix(".bin"))
    assert "taken from" in capsys.readouterr().out

    # into a folder of the same weights it goes beside the int8 quantized here, not in its place
    style = tmp_path / "styles" / int8_folder.name
    shutil.copytree(int8_folder, style)
    assert main(["convert", str(narrow_checkpoint), "--name", style.name, "--precision", "int8",
                 "--output", str(style.parent), *args[8:], str(made)]) == 0
    merged = load_model_info(style)
    assert merged.variant_names() == ["fp32", "int8", "int8_qat"]
    assert merged.with_variant("int8_qat").xml.name == "model_int8_qat.xml"
    assert merged.with_variant("int8").manifest["quantization"]["preset"] == DEFAULT_INT8.preset
    capsys.readouterr()

    other = tmp_path / "other.pt"
    import torch

    torch.save(seeded_random_generator(seed=99, width=NARROW_WIDTH).state_dict(), other)
    status = main([*args[:1], str(other), *args[2:], str(made)])
    err = capsys.readouterr().err
    assert status == EXIT_CONFIG and "below the floor" in err and "qat" in err
    assert sorted(p.name for p in out.iterdir()) == ["q"], "nothing of the failed conversion is left"
    assert main(["convert", str(narrow_checkpoint), "--name", "f", "--precision", "fp16", "--output", str(out),
                 "--int8-ir", str(made)]) == EXIT_CONFIG
    assert "--int8-ir: an INT8 IR is taken for --precision int8 only" in capsys.readouterr().err


@pytest.fixture(scope="module")
def float_model() -> ov.Model:
    """The quarter-width seeded generator traced to OpenVINO once for the tests that read it (quantize and
    ignored_scope clone or only read it): the op names are the published width's, one trace instead of three."""
    return torch_to_float_ov(seeded_random_generator(0, width=NARROW_WIDTH))


def test_ignored_scope_finds_first_and_last_conv_by_graph_order(float_model: ov.Model) -> None:
    model = float_model
    scope = ignored_scope(model, ("first_conv", "last_conv", "depthwise", "norm"))
    assert scope.names[0].startswith("__module.block_a.0.1") and scope.names[1].startswith("__module.out_layer.0")
    assert set(scope.types) == {"GroupConvolution", "GroupNormalization"}
    with pytest.raises(ValueError, match="unknown"):
        ignored_scope(model, ("everything",))


def test_ignored_scope_keeps_one_named_layer_float(float_model: ov.Model) -> None:
    """A layer word ("block_e.1") names that layer's convolutions only, not block_e.10 or block_e.0's."""
    model = float_model
    scope = ignored_scope(model, ("block_e.1", "block_c.1"))
    assert sorted(n.split("/")[0] for n in scope.names) == [
        "__module.block_c.1.layers.0.1", "__module.block_c.1.layers.1.1", "__module.block_c.1.layers.2",
        "__module.block_e.1.1"]
    with pytest.raises(ValueError, match=r"block_e\.1"):
        ignored_scope(model, ("block_f.1",))


def test_setup_label_and_manifest_are_stable() -> None:
    setup = Int8Setup(preset="performance", ignore=("first_conv",), fast_bias_correction=False)
    assert setup.label == "performance ignore=first_conv full-bias-corr"
    assert setup.to_manifest()["ignore"] == ["first_conv"]


@pytest.mark.slow
def test_choose_int8_keeps_the_first_setup_that_holds_the_floor_and_reports_every_try(float_model: ov.Model) -> None:
    model = float_model
    calibration = synthetic_images(size_hw=(64, 64), count=4)
    validation = synthetic_images(size_hw=(64, 64), count=2)
    lenient = choose_int8(model, calibration, validation, floor_db=0.0)
    assert lenient.setup == INT8_CANDIDATES[0] and len(lenient.tried) == 1
    strict = choose_int8(model, calibration, validation, floor_db=99.0)  # nothing holds: all tried, best kept
    assert [t["setup"] for t in strict.tried] == [c.label for c in INT8_CANDIDATES]
    assert round(strict.min_db, 2) == max(t["min_db"] for t in strict.tried) < 99.0
    assert {t["worst_image"] for t in strict.tried} <= {s.name for s in validation}
