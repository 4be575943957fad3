"""The config schema: every error class names its key path; relative paths; defaults; check and show."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from deadlines import scaled

from conftest import REPO_ROOT, mounted_tmpfs
from edge_anime.cli import main
from edge_anime.config import ENV_CONFIG, Config, load_config, parse_config
from edge_anime.errors import EXIT_CONFIG, ConfigError
from edge_anime.locations import bundled_config_path, bundled_models_dir, default_locations
from edge_anime.preflight import check_paths


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
     "image.resize: expected 'keep', 'max_side', 'fixed', 'center_square' or 'full', got 'stretch'"),
    ({"device": {"performance_hint": "FAST"}}, "device.performance_hint: expected 'LATENCY'"),
    ({"image": {"over_budget": "crash"}}, "image.over_budget: expected 'downscale' or 'refuse', got 'crash'"),
    ({"device": {"num_streams": "two"}}, 'device.num_streams: expected an integer >= 1 or "auto", got \'two\''),
    ({"device": {"num_requests": 0}}, 'device.num_requests: expected an integer >= 1 or "auto", got 0'),
    ({"device": {"enable_cpu_pinning": "yes"}}, 'device.enable_cpu_pinning: expected true, false or "auto"'),
    ({"image": {"fixed": "512by384"}}, 'image.fixed: expected a size "WxH" such as "512x384", got \'512by384\''),
    ({"output": {"name_template": "{stem}_{foo}.{ext}"}}, "output.name_template: unknown placeholder 'foo'"),
    ({"output": {"name_template": "out/{stem}.{ext}"}}, "output.name_template: a file name template, not a path"),
    # rules across keys, and values that pass a type check but fail at run time (issue 13, item 10)
    ({"watch": {"retry": {"initial_seconds": 90}}},
     "watch.retry: initial_seconds (90.0) is above max_seconds (60.0); expected initial_seconds <= max_seconds"),
    ({"watch": {"worker_id": ".."}}, "watch.worker_id: expected a folder name of letters, digits"),
    ({"watch": {"worker_id": "a/b"}}, "watch.worker_id: expected a folder name"),
    ({"service": {"metrics": {"host": "not a host"}}},
     "service.metrics.host: expected an IP address such as 127.0.0.1 (or localhost), got 'not a host'"),
    ({"output": {"name_template": "{stem:>100000}.{ext}"}},
     "output.name_template: {stem} takes no format spec or conversion"),
    ({"output": {"name_template": "{stem!r}.{ext}"}}, "output.name_template: {stem} takes no format spec"),
    ({"watch": {"settle_seconds": 0, "detector": "polling"}},
     "watch: settle_seconds: 0 with detector polling takes files that are still being written"),
    ({"watch": {"settle_seconds": 0}}, "watch: settle_seconds: 0 with detector auto"),
    # a non-loopback metrics address needs the opt-in (item 9)
    ({"service": {"metrics": {"host": "0.0.0.0"}}},
     "service.metrics: host 0.0.0.0 is reachable from other machines; set service.metrics.allow_remote: true"),
    # the HTTP service: loopback unless authenticated or knowingly open
    ({"http": {"host": "0.0.0.0"}},
     "http: host 0.0.0.0 is reachable from other machines; set http.auth_token_file (a Bearer token) or"),
    ({"http": {"host": "box.local"}}, "http.host: expected an IP address such as 127.0.0.1 (or localhost)"),
    ({"http": {"max_queue": 0}}, "http.max_queue: expected greater than or equal to 1"),
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


def test_a_bare_off_in_the_file_means_off(tmp_path: Path) -> None:
    """The config's comments say ``tone: off``; YAML 1.1 reads a bare off as false. Written as a person would
    write it, it means off; ``on`` is still no value these keys take."""
    path = tmp_path / "c.yaml"
    path.write_text("image:\n  tone: off\n  palette: off\n", encoding="utf-8")
    config = load_config(path)
    assert config.image.tone == "off" and config.image.palette == "off"
    path.write_text("image:\n  tone: on\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="image.tone"):
        load_config(path)


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


def test_relative_paths_resolve_against_the_config_folder(tmp_path: Path, narrow_ir: Path) -> None:
    # the quarter-width style: `config check` compiles it into the box's own cache, and the paths are the claim
    box = tmp_path / "etc" / "box"
    box.mkdir(parents=True)
    (box / "models").symlink_to(narrow_ir.parent)
    (box / "box.yaml").write_text(yaml.safe_dump({
        "model": {"path": f"models/{narrow_ir.name}/model.xml", "dirs": ["models", "/opt/models"]},
        "device": {"cache_dir": "cache"},
        "watch": {"inbox": "../drop", "done": "~/done"},
    }), encoding="utf-8")
    config = load_config(box / "box.yaml")
    assert Path(config.model.path) == box / "models" / narrow_ir.name / "model.xml"
    assert config.model.dirs == [box / "models", Path("/opt/models"), bundled_models_dir()]
    assert config.device.cache_dir == box / "cache"
    assert config.watch.root == default_locations().state  # not under the config's folder: the install's own
    assert config.watch.inbox == tmp_path / "etc" / "drop" and config.watch.done == Path.home() / "done"
    assert config.model_copy().status_file() == default_locations().state / "status.json"
    assert main(["config", "check", str(box / "box.yaml")]) == 0


def test_installed_model_names_stay_names(tmp_path: Path) -> None:
    config = parse_config({"model": {"path": "paprika"}}, base_dir=tmp_path)
    assert config.model.path == "paprika"


def test_no_path_means_the_bundled_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(ENV_CONFIG, raising=False)
    assert load_config(None).source == bundled_config_path().resolve()
    (tmp_path / "env.yaml").write_text("image: {max_side: 300}\n", encoding="utf-8")
    monkeypatch.setenv(ENV_CONFIG, str(tmp_path / "env.yaml"))
    assert load_config(None).image.max_side == 300


def test_bundled_yaml_spells_the_schema_defaults(tmp_path: Path) -> None:
    """configs/default.yaml documents every field with its default, paths included: the two never drift."""
    from_file = load_config(bundled_config_path()).model_dump(mode="json", exclude={"source"})
    from_schema = parse_config({}, base_dir=tmp_path).model_dump(mode="json", exclude={"source"})
    assert from_file == from_schema
    assert Config().model_dump(mode="json")["watch"]["root"] == str(default_locations().state)
    raw = yaml.safe_load(bundled_config_path().read_text(encoding="utf-8"))
    for section, values in from_schema.items():
        assert set(raw[section]) == set(values), f"{section}: keys missing from configs/default.yaml"


@pytest.mark.parametrize(("env", "kind", "state", "cache", "models"), [
    ({"STATE_DIRECTORY": "/var/lib/edge-anime", "CACHE_DIRECTORY": "/var/cache/edge-anime"}, "systemd",
     "/var/lib/edge-anime", "/var/cache/edge-anime/openvino", "/var/lib/edge-anime/models"),
    ({"STATE_DIRECTORY": "/var/lib/a:/var/lib/b"}, "systemd", "/var/lib/a", "/var/lib/a/cache/openvino",
     "/var/lib/a/models"),
])
def test_systemd_directories_win(env: dict[str, str], kind: str, state: str, cache: str, models: str) -> None:
    found = default_locations(env)
    assert (found.kind, str(found.state), str(found.cache), str(found.models)) == (kind, state, cache, models)


def test_a_checkout_keeps_its_state_beside_it_and_its_compiled_blobs_in_the_users_cache(tmp_path: Path) -> None:
    """The editable install the tests run from: var/ and models/ of the checkout (gitignored); the compiled
    blobs are a cache of the box, in the user's cache folder, never in the source tree (issue 44 item 10)."""
    home = tmp_path / "home"
    found = default_locations({"HOME": str(home)})
    assert found.kind == "checkout"
    assert (found.state, found.cache, found.models) == (REPO_ROOT / "var", home / ".cache" / "edge-anime" / "openvino",
                                                        REPO_ROOT / "models")
    assert REPO_ROOT not in found.cache.parents
    assert bundled_models_dir() == REPO_ROOT / "models" and bundled_config_path().parent == REPO_ROOT / "configs"


