"""Converting: every source kind to a verified IR, the manifest contract, floors on real photos, temp-then-rename.

Real torch, real OpenVINO, real ONNX Runtime; verification sizes are small except where the issue's own
sizes (256x256 and 352x480) are the point.
"""
from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from deadlines import scaled
from PIL import Image

torch = pytest.importorskip("torch")

from edge_anime.cli import main  # noqa: E402
from edge_anime.errors import EXIT_CONFIG, ModelError  # noqa: E402
from edge_anime.models import load_model_info, sha256_file  # noqa: E402
from edge_anime_converters.convert import ConversionError, convert  # noqa: E402
from edge_anime_converters.generator import seeded_random_generator  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
SMALL_SIZES = ((64, 64), (64, 96))
CONTRACT_KEYS = {"format", "name", "style", "precision", "upsample_align", "source", "ir", "input", "output",
                 "versions", "verification", "created"}


class NHWCWrapper(torch.nn.Module):
    """How NHWC ONNX exports of AnimeGANv2 look: the permutes live inside the graph."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)


def _export_onnx(module: torch.nn.Module, path: Path, *, nhwc: bool) -> Path:
    shape = (1, 64, 64, 3) if nhwc else (1, 3, 64, 64)
    axes = {1: "h", 2: "w"} if nhwc else {2: "h", 3: "w"}
    torch.onnx.export(NHWCWrapper(module) if nhwc else module, (torch.zeros(shape),), str(path), dynamo=False,
                      input_names=["input"], output_names=["output"], opset_version=17,
                      dynamic_axes={"input": axes, "output": axes})
    return path


def _check_folder(folder: Path, *, precision: str, kind: str) -> dict:
    info = load_model_info(folder)
    manifest = info.manifest
    assert set(manifest) >= CONTRACT_KEYS, CONTRACT_KEYS - set(manifest)
    assert manifest["precision"] == precision and manifest["source"]["kind"] == kind
    assert manifest["input"] == {"name": "image", "layout": "NHWC", "dtype": "u8", "color": "RGB",
                                 "shape": [1, -1, -1, 3], "size_multiple": 4}
    assert manifest["ir"]["bin_sha256"] == sha256_file(info.bin)
    check = manifest["verification"]
    assert check["psnr_db"]["min"] >= check["floor_db"] and len(check["per_image"]) >= 2
    assert (folder / check["side_by_side"]).is_file()
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")], "temp folder left behind"
    return manifest


@pytest.fixture(scope="module")
def default_sizes_ir(tmp_path_factory: pytest.TempPathFactory, seeded_checkpoint: Path) -> Path:
    """A conversion at the default verification sizes (the shared ``random_ir`` verifies at one small size)."""
    return convert(seeded_checkpoint, name="randgen", precision="fp32",
                   output_dir=tmp_path_factory.mktemp("default_sizes"), verify_limit=2,
                   two_pass=False)


@pytest.mark.slow
def test_state_dict_fp32_manifest_is_complete(default_sizes_ir: Path, seeded_checkpoint: Path) -> None:
    manifest = _check_folder(default_sizes_ir, precision="fp32", kind="state_dict")
    assert manifest["source"] == {"file": seeded_checkpoint.name, "sha256": sha256_file(seeded_checkpoint),
                                  "kind": "state_dict", "layout": "NCHW"}
    assert manifest["upsample_align"] is True
    assert manifest["verification"]["sizes"] == [[256, 256], [352, 480]]
    assert manifest["verification"]["floor_db"] == 45.0 and manifest["verification"]["reference"] == "pytorch"
    assert manifest["versions"]["openvino"] and manifest["versions"]["torch"]
    with Image.open(default_sizes_ir / "verify.png") as png:  # input | PyTorch | IR | |diff| x8, widest 480
        assert png.size[0] == 4 * 480 and png.size[1] >= 2 * 256


@pytest.mark.slow
def test_torchscript_converts_and_verifies(tmp_path: Path) -> None:
    scripted = torch.jit.trace(seeded_random_generator(7), torch.zeros(1, 3, 64, 64))
    path = tmp_path / "animeganv2_jit.pt"
    scripted.save(str(path))
    folder = convert(path, name="jit", precision="fp32", output_dir=tmp_path / "models", verify_limit=2,
                     verify_sizes_hw=SMALL_SIZES)
    manifest = _check_folder(folder, precision="fp32", kind="torchscript")
    assert manifest["upsample_align"] is None  # baked into the traced graph


@pytest.mark.slow
@pytest.mark.parametrize("nhwc", [False, True], ids=["nchw", "nhwc"])
def test_onnx_converts_and_verifies(tmp_path: Path, nhwc: bool) -> None:
    path = _export_onnx(seeded_random_generator(8, upsample_align=False), tmp_path / "gen.onnx", nhwc=nhwc)
    folder = convert(path, name="onnx", precision="fp32", output_dir=tmp_path / "models", verify_limit=2,
                     verify_sizes_hw=SMALL_SIZES)
    manifest = _check_folder(folder, precision="fp32", kind="onnx")
    assert manifest["source"]["layout"] == ("NHWC" if nhwc else "NCHW")
    assert manifest["verification"]["reference"] == "onnxruntime"


@pytest.mark.slow
def test_paprika_defaults_to_align_false_and_it_is_recorded(tmp_path: Path, seeded_checkpoint: Path) -> None:
    """(The --upsample-align override is covered in test_sources; one conversion is enough here.)"""
    paprika = convert(seeded_checkpoint, name="paprika", precision="fp32", output_dir=tmp_path / "models",
                      verify_limit=1, verify_sizes_hw=SMALL_SIZES[:1], two_pass=False)
    assert load_model_info(paprika).manifest["upsample_align"] is False


@pytest.mark.slow
@pytest.mark.parametrize("precision,floor", [("fp32", 45.0), ("fp16", 40.0)])
def test_floors_hold_on_real_photos_at_issue_sizes(tmp_path: Path, seeded_checkpoint: Path, shared_photos: Path,
                                                    precision: str, floor: float) -> None:
    # One photo at each issue size: the full-width torch reference at 352x480 is most of this test (~4 s on one
    # thread of a quiet core, 11 s at a load of 5); a precision's error is systematic, not one photo's.
    folder = convert(seeded_checkpoint, name=f"photos_{precision}", precision=precision,
                     output_dir=tmp_path / "models", verify_dir=shared_photos, verify_limit=1,
                     two_pass=False)
    check = load_model_info(folder).manifest["verification"]
    assert check["floor_db"] == floor and check["psnr_db"]["min"] >= floor
    assert {tuple(r["size"]) for r in check["per_image"]} == {(256, 256), (352, 480)}
    assert check["image_source"] == f"photos:{shared_photos}"


def _copy_folder(src: Path, dst: Path) -> Path:
    dst.mkdir(parents=True)
    for item in src.iterdir():
        (dst / item.name).write_bytes(item.read_bytes())
    return dst


@pytest.mark.slow
def test_failed_verification_keeps_the_older_model_and_leaves_no_temp(tmp_path: Path, seeded_checkpoint: Path,
                                                                      random_ir: Path) -> None:
    out = tmp_path / "models"
    good = _copy_folder(random_ir, out / "keep")
    before = sha256_file(good / "model.bin")
    with pytest.raises(ConversionError, match="below the floor 99.0 dB"):
        convert(seeded_checkpoint, name="keep", precision="fp16", output_dir=out, verify_limit=1,
                verify_sizes_hw=SMALL_SIZES[:1], floor_db=99.0)
    assert sha256_file(good / "model.bin") == before and load_model_info(good).precision == "fp32"
    assert sorted(os.listdir(out)) == ["keep"]


def test_tampered_bin_is_refused(tmp_path: Path, random_ir: Path) -> None:
    copy = _copy_folder(random_ir, tmp_path / "copy")
    data = bytearray((copy / "model.bin").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (copy / "model.bin").write_bytes(bytes(data))
    with pytest.raises(ModelError, match="does not match the manifest"):
        load_model_info(copy)


def test_an_edited_graph_is_refused_and_a_broken_one_fails_config_check(
        tmp_path: Path, random_ir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The graph is pinned like the weights: a Clamp edited to max 0 would serve black pictures. And an XML
    that matches its digest but that OpenVINO cannot read fails ``config check``, not only ``run``."""
    copy = _copy_folder(random_ir, tmp_path / "copy")
    xml = (copy / "model.xml").read_text(encoding="utf-8")
    assert 'min="0" max="255"' in xml  # the output Clamp
    (copy / "model.xml").write_text(xml.replace('min="0" max="255"', 'min="0" max="0"', 1), encoding="utf-8")
    with pytest.raises(ModelError, match=r"model.xml: sha256 .* does not match the manifest"):
        load_model_info(copy)
    (copy / "model.xml").write_text(xml[: len(xml) // 2], encoding="utf-8")  # truncated...
    manifest = yaml.safe_load((copy / "manifest.yaml").read_text(encoding="utf-8"))
    manifest["ir"]["xml_sha256"] = sha256_file(copy / "model.xml")  # ...and the manifest made to agree
    (copy / "manifest.yaml").write_text(yaml.safe_dump(manifest), encoding="utf-8")
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"model": {"path": str(copy)}, "watch": {"root": str(tmp_path / "w")},
                                      "device": {"cache_dir": None}}), encoding="utf-8")
    assert main(["config", "check", str(config)]) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert f"{copy / 'model.xml'}: OpenVINO cannot read this IR" in err and err.count("\n") == 1


