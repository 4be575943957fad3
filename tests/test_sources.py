"""Loading checkpoints: every source kind is recognised from its bytes, every bad file gets a clear error.

The bad-file cases also go through the real CLI (``edge_anime.cli.main``) to check the exit status and the
one-line reason on stderr; they fail before any conversion starts, so they are cheap.
"""
from __future__ import annotations

import collections
import os
import re
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from edge_anime.cli import main  # noqa: E402
from edge_anime.errors import EXIT_CONFIG  # noqa: E402
from edge_anime_converters.generator import seeded_random_generator  # noqa: E402
from edge_anime_converters.sources import SourceError, detect_kind, load_source, resolve_upsample_align  # noqa: E402


class NeedsCode:
    """A class a weights_only unpickler refuses to construct (it would have to import this module)."""

    def __init__(self) -> None:
        self.payload = [1, 2, 3]


def _state(seeded_checkpoint: Path) -> collections.OrderedDict:
    return torch.load(seeded_checkpoint, weights_only=True)


def _bad_files(folder: Path, seeded_checkpoint: Path) -> dict[str, tuple[Path, str]]:
    """name -> (file, a phrase the error must contain)."""
    folder.mkdir(parents=True, exist_ok=True)
    data = seeded_checkpoint.read_bytes()
    files: dict[str, tuple[Path, str]] = {}

    def put(name: str, content: bytes, phrase: str) -> None:
        path = folder / name
        path.write_bytes(content)
        files[name] = (path, phrase)

    put("truncated.pt", data[: len(data) // 2], "truncated")
    put("random.pt", np.random.default_rng(3).integers(0, 256, 4096, dtype=np.uint8).tobytes(), "not a torch file")
    put("notes.pt", b"these are not the weights you are looking for\n" * 20, "text")
    put("empty.pt", b"", "empty")
    state = _state(seeded_checkpoint)
    missing = collections.OrderedDict(state)
    del missing["block_c.1.layers.1.1.weight"]
    extra = collections.OrderedDict(state)
    extra["block_f.0.weight"] = torch.zeros(3)
    wrong = collections.OrderedDict(state)
    wrong["out_layer.0.weight"] = torch.zeros(4, 32, 1, 1)
    for name, sd, phrase in (("missing_key.pt", missing, "1 missing keys: block_c.1.layers.1.1.weight"),
                             ("extra_key.pt", extra, "1 unexpected keys: block_f.0.weight"),
                             ("wrong_shape.pt", wrong, "out_layer.0.weight: (4, 32, 1, 1) (expected (3, 32, 1, 1))")):
        torch.save(sd, folder / name)
        files[name] = (folder / name, phrase)
    torch.save({"weights": NeedsCode()}, folder / "needs_code.pt")
    files["needs_code.pt"] = (folder / "needs_code.pt", "a pickle that needs code")
    return files


def test_state_dict_loads_strictly_and_matches_reference_key_list(seeded_checkpoint: Path) -> None:
    source = load_source(seeded_checkpoint, name="anything")
    assert source.kind == "state_dict" and source.upsample_align is True
    reference = Path(__file__).resolve().parents[2] / "shared" / "reference" / "animeganv2_state_dict.tsv"
    state = source.module.state_dict()
    assert sum(t.numel() for t in state.values()) == 2_143_552
    if reference.is_file():
        rows = [line.split("\t") for line in reference.read_text().splitlines() if line and not line.startswith("#")]
        assert [(k, "x".join(map(str, state[k].shape))) for k, _ in rows] == [(k, s) for k, s in rows]


@pytest.mark.slow
def test_kind_is_read_from_content_not_extension(tmp_path: Path, seeded_checkpoint: Path) -> None:
    module = seeded_random_generator(5)
    scripted = torch.jit.trace(module, torch.zeros(1, 3, 64, 64))
    scripted.save(str(tmp_path / "animeganv2_jit.bin"))
    (tmp_path / "plain.weights").write_bytes(seeded_checkpoint.read_bytes())
    assert detect_kind(tmp_path / "animeganv2_jit.bin") == "torchscript"
    assert detect_kind(tmp_path / "plain.weights") == "state_dict"
    legacy = tmp_path / "legacy.pth"
    torch.save(module.state_dict(), legacy, _use_new_zipfile_serialization=False)
    assert detect_kind(legacy) == "state_dict"
    assert load_source(legacy, name="legacy").module is not None


def test_upsample_align_defaults_follow_published_names(tmp_path: Path) -> None:
    assert resolve_upsample_align("paprika", tmp_path / "x.pt", None) is False
    assert resolve_upsample_align("mine", tmp_path / "face_paint_512_v2.pt", None) is True
    assert resolve_upsample_align("mine", tmp_path / "paprika.pt", None) is False
    assert resolve_upsample_align("paprika", tmp_path / "x.pt", True) is True
    assert resolve_upsample_align("unknown", tmp_path / "x.pt", None) is True


def test_every_bad_file_gives_a_clear_source_error(tmp_path: Path, seeded_checkpoint: Path) -> None:
    for name, (path, phrase) in _bad_files(tmp_path / "bad", seeded_checkpoint).items():
        with pytest.raises(SourceError) as info:
            load_source(path, name="bad")
        assert phrase in str(info.value), (name, str(info.value))
        assert str(path) in str(info.value), name


def test_bad_files_exit_non_zero_from_the_cli_and_leave_nothing(tmp_path: Path, seeded_checkpoint: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "models"
    for name, (path, phrase) in _bad_files(tmp_path / "bad", seeded_checkpoint).items():
        status = main(["convert", str(path), "--name", "bad", "--output", str(out), "--precision", "fp32"])
        err = capsys.readouterr().err
        assert status == EXIT_CONFIG, name
        # The reason is one line, the last; before it only convert's own progress lines (converters.progress).
        *steps, reason = err.splitlines()
        assert phrase in reason and "Traceback" not in err, (name, err)
        assert all(re.match(r"edge-anime convert: \[ *\d+\.\d s\] ", step) for step in steps), (name, err)
    assert not out.exists() or os.listdir(out) == []


def test_missing_checkpoint_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["convert", str(tmp_path / "nope.pt"), "--output", str(tmp_path)])
    assert status == EXIT_CONFIG
    assert "nope.pt does not exist" in capsys.readouterr().err
