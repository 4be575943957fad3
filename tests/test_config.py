"""The config schema: every error class names its key path; relative paths; defaults; check and show."""
from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from edge_anime.cli import main
from edge_anime.config import DEFAULT_CONFIG_PATH, ENV_CONFIG, Config, load_config, parse_config
from edge_anime.errors import EXIT_CONFIG, ConfigError

from conftest import REPO_ROOT


def _error(raw: Any) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(raw, base_dir=Path("/srv/box"))
    return str(info.value)


@pytest.mark.parametrize(("raw", "message"), [
    # unknown keys, at every depth
    ({"image": {"max_sid": 5}}, "image.max_sid: unknown key"),
    ({"imagez": {}}, "imagez: unknown key"),
    ({"watch": {"retry": {"tries": 3}}}, "watch.retry.tries: unknown key"),
    # wrong types (strict: no "5" -> 5, no true -> 1)
    ({"image": {"max_side": "big"}}, "image.max_side: expected a valid integer, got 'big'"),
    ({"image": {"max_side": True}}, "image.max_side: expected a valid integer, got True"),
    ({"image": "max_side"}, "image: expected a valid dictionary"),
    ({"watch": {"extensions": "jpg"}}, "watch.extensions: expected a valid list"),
    # out of range
    ({"output": {"quality": 0}}, "output.quality: expected greater than or equal to 1, got 0"),
    ({"output": {"quality": 101}}, "output.quality: expected less than or equal to 100, got 101"),
    ({"image": {"multiple": 2}}, "image.multiple: expected greater than or equal to 4, got 2"),
    ({"image": {"memory_budget_mb": 10}}, "image.memory_budget_mb: expected greater than or equal to 64, got 10"),
    ({"service": {"metrics": {"port": 70000}}}, "service.metrics.port: expected less than or equal to 65535"),
    ({"watch": {"retry": {"max_attempts": 0}}}, "watch.retry.max_attempts: expected greater than or equal to 1"),
    # enums and the special forms
    ({"image": {"resize": "stretch"}},
     "image.resize: expected 'keep', 'max_side', 'fixed' or 'center_square', got 'stretch'"),
    ({"device": {"performance_hint": "FAST"}}, "device.performance_hint: expected 'LATENCY'"),
    ({"image": {"over_budget": "crash"}}, "image.over_budget: expected 'downscale' or 'refuse', got 'crash'"),
    ({"device": {"num_streams": "two"}}, 'device.num_streams: expected an integer >= 1 or "auto", got \'two\''),
    ({"device": {"num_requests": 0}}, 'device.num_requests: expected an integer >= 1 or "auto", got 0'),
    ({"device": {"enable_cpu_pinning": "yes"}}, 'device.enable_cpu_pinning: expected true, false or "auto"'),
    ({"image": {"fixed": "512by384"}}, 'image.fixed: expected a size "WxH" such as "512x384", got \'512by384\''),
    ({"output": {"name_template": "{stem}_{foo}.{ext}"}}, "output.name_template: unknown placeholder 'foo'"),
    ({"output": {"name_template": "out/{stem}.{ext}"}}, "output.name_template: a file name template, not a path"),
    # the document itself
    (["model", "device"], "expected a mapping of sections, got list"),
])
def test_error_names_the_key_path(raw: Any, message: str) -> None:
    assert message in _error(raw)


def test_every_error_is_reported_at_once() -> None:
    lines = _error({"image": {"max_side": "big", "resize": "stretch"}, "output": {"quality": 0}}).splitlines()
    assert sorted(line.split(":")[0] for line in lines) == ["image.max_side", "image.resize", "output.quality"]


def test_valid_special_forms() -> None:
    config = parse_config({"image": {"fixed": "640x480"}, "device": {"num_streams": 2, "enable_cpu_pinning": True}},
                          base_dir=Path("/srv/box"))
    assert config.image.fixed == (640, 480) and config.device.num_streams == 2
    assert config.device.enable_cpu_pinning is True and config.device.num_requests == "auto"


def test_missing_file_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("image:\n  max_side: [1024\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid YAML") as info:
        load_config(bad)
    assert str(bad) in str(info.value)


def test_empty_file_is_all_defaults(tmp_path: Path) -> None:
    (tmp_path / "empty.yaml").write_text("", encoding="utf-8")
    config = load_config(tmp_path / "empty.yaml")
    assert config.image.max_side == 1024 and config.source == (tmp_path / "empty.yaml").resolve()


