"""Variants of a style (issue 14): the converter adds an IR of the same weights to an existing style folder,
the manifest reader sees every IR with its quality figure, and the runtime picks one: pinned, or measured once
per box and read back from a small JSON beside the model cache.

Real conversions (the session's seeded-random checkpoint, fp32 style + an fp16 variant added by ``convert``),
the real OpenVINO runtime, tiny sizes and short timings: what the timing measures is not asserted, only what
it decides from and what it keeps.
"""
from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from deadlines import scaled

from edge_anime.config import load_config
from edge_anime.errors import EXIT_CONFIG, ConfigError
from edge_anime.models import load_model_info, resolve_model
from edge_anime.runtime.choice import DECISION_PREFIX, choose, open_engine

PROBE_S = 0.2  # seconds per candidate: enough to rank nothing, enough to exercise every step
CLI_TIMEOUT_S = scaled(300)


@pytest.fixture(scope="module")
def two_variants(tmp_path_factory: pytest.TempPathFactory, random_ir: Path, seeded_checkpoint: Path) -> Path:
    """The session's fp32 style with an fp16 variant added by converting the same checkpoint into it."""
    from edge_anime_converters.convert import convert

    out = tmp_path_factory.mktemp("styles")
    shutil.copytree(random_ir, out / random_ir.name)
    return convert(seeded_checkpoint, name=random_ir.name, precision="fp16", output_dir=out,
                   verify_limit=2, verify_sizes_hw=((64, 96),), two_pass=False)


def _style_copy(two_variants: Path, tmp_path: Path) -> Path:
    target = tmp_path / "models" / two_variants.name
    shutil.copytree(two_variants, target)
    return target


def _config(write_config: Callable[..., Path], style: Path, own_cache: Path | None = None, **model: str) -> Path:
    """A config on ``style``; ``own_cache``: a model cache of the test's own, for the tests of the decision
    kept there. A decision is keyed by the style's digests, which every copy of it shares, so in the session's
    cache one test's decision would answer for the next test's first measurement."""
    device: dict[str, object] = {"performance_hint": "LATENCY"}
    if own_cache is not None:
        device["cache_dir"] = str(own_cache)
    return write_config({"model": {"path": str(style), **model}, "image": {"max_side": 64}, "device": device})


def _decisions(config_path: Path) -> list[Path]:
    cache = load_config(config_path).device.cache_dir
    assert cache is not None
    return sorted(cache.glob(f"{DECISION_PREFIX}*.json"))


@pytest.mark.slow
def test_convert_adds_a_variant_to_a_style_of_the_same_weights(two_variants: Path) -> None:
    manifest = yaml.safe_load((two_variants / "manifest.yaml").read_text(encoding="utf-8"))
    assert manifest["precision"] == "fp32" and manifest["ir"]["xml"] == "model.xml"  # the default is kept
    entry = manifest["variants"]["fp16"]
    assert entry["ir"]["xml"] == "model_fp16.xml" and entry["ir"]["bin"] == "model_fp16.bin"
    assert entry["quality"]["reference"] == "pytorch fp32" and entry["quality"]["psnr_db"]["min"] > 40
    assert not list(two_variants.parent.glob(".*"))  # no temp folders left beside it
    style = load_model_info(two_variants)
    assert style.variant_names() == ["fp32", "fp16"]
    fp16 = style.with_variant("fp16")
    assert fp16.xml.name == "model_fp16.xml" and fp16.precision == "fp16" and fp16.name == style.name
    assert fp16.quality_db == entry["quality"]["psnr_db"]["min"]
    assert fp16.manifest["verification"]["side_by_side"] == "verify_fp16.png"


@pytest.mark.slow
def test_a_variants_xml_as_model_path_pins_it(two_variants: Path) -> None:
    assert resolve_model(two_variants / "model_fp16.xml", search_dirs=[]).variant_name == "fp16"
    assert resolve_model(two_variants / "model.xml", search_dirs=[]).variant_name == "fp32"


def test_a_single_ir_manifest_reads_as_one_variant_with_its_figure(random_ir: Path) -> None:
    manifest = yaml.safe_load((random_ir / "manifest.yaml").read_text(encoding="utf-8"))
    del manifest["quality"]  # as written before variants existed: the figure comes from verification
    style = load_model_info(random_ir)
    legacy = style.variants()
    assert [(v.name, v.default) for v in legacy] == [("fp32", True)]
    assert legacy[0].quality_db == manifest["verification"]["psnr_db"]["min"]


