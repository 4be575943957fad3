"""The shipped systemd unit: `systemd-analyze verify` accepts it without a warning, and it says what the
service needs (notify readiness, restart policy, the EX_CONFIG stop, hardening, state and cache folders)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from deadlines import scaled

from edge_anime.config import load_config
from edge_anime.errors import EXIT_CONFIG

UNIT = Path(__file__).resolve().parent.parent / "configs" / "systemd" / "edge-anime.service"
HTTP_UNIT = UNIT.with_name("edge-anime-http.service")
EXAMPLE = UNIT.with_name("config.yaml")
SYSUSERS = UNIT.with_name("edge-anime.sysusers.conf")
TMPFILES = UNIT.with_name("edge-anime.tmpfiles.conf")
INSTALLED_BINARY = "/opt/edge-anime/.venv/bin/edge-anime"


def _unit_keys(unit: Path = UNIT) -> dict[str, dict[str, list[str]]]:
    """Section -> key -> values (systemd keys may repeat, so configparser's last-wins is not enough)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current = ""
    for raw in unit.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = line.strip("[]")
            sections[current] = {}
            continue
        key, _, value = line.partition("=")
        sections[current].setdefault(key, []).append(value)
    return sections


@pytest.mark.parametrize("source", [UNIT, HTTP_UNIT], ids=["watch", "http"])
def test_unit_passes_systemd_analyze_verify(tmp_path: Path, source: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian: apt-get install systemd)")
    # verify checks that ExecStart's binary exists: point it at this checkout's entry point.
    entry = Path(sys.executable).with_name("edge-anime")
    if not entry.exists():
        pytest.skip(f"{entry} missing: install the project (pip install -e .) first")
    unit = tmp_path / source.name
    unit.write_text(source.read_text().replace(INSTALLED_BINARY, str(entry)))
    proc = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=scaled(60),
                          check=False)
    # verify exits 0 even for unknown keys; its warnings name the file, so none may mention it.
    complaints = [ln for ln in (proc.stdout + proc.stderr).splitlines() if source.name in ln]
    assert proc.returncode == 0 and complaints == [], proc.stdout + proc.stderr


def test_unit_declares_notify_restart_policy_and_hardening() -> None:
    keys = _unit_keys()
    service = keys["Service"]
    assert service["Type"] == ["notify"]
    assert service["Restart"] == ["on-failure"]
    assert str(EXIT_CONFIG) in service["RestartPreventExitStatus"][0].split()
    assert int(service["WatchdogSec"][0]) > 0
    assert service["StateDirectory"] == ["edge-anime"] and service["CacheDirectory"] == ["edge-anime"]
    for key in ("NoNewPrivileges", "PrivateTmp"):
        assert service[key] == ["yes"], key
    assert service["ProtectSystem"] == ["strict"]
    assert "ReadWritePaths" in service
    assert "User" in service or service.get("DynamicUser") == ["yes"]
    assert INSTALLED_BINARY in service["ExecStart"][0] and "run" in service["ExecStart"][0].split()
    assert "ExecReload" in service and "-HUP" in service["ExecReload"][0]
    assert keys["Install"]["WantedBy"] == ["multi-user.target"]


def test_example_config_is_valid_and_uses_the_units_folders() -> None:
    config = load_config(EXAMPLE)
    assert config.watch.root == Path("/var/lib/edge-anime")            # StateDirectory
    assert config.device.cache_dir is not None and str(config.device.cache_dir).startswith("/var/cache/edge-anime")
    assert config.status_file() == Path("/run/edge-anime/status.json")  # RuntimeDirectory
    stop_timeout = int(_unit_keys()["Service"]["TimeoutStopSec"][0])
    assert config.service.drain_timeout_seconds < stop_timeout


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (Debian: apt-get install systemd)")
    return path


def test_sysusers_and_tmpfiles_make_the_user_and_its_setgid_folders(tmp_path: Path) -> None:
    """Both files applied for real, into a scratch root: the user the unit names, the folders it uses."""
    sysusers, tmpfiles = _tool("systemd-sysusers"), _tool("systemd-tmpfiles")
    for folder, source in (("sysusers.d", SYSUSERS), ("tmpfiles.d", TMPFILES)):
        (tmp_path / "etc" / folder).mkdir(parents=True)
        shutil.copy(source, tmp_path / "etc" / folder / "edge-anime.conf")
    for cmd in ([sysusers, f"--root={tmp_path}"], [tmpfiles, f"--root={tmp_path}", "--create"]):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=scaled(60), check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    users = {ln.split(":")[0]: ln.split(":") for ln in (tmp_path / "etc" / "passwd").read_text().splitlines()}
    service = _unit_keys()["Service"]
    user = users[service["User"][0]]
    assert user[5] == "/var/lib/edge-anime" and user[6] == "/usr/sbin/nologin"
    config = load_config(EXAMPLE)
    for folder in ("inbox", "outbox", "done", "failed"):
        made = (tmp_path / config.watch.folder(folder).relative_to("/")).stat()
        assert (oct(made.st_mode & 0o7777), made.st_uid) == ("0o2775", int(user[2])), folder
    assert (tmp_path / config.model.dirs[0].relative_to("/")).is_dir()
    assert config.device.cache_dir is not None
    assert (tmp_path / config.device.cache_dir.parent.relative_to("/")).is_dir()


def test_the_http_unit_runs_serve_with_the_same_hardening() -> None:
    """The HTTP unit differs from the watch folder's only where it must: what it runs, no watchdog pings, and
    no RuntimeDirectory (systemd would remove the watch service's status folder at its stop)."""
    watch, http = _unit_keys(UNIT)["Service"], _unit_keys(HTTP_UNIT)["Service"]
    assert http["ExecStart"] == [watch["ExecStart"][0].replace(" run ", " serve ")]
    differs = {key for key in watch.keys() | http.keys() if watch.get(key) != http.get(key)}
    assert differs == {"ExecStart", "WatchdogSec", "RuntimeDirectory"}