def test_a_manifest_without_the_graph_digest_is_refused(tmp_path: Path, random_ir: Path) -> None:
    copy = _copy_folder(random_ir, tmp_path / "copy")
    manifest = yaml.safe_load((copy / "manifest.yaml").read_text(encoding="utf-8"))
    del manifest["ir"]["xml_sha256"]
    (copy / "manifest.yaml").write_text(yaml.safe_dump(manifest), encoding="utf-8")
    with pytest.raises(ModelError, match="'ir' has no xml_sha256"):
        load_model_info(copy)


@pytest.mark.slow
def test_cli_convert_and_list_in_subprocesses(tmp_path: Path, seeded_checkpoint: Path) -> None:
    """The real entry point; then ``models list`` in a process that must never load torch or NNCF."""
    out = tmp_path / "models"
    done = subprocess.run(
        [sys.executable, "-m", "edge_anime", "convert", str(seeded_checkpoint), "--name", "cli", "--precision",
         "fp16", "--output", str(out), "--verify-count", "1", "--verify-size", "64x64", "--two-pass", "false"],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=scaled(300))
    assert done.returncode == 0, done.stderr
    assert "PSNR vs pytorch min" in done.stdout
    # progress: one line per step on stderr, each with the seconds since the start, in order (issue 29)
    steps = re.findall(r"^edge-anime convert: \[ *(\d+\.\d) s\] (.+)$", done.stderr, flags=re.MULTILINE)
    texts = [text for _, text in steps]
    assert texts[0].startswith("loading ") and texts[-1].startswith("writing "), texts
    assert any(t.startswith("verifying the fp16 IR vs pytorch: image 1/1 (synthetic_0, 64x64)") for t in texts)
    seconds = [float(value) for value, _ in steps]
    assert seconds == sorted(seconds)
    assert "PSNR vs pytorch" not in done.stderr.replace("vs pytorch: image", "")  # results stay on stdout
    probe = (
        "import sys\n"
        "from edge_anime.cli import main\n"
        f"status = main(['models', 'list', '--dir', {str(out)!r}])\n"
        "heavy = sorted(m for m in ('torch', 'nncf', 'onnx') if m in sys.modules)\n"
        "print('HEAVY', heavy)\n"
        "sys.exit(status)\n"
    )
    listed = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO_ROOT,
                            timeout=scaled(120))
    assert listed.returncode == 0, listed.stderr
    assert "HEAVY []" in listed.stdout
    line = next(ln for ln in listed.stdout.splitlines() if ln.startswith("cli "))
    assert "fp16" in line and "MB" in line and "dB min vs pytorch" in line