@pytest.mark.parametrize(("env", "cache"), [
    ({"HOME": "/home/u"}, "/home/u/.cache/edge-anime/openvino"),
    ({"HOME": "/home/u", "XDG_CACHE_HOME": "/fast/cache"}, "/fast/cache/edge-anime/openvino"),
    ({"HOME": "/home/u", "XDG_CACHE_HOME": "relative/cache"}, "/home/u/.cache/edge-anime/openvino"),  # XDG: ignored
    ({"HOME": "/home/u", "CACHE_DIRECTORY": "/var/cache/edge-anime"}, "/var/cache/edge-anime/openvino"),
    ({"XDG_CACHE_HOME": "/fast/cache", "CACHE_DIRECTORY": "/var/cache/a:/var/cache/b"}, "/var/cache/a/openvino"),
])
def test_the_model_cache_is_the_units_or_the_users(env: dict[str, str], cache: str) -> None:
    """A unit with only ``CacheDirectory=`` (a checkout or a venv run by systemd) caches there too."""
    assert str(default_locations(env).cache) == cache


def test_a_default_config_in_a_checkout_caches_in_xdg_cache_home(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CACHE_DIRECTORY", "STATE_DIRECTORY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert load_config(bundled_config_path()).device.cache_dir == tmp_path / "xdg" / "edge-anime" / "openvino"
    monkeypatch.setenv("CACHE_DIRECTORY", str(tmp_path / "unit"))
    assert load_config(bundled_config_path()).device.cache_dir == tmp_path / "unit" / "openvino"


def test_auto_means_the_default_and_show_prints_resolved_paths(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("watch: {root: auto}\ndevice: {cache_dir: auto}\nmodel: {dirs: auto}\n",
                                     encoding="utf-8")
    shown = subprocess.run([sys.executable, "-m", "edge_anime", "config", "show", str(tmp_path / "a.yaml")],
                           capture_output=True, text=True, check=True).stdout
    data = yaml.safe_load(shown)
    assert data["watch"]["root"] == str(REPO_ROOT / "var") and data["device"]["cache_dir"] == str(
        default_locations().cache)
    assert "`auto` folders are the folders for a checkout install" in shown
    assert data["model"]["dirs"] == [str(REPO_ROOT / "models")]


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
    assert set(shown) == {"model", "device", "image", "output", "pipeline", "watch", "service", "http", "video", "ray"}
    # what show prints is itself a valid config that means the same
    assert parse_config(shown, base_dir=path.parent) == load_config(path).model_copy(update={"source": None})


def test_check_in_a_real_process(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("image:\n  resize: stretch\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "edge_anime", "config", "check", str(bad)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=scaled(60))
    assert proc.returncode == EXIT_CONFIG and "image.resize: expected 'keep'" in proc.stderr


def test_rules_accept_what_they_should() -> None:
    config = parse_config({"watch": {"settle_seconds": 0, "detector": "inotify", "worker_id": "box-1.a_b",
                                     "retry": {"initial_seconds": 5, "max_seconds": 5}},
                           "service": {"metrics": {"host": "0.0.0.0", "allow_remote": True}}},
                          base_dir=Path("/srv/box"))
    assert config.service.metrics.allow_remote and config.watch.worker_id == "box-1.a_b"
    assert parse_config({"service": {"metrics": {"host": "::1"}}}, base_dir=Path("/srv")).service.metrics.host == "::1"


ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)
) + "image: {max_side: *i}\n"


def test_an_alias_bomb_is_refused_before_it_is_expanded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """9 levels of 9 aliases: 387 million values once expanded; refused from the node graph, in a subprocess
    bounded in time and memory so a regression fails here instead of taking the box down."""
    path = tmp_path / "bomb.yaml"
    path.write_text(ALIAS_BOMB, encoding="utf-8")
    limit = "import resource; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30)); "
    proc = subprocess.run([sys.executable, "-c", limit + "from edge_anime.cli import main; "
                           f"raise SystemExit(main(['config', 'check', {str(path)!r}]))"],
                          capture_output=True, text=True, timeout=scaled(30), check=False)
    assert proc.returncode == EXIT_CONFIG, proc.stderr
    assert "more than 100,000 values once its aliases (*name) are expanded" in proc.stderr
    assert proc.stderr.count("\n") == 1


def test_a_long_bad_value_is_cut_short_in_the_message() -> None:
    message = _error({"watch": {"extensions": [list(range(10_000))]}})
    assert len(message) < 300 and "..." in message


@pytest.mark.parametrize(("raw", "message"), [
    ({"watch": {"root": "/proc/self/x"}}, "watch.root: /proc/self/x/inbox is on a kernel filesystem"),
    ({"service": {"status_file": "/proc/self/status"}},
     "service.status_file: /proc/self/status is on a kernel filesystem"),
    ({"watch": {"inbox": "/etc/hostname/in"}},
     "watch.inbox: /etc/hostname/in is under /etc/hostname, which is not a folder"),
    ({"device": {"cache_dir": "/etc/hostname"}}, "device.cache_dir: /etc/hostname exists and is not a folder"),
])
def test_check_runs_the_start_up_path_checks(write_config: Callable[..., Path], raw: dict[str, dict[str, Any]],
                                             message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "check", str(write_config(raw))]) == EXIT_CONFIG
    assert message in capsys.readouterr().err


@pytest.fixture
def read_only_folder(tmp_path: Path) -> Iterator[Path]:
    """A folder nobody may write, root included: a read-only tmpfs (root ignores mode bits, not EROFS)."""
    with mounted_tmpfs(tmp_path / "ro", "ro,size=1m") as folder:
        yield folder


def test_check_notes_an_unwritable_folder_but_passes(write_config: Callable[..., Path], read_only_folder: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The operator who checks the config is seldom the service's user: writability is a note, not a failure
    (``run`` refuses it: preflight.check_paths with its default)."""
    config_path = write_config({"watch": {"root": str(read_only_folder / "var")}})
    assert main(["config", "check", str(config_path)]) == 0
    assert f"note: watch.root: {read_only_folder} is not writable by this user" in capsys.readouterr().err
    with pytest.raises(ConfigError, match=f"watch.root: {read_only_folder} is not writable"):
        check_paths(load_config(config_path))


def test_run_refuses_an_unwritable_folder_before_it_starts(write_config: Callable[..., Path],
                                                            read_only_folder: Path) -> None:
    """The same check as `config check`, but `run` is the service's user: there it is an error, exit 78."""
    config_path = write_config({"watch": {"root": str(read_only_folder / "var")}})
    proc = subprocess.run([sys.executable, "-m", "edge_anime", "run", "--config", str(config_path)],
                          capture_output=True, text=True, timeout=scaled(120), check=False)
    assert proc.returncode == EXIT_CONFIG, proc.stdout + proc.stderr
    assert f"watch.root: {read_only_folder} is not writable by this user" in proc.stderr


@pytest.mark.parametrize(("content", "message"), [
    (None, "does not exist; expected a file holding the Bearer token"),
    ("", "is empty; expected a Bearer token of at least 16 characters"),
    ("short-token\n", "the token is 11 characters; expected at least 16"),
    ("   \n", "the token is 0 characters; expected at least 16"),
    ("dir", "is a folder; expected a file holding the Bearer token"),
    ("0123456789abcdef-caf\u00e9\n", "the token holds '\u00e9' (U+00E9); a Bearer token is printable ASCII"),
    ("0644:0123456789abcdef-a-real-token\n", "mode 0644 lets other users of this box read or change the token"),
])
def test_check_refuses_a_token_file_serve_would_refuse(write_config: Callable[..., Path], tmp_path: Path,
                                                       content: str | None, message: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 28 items 10 and 15: `config check` said ok, then `serve` exited 78 on the token file. The same
    rules as serve's (http/token.py): a file other users may read is no secret, a non-ASCII token never
    matches."""
    token = tmp_path / "token"
    if content == "dir":
        token.mkdir()
    elif content is not None:
        mode, _, text = content.rpartition(":") if content.startswith("0644:") else ("0600", "", content)
        token.write_text(text, encoding="utf-8")
        token.chmod(int(mode, 8))
    config_path = write_config({"http": {"auth_token_file": str(token)}})
    assert main(["config", "check", str(config_path)]) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert f"http.auth_token_file: {token}" in err and message in err


def test_check_refuses_a_fifo_token_file_without_blocking(write_config: Callable[..., Path], tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    token = tmp_path / "token"
    os.mkfifo(token)  # opening it for reading would wait for a writer forever
    assert main(["config", "check", str(write_config({"http": {"auth_token_file": str(token)}}))]) == EXIT_CONFIG
    assert "is not a regular file" in capsys.readouterr().err


def test_check_accepts_a_good_token_file(write_config: Callable[..., Path], tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    token = tmp_path / "token"
    token.write_text("0123456789abcdef-a-real-token\n")
    token.chmod(0o600)
    assert main(["config", "check", str(write_config({"http": {"auth_token_file": str(token)}}))]) == 0
    assert ": ok (model" in capsys.readouterr().out


def _model_named(random_ir: Path, folder: Path, style: str) -> Path:
    """A copy of the session's IR whose manifest calls its style ``style`` (the digests cover only the IR)."""
    shutil.copytree(random_ir, folder)
    manifest = yaml.safe_load((folder / "manifest.yaml").read_text())
    manifest["style"] = style
    (folder / "manifest.yaml").write_text(yaml.safe_dump(manifest, allow_unicode=True), encoding="utf-8")
    return folder


@pytest.mark.parametrize(("style", "message"), [
    (".dot", "style '.dot' (the manifest's style, else its name) is a hidden name: its folder inbox/.dot/ would "
             "be made and never read"),
    ("cafe\u0301", "is not in Unicode NFC form: it looks like 'caf\u00e9'"),
    ("x.part", "matches watch.ignore_patterns"),
    ("RandGen", "differ only in case or Unicode form"),
])
def test_check_and_run_refuse_a_style_name_whose_folder_is_never_read(
        write_config: Callable[..., Path], random_ir: Path, tmp_path: Path, style: str, message: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 28 item 14: a style named `.dot` (or an NFD look-alike) passed `config check`, and `run` made its
    folder and never read it, silently."""
    model = _model_named(random_ir, tmp_path / "styled", style)
    config_path = write_config({"model": {"styles": [str(model)]}})
    assert main(["config", "check", str(config_path)]) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "model.styles[0]: " in err and message in err, err
    proc = subprocess.run([sys.executable, "-m", "edge_anime", "run", "--config", str(config_path)],
                          capture_output=True, text=True, timeout=scaled(120), check=False)
    assert proc.returncode == EXIT_CONFIG and message in proc.stderr, proc.stderr
    assert not (tmp_path / "watch" / "inbox" / style).exists()


def test_check_accepts_an_nfc_style_name(write_config: Callable[..., Path], random_ir: Path, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    model = _model_named(random_ir, tmp_path / "styled", "caf\u00e9")
    assert main(["config", "check", str(write_config({"model": {"styles": [str(model)]}}))]) == 0
    assert "also serves caf\u00e9" in capsys.readouterr().out


def test_an_empty_folder_named_like_a_style_does_not_shadow_it(tmp_path: Path) -> None:
    """Issue 42 item 10: ``mkdir toon`` (or ``stylize photos -o toon``) in the current directory made every
    later run exit 78 ("model.path: toon/manifest.yaml: no manifest.yaml"). A bare name is an installed style;
    a folder here is a path only by its form (``./toon``)."""
    (tmp_path / "toon").mkdir()
    env = {k: v for k, v in os.environ.items() if k != ENV_CONFIG}
    bare = subprocess.run([sys.executable, "-m", "edge_anime", "config", "check"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=scaled(120))
    assert bare.returncode == 0 and "model toon" in bare.stdout, bare.stdout + bare.stderr
    here = tmp_path / "here.yaml"
    here.write_text("model:\n  path: ./toon\n", encoding="utf-8")
    pathlike = subprocess.run([sys.executable, "-m", "edge_anime", "config", "check", str(here)], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=scaled(120))
    assert pathlike.returncode == EXIT_CONFIG and "manifest" in pathlike.stderr, pathlike.stderr
    (tmp_path / "mystyle").mkdir()
    mine = tmp_path / "mine.yaml"
    mine.write_text("model:\n  path: mystyle\n", encoding="utf-8")
    named = subprocess.run([sys.executable, "-m", "edge_anime", "config", "check", str(mine)], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=scaled(120))
    assert named.returncode == EXIT_CONFIG, named.stderr
    assert "a folder mystyle is in the current directory: write ./mystyle to use it" in named.stderr


def test_a_tab_and_a_list_items_error_are_named_with_their_file(tmp_path: Path) -> None:
    """Issue 42 item 20: a tab said "found character that cannot start any token" (in "<unicode string>"), and
    a style in model.styles that is not installed named its key but not the config file."""
    tabbed = tmp_path / "tabbed.yaml"
    tabbed.write_text("image:\n\tmax_side: 512\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(tabbed)
    assert str(caught.value) == (f"{tabbed}: not valid YAML: a tab at line 2, column 1: YAML indents with spaces, "
                                 "never tabs")
    broken = tmp_path / "broken.yaml"
    broken.write_text("image:\n  max_side: [1,\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"broken.yaml: not valid YAML at line 3, column 1: "):
        load_config(broken)
    styles = tmp_path / "styles.yaml"
    styles.write_text("model:\n  styles: [nope]\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != ENV_CONFIG}
    proc = subprocess.run([sys.executable, "-m", "edge_anime", "config", "check", str(styles)], env=env,
                          capture_output=True, text=True, timeout=scaled(120))
    assert proc.returncode == EXIT_CONFIG
    assert f"{styles.resolve()}: model.styles[0]: no installed model named 'nope'" in proc.stderr, proc.stderr