@pytest.mark.slow
def test_a_tampered_variant_is_refused_when_chosen(two_variants: Path, tmp_path: Path) -> None:
    from edge_anime.errors import ModelError

    style = _style_copy(two_variants, tmp_path)
    with open(style / "model_fp16.bin", "r+b") as fh:
        fh.seek(100)
        fh.write(b"\x00\x01\x02\x03")
    info = load_model_info(style)  # the default is intact: the style still loads
    with pytest.raises(ModelError, match="model_fp16.bin: sha256"):
        info.with_variant("fp16")


def test_a_pinned_variant_the_style_lacks_is_a_config_error_listing_what_exists(
        random_ir: Path, write_config: Callable[..., Path]) -> None:
    config = load_config(_config(write_config, random_ir, variant="int8"))
    with pytest.raises(ConfigError, match=r"model\.variant: 'int8' is not a variant of style randgen .*fp32, or auto"):
        open_engine(config)
    proc = subprocess.run([sys.executable, "-m", "edge_anime", "config", "check",
                           str(_config(write_config, random_ir, variant="int8"))],
                          capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
    assert proc.returncode == EXIT_CONFIG and "model.variant: 'int8'" in proc.stderr


def test_a_variant_name_that_is_no_name_is_refused_by_the_config(write_config: Callable[..., Path]) -> None:
    with pytest.raises(ConfigError, match=r"model\.variant.*expected \"auto\" or a variant name"):
        load_config(write_config({"model": {"variant": "../int8"}}))
    with pytest.raises(ConfigError, match=r"http\.live\.variant.*expected \"auto\" or a variant name"):
        load_config(write_config({"http": {"live": {"variant": "student int8"}}}))


@pytest.mark.slow
def test_auto_measures_once_then_reads_the_cached_decision(two_variants: Path, tmp_path: Path,
                                                           write_config: Callable[..., Path]) -> None:
    path = _config(write_config, _style_copy(two_variants, tmp_path), tmp_path / "ovcache")
    config = load_config(path)
    style = resolve_model(config.model.path, search_dirs=[])
    first = choose(config, style, seconds=PROBE_S)
    rows = {(f["variant"], f["precision"]): f for f in first.figures}
    # Both IRs at f32 on every CPU; bf16/f16 beside them where the CPU computes them natively (an AMX Xeon
    # chose fp32 at bf16 here), each judged by the same floor: the choice is the fastest eligible row.
    assert set(rows) >= {("fp32", "f32"), ("fp16", "f32")}
    assert all(f["images_per_s"] > 0 for f in rows.values())
    assert rows[("fp32", "f32")]["eligible"] and rows[("fp16", "f32")]["eligible"]
    top = max(f["images_per_s"] for f in rows.values() if f["eligible"])
    close = [f for f in rows.values() if f["eligible"] and f["images_per_s"] >= 0.95 * top]  # within TIE_SHARE
    chosen = rows[(first.variant, first.precision)]
    assert first.how == "measured" and chosen in close  # the fastest, or a near-tie with a better picture
    assert chosen["quality_db"] == max(f["quality_db"] for f in close)
    [saved] = _decisions(path)
    data = json.loads(saved.read_text(encoding="utf-8"))
    assert data["key"]["shape"] == [64, 48] and data["key"]["openvino"] and data["key"]["cpu_flags_sha256"]
    assert data["choice"]["variant"] == first.variant
    again = choose(config, style, seconds=PROBE_S)
    assert again.how == "cached" and (again.variant, again.precision) == (first.variant, first.precision)
    summary = again.summary()
    assert "pin with model.variant: " in summary and f"device.inference_precision: {first.precision}" in summary
    bigger = config.model_copy(update={"image": config.image.model_copy(update={"max_side": 96})})
    assert choose(bigger, style, seconds=PROBE_S).how == "measured"  # another shape, another decision
    assert len(_decisions(path)) == 2


@pytest.mark.slow
def test_a_damaged_decision_is_ignored_and_measured_again(two_variants: Path, tmp_path: Path,
                                                          write_config: Callable[..., Path],
                                                          caplog: pytest.LogCaptureFixture) -> None:
    path = _config(write_config, _style_copy(two_variants, tmp_path), tmp_path / "ovcache")
    config = load_config(path)
    style = resolve_model(config.model.path, search_dirs=[])
    choose(config, style, seconds=PROBE_S)
    [saved] = _decisions(path)
    saved.write_text('{"format": 1, "key": ', encoding="utf-8")  # a torn write from some other tool
    with caplog.at_level(logging.WARNING, logger="edge_anime.runtime.choice"):
        redone = choose(config, style, seconds=PROBE_S)
    assert redone.how == "measured" and "is damaged" in caplog.text
    assert json.loads(saved.read_text(encoding="utf-8"))["choice"]["variant"] == redone.variant
    assert not [p for p in saved.parent.iterdir() if p.name.startswith(".edge-anime-tmp")]


@pytest.mark.slow
def test_a_variant_without_a_quality_figure_is_never_auto_chosen(two_variants: Path, tmp_path: Path,
                                                                 write_config: Callable[..., Path],
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    style_dir = _style_copy(two_variants, tmp_path)
    manifest = yaml.safe_load((style_dir / "manifest.yaml").read_text(encoding="utf-8"))
    entry = manifest["variants"]["fp16"]
    del entry["quality"]
    entry["verification"]["reference"] = "unknown"  # nothing left to read a figure vs FP32 from
    (style_dir / "manifest.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False), encoding="utf-8")
    config = load_config(_config(write_config, style_dir, tmp_path / "ovcache"))
    style = resolve_model(config.model.path, search_dirs=[])
    with caplog.at_level(logging.WARNING, logger="edge_anime.runtime.choice"):
        chosen = choose(config, style, seconds=PROBE_S)
        choose(config.model_copy(update={"image": config.image.model_copy(update={"max_side": 96})}), style,
               seconds=PROBE_S)
    assert chosen.variant == "fp32"
    fp16 = [f for f in chosen.figures if f["variant"] == "fp16"]
    assert fp16 and not any(f["eligible"] for f in fp16) and "no quality figure" in fp16[0]["reason"]
    assert caplog.text.count("variant fp16 is never auto-chosen") == 1
    pinned = load_config(_config(write_config, style_dir, tmp_path / "ovcache", variant="fp16"))
    assert open_engine(pinned)[0].variant_name == "fp16"  # pinned, it still runs


@pytest.mark.slow
def test_explicit_settings_win_and_are_not_measured(two_variants: Path, tmp_path: Path,
                                                    write_config: Callable[..., Path]) -> None:
    path = write_config({"model": {"path": str(_style_copy(two_variants, tmp_path)), "variant": "fp16"},
                         "device": {"inference_precision": "f32", "cache_dir": str(tmp_path / "ovcache")},
                         "image": {"max_side": 64}})  # its own cache: no decision of another test in it
    model, engine = open_engine(load_config(path))
    assert model.variant_name == "fp16" and model.xml.name == "model_fp16.xml"
    assert engine.choice is not None and engine.choice["how"] == "pinned"
    assert engine.describe()["variant"] == "fp16" and engine.effective["INFERENCE_PRECISION_HINT"] == "f32"
    assert _decisions(path) == []


@pytest.mark.slow
def test_other_weights_under_the_same_name_replace_the_style(two_variants: Path, tmp_path: Path,
                                                             seeded_checkpoint: Path) -> None:
    """Variants are IRs of one checkpoint: converting another one under the name starts the style afresh."""
    from edge_anime_converters.convert import convert

    style = _style_copy(two_variants, tmp_path)
    manifest = yaml.safe_load((style / "manifest.yaml").read_text(encoding="utf-8"))
    manifest["source"]["sha256"] = "0" * 64  # as if converted from other weights
    (style / "manifest.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False), encoding="utf-8")
    convert(seeded_checkpoint, name=style.name, precision="fp16", output_dir=style.parent,
            verify_limit=1, verify_sizes_hw=((64, 64),), two_pass=False)
    fresh = load_model_info(style)
    assert fresh.variant_names() == ["fp16"] and not (style / "model_fp16.xml").exists()


@pytest.mark.slow
def test_config_show_and_models_list_say_what_runs(two_variants: Path, tmp_path: Path,
                                                   write_config: Callable[..., Path]) -> None:
    style = _style_copy(two_variants, tmp_path)
    path = _config(write_config, style, tmp_path / "ovcache")
    show = subprocess.run([sys.executable, "-m", "edge_anime", "config", "show", str(path)],
                          capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
    assert show.returncode == 0, show.stderr
    assert "# variant: not measured on this box yet" in show.stdout and "fp16@f32" in show.stdout
    choose(load_config(path), resolve_model(style, search_dirs=[]), seconds=PROBE_S)
    show = subprocess.run([sys.executable, "-m", "edge_anime", "config", "show", str(path)],
                          capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
    assert "cached at 64x48: images/s fp32@f32" in show.stdout and "pin with model.variant: " in show.stdout
    listed = subprocess.run([sys.executable, "-m", "edge_anime", "models", "list", "--dir", str(style.parent)],
                            capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
    rows = [line.split() for line in listed.stdout.splitlines()]
    assert rows[1][:3] == ["randgen", "fp32", "*"] and rows[2][0] == "fp16"


def test_the_timing_shape_is_the_configured_size_padded_to_the_multiple(write_config: Callable[..., Path]) -> None:
    from edge_anime.runtime.choice import timing_shape

    image = load_config(write_config({"image": {"max_side": 512}})).image
    assert timing_shape(image, multiple=4) == (384, 512)  # a 4:3 landscape photo at max_side
    fixed = image.model_copy(update={"resize": "fixed", "fixed": (500, 300)})
    assert timing_shape(fixed, multiple=4) == (304, 504)  # padded up to image.multiple 8: the shape that runs
    square = image.model_copy(update={"resize": "center_square", "center_square": 256})
    assert timing_shape(square, multiple=4) == (256, 256)


def test_a_precisions_loss_counts_against_the_floor() -> None:
    from edge_anime.runtime.choice import combined_db

    assert combined_db(40.0) == pytest.approx(40.0)
    assert combined_db(35.0, 46.0) == pytest.approx(34.67, abs=0.01)  # INT8 at the floor, then bf16: under it
    assert combined_db(75.8, 46.0) == pytest.approx(46.0, abs=0.01)


def test_the_timing_shape_is_what_the_memory_budget_lets_a_camera_photo_run_at(
        write_config: Callable[..., Path]) -> None:
    """At max_side 2048 the default 1024 MB budget shrinks a 12 MP photo to ~0.9 MP: timing 2048x1536 measured a
    shape no photo runs at, for minutes and 6 GB (issue 30)."""
    from edge_anime.imaging.geometry import padded_inference_mb
    from edge_anime.runtime.choice import timing_shape

    image = load_config(write_config({"image": {"max_side": 2048}})).image
    height, width = timing_shape(image, multiple=4)
    assert width < 2048 and abs(width / height - 4 / 3) < 0.02
    assert padded_inference_mb((width, height), 8) <= image.memory_budget_mb
    assert width * height >= 0.8e6  # the budget's worth, not a fraction of it


def test_the_screen_is_small_and_keeps_the_aspect_and_the_multiple() -> None:
    from edge_anime.runtime.shortlist import SCREEN_PIXELS, screen_shape

    assert screen_shape((384, 512), 8) == (120, 160)  # 4:3 at the screen's pixel count
    height, width = screen_shape((832, 1112), 8) or (0, 0)
    assert height % 8 == 0 and width % 8 == 0 and abs(height * width - SCREEN_PIXELS) < 0.1 * SCREEN_PIXELS
    assert screen_shape((48, 64), 4) is None  # small enough to time every candidate where it runs


def test_the_shortlist_holds_the_close_ones_that_fit_the_floor() -> None:
    from edge_anime.runtime.shortlist import shortlist
    from edge_anime.runtime.timing import Candidate, Timing

    def timing(label: str, speed: float) -> Timing:
        variant, precision = label.split("@")
        return Timing(Candidate(variant, precision), runs_images_per_s=[speed])

    rows = [timing("a@f32", 1.0), timing("b@bf16", 4.0), timing("c@bf16", 3.6), timing("d@f16", 3.5),
            timing("e@bf16", 9.0)]
    unfit = {"e"}  # the fastest, but under the quality floor
    chosen = shortlist(rows, lambda t: t.candidate.variant not in unfit)
    assert [c.label for c in chosen] == ["b@bf16", "c@bf16"]  # within 15 % of b, two at most, fastest first
    assert shortlist(rows, lambda t: False) == []


def test_near_ties_go_to_the_better_picture() -> None:
    from edge_anime.runtime.choice import pick

    rows = [{"variant": "int8", "images_per_s": 2.00, "quality_db": 39.1},
            {"variant": "int8_qat", "images_per_s": 2.06, "quality_db": 36.4},
            {"variant": "fp16", "images_per_s": 1.20, "quality_db": 74.9}]
    chosen = pick(rows)
    assert chosen is not None and chosen["variant"] == "int8"  # 3 % slower is noise; 2.7 dB is not
    assert pick(rows[1:]) == rows[1]  # 1.7x faster wins whatever the picture
    assert pick([]) is None


def _screened_config(write_config: Callable[..., Path], two_variants: Path, tmp_path: Path) -> Path:
    """A config whose timing shape (512x384) is large enough to be screened, with a model cache of its own."""
    return write_config({"model": {"path": str(_style_copy(two_variants, tmp_path))}, "image": {"max_side": 512},
                         "device": {"performance_hint": "LATENCY", "cache_dir": str(tmp_path / "ovcache")}})


@pytest.mark.slow
def test_a_large_shape_is_screened_small_and_the_shortlist_timed_where_it_runs(
        two_variants: Path, tmp_path: Path, write_config: Callable[..., Path],
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    from edge_anime.runtime import shortlist

    monkeypatch.setattr(shortlist, "PULSE_SECONDS", 0.5)  # a line after half a second of quiet, not five
    config = load_config(_screened_config(write_config, two_variants, tmp_path))
    with caplog.at_level(logging.INFO, logger="edge_anime.runtime"):
        chosen = choose(config, resolve_model(config.model.path, search_dirs=[]), seconds=PROBE_S)
    assert chosen.shape_hw == (384, 512) and chosen.screen_hw == (120, 160)
    screened = [f for f in chosen.figures if f.get("screen_images_per_s")]
    assert len(screened) >= 2 and all(f["screen_images_per_s"] > 0 for f in screened)
    final = [f for f in chosen.figures if f["images_per_s"]]
    assert 1 <= len(final) <= 2
    assert (chosen.variant, chosen.precision) in {(f["variant"], f["precision"]) for f in final}
    assert f"screening at 160x120, {len(screened)} of {len(screened)}:" in caplog.text
    assert f"at 512x384, {len(final)} of {len(final)}:" in caplog.text  # each stage counts its own (issue 42)
    assert "still measuring" in caplog.text  # no half-second went by without a line
    again = choose(config, resolve_model(config.model.path, search_dirs=[]), seconds=PROBE_S)
    assert again.how == "cached" and again.screen_hw == (120, 160) and again.figures == chosen.figures
    slower = [f for f in screened if not f["images_per_s"] and f["eligible"]]
    assert (f"{len(slower)} more slower at the 160x120 screen" in again.summary()) == bool(slower)


def test_a_screen_figure_under_the_quality_floor_is_not_called_slower() -> None:
    """Issue 42 item 21: the screen's fastest, left out for its picture, was listed among the "slower" ones."""
    from edge_anime.runtime.choice import Choice

    figures = [
        {"variant": "int8", "precision": "f32", "images_per_s": 1.0, "screen_images_per_s": 9.0, "eligible": True,
         "reason": None},
        {"variant": "int8", "precision": "bf16", "images_per_s": None, "screen_images_per_s": 14.0,
         "eligible": False, "reason": "31.2 dB estimated vs FP32, under 35 dB"},
        {"variant": "fp16", "precision": "f32", "images_per_s": None, "screen_images_per_s": 5.0, "eligible": True,
         "reason": None},
    ]
    line = Choice("int8", "f32", "measured", (768, 1024), figures, screen_hw=(120, 160)).summary()
    assert "1 more slower at the 160x120 screen (fp16@f32)" in line
    assert "1 left out at the 160x120 screen: int8@bf16 14.00 (31.2 dB estimated vs FP32, under 35 dB)" in line


def test_a_screen_that_fails_runs_the_default_and_keeps_nothing(
        two_variants: Path, tmp_path: Path, write_config: Callable[..., Path],
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """The screen's child killed at its deadline (as a hung or crashed plugin would end it): the style's
    default runs, the service starts, and the next start measures again."""
    from edge_anime.runtime import shortlist

    monkeypatch.setattr(shortlist, "SCREEN_TIMEOUT_S", 0.05)
    path = _screened_config(write_config, two_variants, tmp_path)
    config = load_config(path)
    with caplog.at_level(logging.WARNING, logger="edge_anime.runtime"):
        chosen = choose(config, resolve_model(config.model.path, search_dirs=[]), seconds=PROBE_S)
    assert chosen.how == "failed" and (chosen.variant, chosen.precision) == ("fp32", "f32")  # the default, at f32
    assert "the screen failed (screen in a child process: killed after 0 s)" in caplog.text
    assert "the next start measures again" in chosen.summary()
    assert _decisions(path) == []


def _as_live_variant(style_dir: Path, *, mean_db: float) -> None:
    """Mark the fp16 variant as a distilled student (training/ship_student.py's entry): live frames only."""
    manifest = yaml.safe_load((style_dir / "manifest.yaml").read_text(encoding="utf-8"))
    entry = manifest["variants"]["fp16"]
    entry["uses"] = ["live"]
    entry["quality"] = {"reference": "teacher: the style's default IR at f32", "psnr_db": {"min": 22.0,
                                                                                        "mean": mean_db}}
    (style_dir / "manifest.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False), encoding="utf-8")


def test_a_live_variant_never_serves_pictures_and_live_frames_run_it(
        two_variants: Path, tmp_path: Path, write_config: Callable[..., Path],
        caplog: pytest.LogCaptureFixture) -> None:
    """Issue 43: a student distilled for the booth's frames holds 30 dB against its teacher, not 35: the
    pictures' choice passes it by (even where it is the fastest), ``http.live.variant: auto`` runs it."""
    from edge_anime.http.live import live_config

    style_dir = _style_copy(two_variants, tmp_path)
    _as_live_variant(style_dir, mean_db=31.0)
    config = load_config(_config(write_config, style_dir, tmp_path / "ovcache"))
    style = resolve_model(config.model.path, search_dirs=[])
    assert [(v.name, v.uses, v.quality_mean_db) for v in style.variants()] == [
        ("fp32", ("pictures",), style.variants()[0].quality_mean_db), ("fp16", ("live",), 31.0)]
    with caplog.at_level(logging.WARNING, logger="edge_anime.runtime.choice"):
        chosen = choose(config, style, seconds=PROBE_S)
    assert (chosen.variant, chosen.how) == ("fp32", "only")  # the student is no candidate for a picture
    assert "fp16" not in caplog.text  # by design, so nothing to warn an operator about

    live = live_config(config)
    assert live.model.variant == "fp16" and live.image.faces == "off" and live.image.max_side == 384
    frames = open_engine(live.model_copy(update={"device": live.device.model_copy(
        update={"inference_precision": "f32"})}))[0]
    assert frames.variant_name == "fp16"
    pinned = config.model_copy(update={"http": config.http.model_copy(update={
        "live": config.http.live.model_copy(update={"variant": "fp32"})})})
    assert live_config(pinned).model.variant == "fp32"


def test_a_live_variant_under_the_live_floor_is_not_run_by_auto(
        two_variants: Path, tmp_path: Path, write_config: Callable[..., Path]) -> None:
    from edge_anime.http.live import live_config

    style_dir = _style_copy(two_variants, tmp_path)
    _as_live_variant(style_dir, mean_db=27.5)
    config = load_config(_config(write_config, style_dir, tmp_path / "ovcache"))
    assert live_config(config).model.variant == "auto"  # the pictures' own choice, not the weak student


@pytest.mark.parametrize("uses", [["booth"], [], "live"])
def test_a_variant_whose_uses_is_not_a_list_of_known_uses_is_refused_naming_the_key(
        two_variants: Path, tmp_path: Path, uses: object) -> None:
    from edge_anime.errors import ModelError

    style_dir = _style_copy(two_variants, tmp_path)
    manifest = yaml.safe_load((style_dir / "manifest.yaml").read_text(encoding="utf-8"))
    manifest["variants"]["fp16"]["uses"] = uses
    (style_dir / "manifest.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False), encoding="utf-8")
    with pytest.raises(ModelError, match=r"variants\.fp16\.uses: expected a list of pictures, live"):
        load_model_info(style_dir)


def test_the_bundled_toon_serves_its_student_to_live_frames_only() -> None:
    """The shipped student (training/ship_student.py): uses live, 30 dB mean vs its teacher, never a picture."""
    import openvino as ov

    from edge_anime.http.live import live_config
    from edge_anime.runtime.choice import candidates_for

    config = load_config(None)
    style = resolve_model("toon", search_dirs=list(config.model.dirs))
    student = {v.name: v for v in style.variants()}["student_int8"]
    assert student.uses == ("live",) and student.quality_mean_db is not None and student.quality_mean_db >= 30.0
    assert [c.variant for c in candidates_for(config, style, ov.Core())].count("student_int8") == 0
    live = live_config(config)
    assert live.model.variant == "student_int8"
    # the frames run one at a time on every core (a mirror), the pictures as the config says
    assert (live.device.performance_hint, config.device.performance_hint) == ("LATENCY", "THROUGHPUT")