def test_progress_lines_carry_the_injected_clock() -> None:
    from edge_anime_converters.progress import Progress

    ticks = iter([10.0, 10.0, 12.25])
    stream = io.StringIO()
    progress = Progress(stream, clock=lambda: next(ticks))
    progress.step("loading x")
    progress.step("tracing")
    assert stream.getvalue() == "edge-anime convert: [   0.0 s] loading x\nedge-anime convert: [   2.2 s] tracing\n"


def test_pass1_statistics_error_is_measured_in_the_units_a_groupnorm_applies() -> None:
    """A mean near 0 moved by a hair is no error (it read as 6.9 % over |mean|, and failed every fp16 pair of
    the seeded checkpoint); the same move of the mean on a tiny variance, or a variance off by 5 %, is."""
    import numpy as np

    from edge_anime_converters.two_pass_ir import STATS_REL_TOLERANCE, stats_error

    true = np.array([[[-0.00019, 0.04], [0.5, 2.0]]], np.float32)
    hair = true.copy()
    hair[0, 0, 0] = -0.00027
    assert stats_error(hair, true) < STATS_REL_TOLERANCE["fp16"] / 10
    narrow, narrow_hair = true.copy(), hair.copy()
    narrow[0, 0, 1] = narrow_hair[0, 0, 1] = 1e-6  # the same move of the mean, 0.024 of this std
    assert stats_error(narrow_hair, narrow) > STATS_REL_TOLERANCE["fp16"]
    wide = true.copy()
    wide[0, 1, 1] = 2.1
    assert stats_error(wide, true) == pytest.approx(0.05, rel=1e-3)


def test_manifest_yaml_is_plain_data(random_ir: Path) -> None:
    """The runtime reads it with yaml.safe_load: no Python tags, no infinities."""
    text = (random_ir / "manifest.yaml").read_text()
    assert "!!python" not in text and ".inf" not in text
    assert yaml.safe_load(text)["name"] == "randgen"