def test_relative_paths_resolve_against_the_config_folder(tmp_path: Path, random_ir: Path) -> None:
    box = tmp_path / "etc" / "box"
    box.mkdir(parents=True)
    (box / "models").symlink_to(random_ir.parent)
    (box / "box.yaml").write_text(yaml.safe_dump({
        "model": {"path": f"models/{random_ir.name}/model.xml", "dirs": ["models", "/opt/models"]},
        "device": {"cache_dir": "cache"},
        "watch": {"inbox": "../drop", "done": "~/done"},
    }), encoding="utf-8")
    config = load_config(box / "box.yaml")
    assert Path(config.model.path) == box / "models" / random_ir.name / "model.xml"
    assert config.model.dirs == [box / "models", Path("/opt/models")]
    assert config.device.cache_dir == box / "cache"
    assert config.watch.root == box / "var"  # a default, anchored like a value from the file
    assert config.watch.inbox == tmp_path / "etc" / "drop" and config.watch.done == Path.home() / "done"
    assert config.model_copy().status_file() == box / "var" / "status.json"
    assert main(["config", "check", str(box / "box.yaml")]) == 0


def test_installed_model_names_stay_names(tmp_path: Path) -> None:
    config = parse_config({"model": {"path": "paprika"}}, base_dir=tmp_path)
    assert config.model.path == "paprika"


def test_no_path_means_the_bundled_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(ENV_CONFIG, raising=False)
    assert load_config(None).source == DEFAULT_CONFIG_PATH.resolve()
    (tmp_path / "env.yaml").write_text("image: {max_side: 300}\n", encoding="utf-8")
    monkeypatch.setenv(ENV_CONFIG, str(tmp_path / "env.yaml"))
    assert load_config(None).image.max_side == 300


def _non_paths(data: dict[str, Any]) -> dict[str, Any]:
    """Drop the keys holding paths: the file spells them relative, the schema absolute."""
    paths = {("model", "dirs"), ("device", "cache_dir"), ("watch", "root")}
    return {section: {k: v for k, v in values.items() if (section, k) not in paths}
            for section, values in data.items()}


def test_bundled_yaml_spells_the_schema_defaults() -> None:
    """configs/default.yaml documents every field with its default: the two must never drift apart."""
    from_file = load_config(DEFAULT_CONFIG_PATH).model_dump(mode="json", exclude={"source"})
    from_schema = Config().model_dump(mode="json", exclude={"source"})
    assert _non_paths(from_file) == _non_paths(from_schema)
    raw = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text(encoding="utf-8"))
    for section, values in from_schema.items():
        assert set(raw[section]) == set(values), f"{section}: keys missing from configs/default.yaml"


def test_check_reports_key_path_and_exits_78(write_config: Callable[..., Path],
                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = write_config({"device": {"num_streams": "two"}})
    assert main(["config", "check", str(path)]) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f'{path}: device.num_streams: expected an integer >= 1 or "auto", got \'two\'' in err


def test_check_refuses_a_missing_model(write_config: Callable[..., Path], tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    path = write_config({"model": {"path": str(tmp_path / "gone" / "model.xml")}})
    assert main(["config", "check", str(path)]) == EXIT_CONFIG
    assert "model.path" in capsys.readouterr().err


def test_check_accepts_a_good_file(write_config: Callable[..., Path], capsys: pytest.CaptureFixture[str]) -> None:
    path = write_config()
    assert main(["config", "check", str(path)]) == 0
    assert "ok" in capsys.readouterr().out


def test_show_fills_in_defaults(write_config: Callable[..., Path], capsys: pytest.CaptureFixture[str]) -> None:
    path = write_config({"image": {"max_side": 300}})
    assert main(["config", "show", str(path)]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["image"]["max_side"] == 300 and shown["image"]["memory_budget_mb"] == 1024
    assert shown["output"]["name_template"] == "{stem}_{style}.{ext}" and shown["watch"]["retry"]["max_attempts"] == 10
    assert set(shown) == {"model", "device", "image", "output", "pipeline", "watch", "service"}
    # what show prints is itself a valid config that means the same
    assert parse_config(shown, base_dir=path.parent) == load_config(path).model_copy(update={"source": None})


def test_check_in_a_real_process(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("image:\n  resize: stretch\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "edge_anime", "config", "check", str(bad)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == EXIT_CONFIG and "image.resize: expected 'keep'" in proc.stderr
